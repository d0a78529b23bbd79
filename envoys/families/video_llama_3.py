"""VideoLLaMA 3 (model_type video_llama_3): a packed SigLIP-shaped tower, per-image attention, a projector, a Qwen2
text model. Images only: videos are another issue.

``VideoLlama3Model.forward`` scatters the projected image features into the
token embeddings (``inputs_embeds_masked_scatter_0``, argument 1; ``_1`` is
video, whose values are not served here). The tower (``model.vision_model``, a
`PackedSiglipVision`) embeds each patch with a convolution
(``embeddings.patch_embedding``, ``vision.patch_embed``; no learned positions:
the attention's 2D rotary embedding places each patch), runs the SigLIP-shaped
blocks ``encoder.layers`` (``layer_norm1``, ``self_attn`` with ``out_proj``,
``layer_norm2``, ``mlp`` with ``fc1`` / ``fc2``), whose attention splits at
``cu_seqlens`` and calls the kernel once per image (under eager,
``attention_scores`` and ``attention_probabilities`` hold each image's pattern
on the diagonal of one tensor: `envoys.towers.per_image`), and ends in ``post_layernorm``
(``vision.norm``, whose output is ``tower_output``); every image's patches run
packed, each image's in merge-block order at its ``merge_size``
(``image_merge_sizes``; raster order at 1). Then, still
inside the tower's forward, ``pixel_unshuffle`` puts each image's patches back
in raster order and resamples the grid bilinearly by ``1 / merge_size``; images
are processed with ``merge_size`` 1 (the stock image processor's), so there
every patch is one image token. The projector (``model.projector``, ``readout``:
Linear, GELU, Linear) maps the tower's ``last_hidden_state`` token by token, and
its output is ``image_features``. The text model is Qwen2's. Videos are not
served (another issue): a prompt with videos runs the tower a second time in
the same forward, after the images, and scatters at ``_1``. The grids
(``vision.patch_grid``) have no layout for this family yet.
"""

from __future__ import annotations

from transformers.models.video_llama_3.modeling_video_llama_3 import (
    VideoLlama3VisionAttention,
    VideoLlama3VisionEncoderLayer,
    VideoLlama3VisionMLP,
    VideoLlama3VisionModel,
)

from ..towers.encoder_names import ENCODER_BLOCK_RENAME, ENCODER_TOWER_RENAME
from ..towers.packed_siglip import PackedSiglipAttention, PackedSiglipVision
from ..vision.tower import PackedVisionLayer, PackedVisionMlp
from . import Family

#: The inner model's text model, tower and projector, and the tower's own names (the inner model's ``vision_model``
#: is the tower itself).
RENAME = {
    "model.language_model.embed_tokens": "embed_tokens",
    "model.language_model.layers": "layers",
    "model.language_model.norm": "norm",
    "model.vision_model": "vision",
    "model.projector": "projector",
    **ENCODER_TOWER_RENAME,
    "post_layernorm": "norm",
    **ENCODER_BLOCK_RENAME,
}

ENVOYS = {
    VideoLlama3VisionModel: PackedSiglipVision,
    VideoLlama3VisionEncoderLayer: PackedVisionLayer,
    VideoLlama3VisionAttention: PackedSiglipAttention,
    VideoLlama3VisionMLP: PackedVisionMlp,
}

FAMILY = Family("video_llama_3", RENAME, ENVOYS, "model.language_model.layers")
