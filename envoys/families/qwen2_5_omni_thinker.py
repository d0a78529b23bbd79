"""Qwen2.5-Omni's thinker (model_type qwen2_5_omni_thinker): Qwen2.5-VL's windowed ViT and a Whisper-like audio tower
on a Qwen2 text model with M-RoPE.

``Qwen2_5OmniThinkerForConditionalGeneration`` is the part of Qwen2.5-Omni
that reads and writes text (the talker and the token-to-wave model, which
speak, are other classes, not served). Its inner model,
``Qwen2_5OmniThinkerModel``, scatters AUDIO FIRST: its forward's
``inputs_embeds.masked_scatter`` calls are the audio features (``_0``), the
merged image features (``_1``, argument 1: ``vision.image_features``) and the
merged video features (``_2``), each only when the prompt carries that
medium; the family's `Scatter` says the image's is call 1 (nnsight numbers
the calls in the source, so an image-only prompt still reads ``_1``).

The tower (``model.visual``, ``vision``) is Qwen2.5-VL's, copied: a
`QwenVision` (packed, its ``merger`` the projector inside), blocks
``blocks`` (``attn``, ``mlp``, ``norm1``, ``norm2``, RMSNorms, a gated SiLU
MLP), permuting its stream into attention windows at entry
(``self_permute_input_for_window_attn_0``, whose argument 1 is
``vision.window_index``; ``qwen2_5_omni.vision-windows``) and restoring
merge-block order after the merger, so every block's values, ``tower_output``
and the merger's output are in window order and ``image_features`` in scatter
order. The blocks not in ``fullatt_block_indexes`` call the attention kernel
once per window, the others once per image (``qwen2_5_omni.vision-attention``).
The text model (``model.language_model``) is Qwen2's blocks under M-RoPE;
``lm_head`` is at the root.

Unavailable: the tower's ``attention_scores`` and ``attention_probabilities``
(one kernel call per image or window, `PER_IMAGE`) and ``image_size`` (any
resolution: ``image_grid_thw`` says each image's size). The audio tower
(``model.audio_tower``, ``Qwen2_5OmniAudioEncoder``) and the video scatter
are left under their native names here: no audio or video value is served by
this family yet (its audio attention's per-chunk kernel calls are exposed,
``qwen2_5_omni.audio-attention``, as the Qwen ViT's are).
"""

from __future__ import annotations

from transformers.models.qwen2_5_omni.modeling_qwen2_5_omni import (
    Qwen2_5OmniAudioEncoder,
    Qwen2_5OmniAudioEncoderLayer,
    Qwen2_5OmniMLP,
    Qwen2_5OmniVisionAttention,
    Qwen2_5OmniVisionBlock,
    Qwen2_5OmniVisionEncoder,
)

from rewrites.image_scatter import Scatter

from ..audio import Audio, AudioLayer
from ..towers.qwen import QWEN_GRIDS, QWEN_VIT_RENAME, QwenVision, QwenVisionAttention
from ..vision.tower import PackedVisionLayer, PackedVisionMlp
from . import Family

#: The thinker scatters audio (_0), then images (_1), then videos (_2).
OMNI_SCATTER = Scatter(media=("audio", "image", "video"))
#: What the thinkers serve: images, videos (on the same tower) and audio.
OMNI_MEDIA = ("image", "video", "audio")

#: The Whisper-like audio tower under ``audio``, its pre-norm blocks' norms and MLP under the standard names. The
#: block's MLP is inline (``fc1``, the activation, ``fc2``): ``mlp`` names ``fc2``, whose output is what the MLP adds.
AUDIO_RENAME = {
    "model.audio_tower": "audio",
    "self_attn_layer_norm": "input_layernorm",
    "final_layer_norm": "post_attention_layernorm",
    "fc2": "mlp",
}

RENAME = {**QWEN_VIT_RENAME, **AUDIO_RENAME}

ENVOYS = {
    Qwen2_5OmniVisionEncoder: QwenVision,
    Qwen2_5OmniVisionBlock: PackedVisionLayer,
    Qwen2_5OmniVisionAttention: QwenVisionAttention,
    Qwen2_5OmniMLP: PackedVisionMlp,
    Qwen2_5OmniAudioEncoder: Audio,
    Qwen2_5OmniAudioEncoderLayer: AudioLayer,
}

FAMILY = Family("qwen2_5_omni_thinker", RENAME, ENVOYS, "model.language_model.layers", scatter=OMNI_SCATTER,
                grid_layout=QWEN_GRIDS, media=OMNI_MEDIA)
