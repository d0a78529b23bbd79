"""Qwen2.5-Omni's thinker (model_type qwen2_5_omni_thinker): Qwen2.5-VL's windowed ViT and a Whisper-like audio tower
on a Qwen2 text model with M-RoPE.

``Qwen2_5OmniThinkerForConditionalGeneration`` is the part of Qwen2.5-Omni
that reads and writes text (the talker and the token-to-wave model, which
speak, are other classes, not served). Its inner model,
``Qwen2_5OmniThinkerModel``, scatters AUDIO FIRST: its forward's
``inputs_embeds.masked_scatter`` calls are the audio features (``_0``), the
merged image features (``_1``, argument 1: ``vision.image_features``) and the
merged video features (``_2``), each only when the prompt carries that
medium. The family's `Scatter` lists the three calls' media in that order
(nnsight numbers the calls in the source, so an image-only prompt still
reads the image's at ``_1``).

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

Videos (``Family.media``): the same tower runs on them, after the images
(``model.video``, the tower's run on the videos), and the host scatters the
merged video features at ``_2`` (``vision.video_token_mask``,
``vision.video_features``). The host encodes the images and the videos
before it scatters either, so the video run's values come before
``image_features``: read ``model.video``'s values, then ``image_features``,
then ``video_features``.

Audio: the Whisper-like tower (``model.audio_tower``, ``audio``, an `Audio`)
packs every clip's frames in one row, ``[1, frames, audio_hidden_size]``,
after two convolutions and sinusoidal positions; its blocks (``layers``,
`AudioLayer`) are pre-norm, ``x + self_attn(self_attn_layer_norm(x))`` then
``x + fc2(act(fc1(final_layer_norm(x))))``: the norms answer to
``input_layernorm`` and ``post_attention_layernorm`` and ``fc2`` to ``mlp``
(the MLP is inline, so its last linear's output is what it adds), so
``layer_input + attention_output + mlp_output == layer_output``. The
attention calls its kernel once per chunk of ``n_window * 2`` mel frames
(``qwen2_5_omni.audio-attention``, the Qwen ViT's shape). After the blocks the
tower pools pairs of frames, norms (``ln_post``) and projects (``proj``) to
the text width: ``audio.tower_output``, ``[1, audio_tokens, hidden_size]``,
which the host scatters first (``_0``, ``audio.audio_features``,
``audio.audio_token_mask``). The processor pads every clip to 30 s
(``input_features [clips, 128, 3000]``) and gives its length in
``feature_attention_mask``; the tower reads only that length.

Unavailable: ``image_size`` (any resolution: ``image_grid_thw`` says each
image's size); the audio tower's attention interior (its kernel calls are
rewritten, but no standard value is bound to them).
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
from . import Family, Media

#: The thinker scatters audio (_0), then images (_1), then videos (_2).
OMNI_SCATTER = Scatter(media=("audio", "image", "video"))
#: What the thinkers serve: images, videos (on the same tower) and audio.
OMNI_MEDIA = Media(("image", "video", "audio"))

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
