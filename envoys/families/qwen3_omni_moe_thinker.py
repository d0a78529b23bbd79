"""Qwen3-Omni-MoE's thinker (model_type qwen3_omni_moe_thinker): Qwen3-VL's ViT with DeepStack and a Whisper-like
audio tower on a Qwen3 mixture-of-experts text model with interleaved M-RoPE.

``Qwen3OmniMoeThinkerForConditionalGeneration`` is the part of Qwen3-Omni
that reads and writes text (the talker and code-to-wave model are other
classes, not served). Its inner model, ``Qwen3OmniMoeThinkerModel``,
scatters audio first, as Qwen2.5-Omni's does (`OMNI_SCATTER`): audio
(``_0``), the merged image features (``_1``, argument 1:
``vision.image_features``), the merged video features (``_2``).

The tower (``model.visual``, ``vision``) is Qwen3-VL's, copied: a
`QwenVision` (packed, a learned ``pos_embed`` after ``patch_embed``, one
attention kernel call per image, ``qwen3_omni_moe.vision-attention``; its
``merger`` the projector). It taps the blocks in
``vision_config.deepstack_visual_indexes``, each merged by its own
``vision.merger_list[k]`` (native path; transformers also names it
``deepstack_merger_list``), and the text model adds merger k's output at the
image positions after text block k (``layers[k].deepstack_output``, a
`DeepstackLayer` pinned to occurrence k of ``self__deepstack_process_0``:
``qwen3_omni_moe.deepstack``), as on Qwen3-VL.

The text blocks (``model.language_model.layers``) are Qwen3's attention and,
as ``mlp``, a ``Qwen3OmniMoeThinkerTextSparseMoeBlock`` (a top-k router
``mlp.gate`` over the routed ``mlp.experts``, no shared expert), or a dense
MLP on the blocks in ``mlp_only_layers`` or off ``decoder_sparse_step``. The
sparse block returns the routed sum alone, so ``layer_input +
attention_output + mlp_output == layer_output`` holds on every block; the
MLP is a `RoutedMlp`, whose ``router_logits`` are the router's ``F.linear``
output, ``[tokens, experts]`` (Unavailable on a dense block).

Videos and audio are served as on Qwen2.5-Omni's thinker
(`envoys.families.qwen2_5_omni_thinker`): ``model.video`` (the tower's run
on the videos, which comes before ``image_features``),
``vision.video_token_mask`` and ``vision.video_features`` (``_2``), and
``model.audio``, the Whisper-like tower with pre-norm `AudioLayer` blocks
(``fc2`` as ``mlp``), whose ``tower_output`` (after ``ln_post``, ``proj1``,
the activation and ``proj2``: ``[1, audio_tokens, hidden_size]``) is what the
host scatters first (``audio.audio_features``, ``_0``). Its convolutions are
three 2D stride-2 ones over the mel bins and frames, and its attention calls
the kernel once per window of ``n_window_infer`` mel frames
(``qwen3_omni_moe.audio-attention``). The processor pads a batch of clips to
the longest only. On a prompt with images and videos, DeepStack adds both
media's tapped features at their positions, in prompt order, so
``deepstack_output`` then has a row per image and video token.

Unavailable: ``image_size`` (any resolution), ``window_index`` (no windows),
``deepstack_output`` past the taps, ``mlp.router_logits`` on dense blocks, and
the audio tower's attention interior (rewritten, bound to no standard value).
"""

from __future__ import annotations

from transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe import (
    Qwen3OmniMoeAudioEncoder,
    Qwen3OmniMoeAudioEncoderLayer,
    Qwen3OmniMoeThinkerTextDecoderLayer,
    Qwen3OmniMoeVisionAttention,
    Qwen3OmniMoeVisionBlock,
    Qwen3OmniMoeVisionEncoder,
    Qwen3OmniMoeVisionMLP,
)

from ..audio import Audio, AudioLayer
from ..blocks.deepstack import DeepstackLayer
from ..towers.qwen import QWEN_GRIDS, QwenVision, QwenVisionAttention
from ..vision.tower import PackedVisionLayer, PackedVisionMlp
from . import Family
from .qwen2_5_omni_thinker import AUDIO_RENAME, OMNI_MEDIA, OMNI_SCATTER
from .qwen3_vl import RENAME as QWEN3_VL_RENAME

RENAME = {**QWEN3_VL_RENAME, **AUDIO_RENAME}

ENVOYS = {
    Qwen3OmniMoeThinkerTextDecoderLayer: DeepstackLayer,
    Qwen3OmniMoeVisionEncoder: QwenVision,
    Qwen3OmniMoeVisionBlock: PackedVisionLayer,
    Qwen3OmniMoeVisionAttention: QwenVisionAttention,
    Qwen3OmniMoeVisionMLP: PackedVisionMlp,
    Qwen3OmniMoeAudioEncoder: Audio,
    Qwen3OmniMoeAudioEncoderLayer: AudioLayer,
}

FAMILY = Family("qwen3_omni_moe_thinker", RENAME, ENVOYS, "model.language_model.layers", scatter=OMNI_SCATTER,
                grid_layout=QWEN_GRIDS, media=OMNI_MEDIA)
