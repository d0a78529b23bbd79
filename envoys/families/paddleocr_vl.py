"""PaddleOCR-VL (model_type paddleocr_vl): a packed SigLIP-shaped tower, per-image attention, a projector, an
ERNIE-4.5 text model with M-RoPE.

``PaddleOCRVLModel.forward`` scatters the projected image features into the
token embeddings (``inputs_embeds_masked_scatter_0``, argument 1). The tower
(``model.visual``, a `PackedSiglipVision`) holds its parts one level down, in
``vision_model``: the patch convolution (``embeddings.patch_embedding``,
``vision.patch_embed``) and learned position embeddings resampled to each
image's grid, the SigLIP-shaped blocks ``encoder.layers`` (``layer_norm1``,
``self_attn`` with ``out_proj``, ``layer_norm2``, ``mlp`` with ``fc1`` /
``fc2``), whose attention splits at ``cu_seqlens`` and calls the kernel once
per image (under eager, ``attention_scores`` and ``attention_probabilities``
hold each image's pattern on the diagonal of one tensor:
`envoys.towers.per_image`), and the final norm
``post_layernorm`` (``vision.norm``). Every image's patches run packed, each
image's in raster order. The projector (``model.projector``, outside the tower)
reads the tower's ``last_hidden_state`` (``tower_output``) with
``image_grid_thw``, LayerNorms it, folds each ``spatial_merge_size`` square of
patches into one row and maps it to the text width, image by image, so its
output, one row per image token in raster order over each image's merged grid,
is ``image_features``. The text blocks are ERNIE-4.5's (a plain pre-norm block).
The grids (``vision.patch_grid``) have no layout for this family yet.
"""

from __future__ import annotations

from transformers.models.paddleocr_vl.modeling_paddleocr_vl import (
    PaddleOCRVisionAttention,
    PaddleOCRVisionEncoderLayer,
    PaddleOCRVisionMLP,
    PaddleOCRVisionModel,
)

from ..towers.encoder_names import ENCODER_BLOCK_RENAME, ENCODER_TOWER_RENAME, VISION_MODEL
from ..towers.packed_siglip import PackedSiglipAttention, PackedSiglipVision
from ..vision.tower import PackedVisionLayer, PackedVisionMlp
from . import Family

#: The inner model's text model, tower and projector; the tower's own names one level down, in its ``vision_model``.
RENAME = {
    "model.language_model.embed_tokens": "embed_tokens",
    "model.language_model.layers": "layers",
    "model.language_model.norm": "norm",
    "model.visual": "vision",
    "model.projector": "projector",
    **{f"{VISION_MODEL}.{key}": name for key, name in ENCODER_TOWER_RENAME.items()},
    f"{VISION_MODEL}.post_layernorm": "norm",
    **ENCODER_BLOCK_RENAME,
}

ENVOYS = {
    PaddleOCRVisionModel: PackedSiglipVision,
    PaddleOCRVisionEncoderLayer: PackedVisionLayer,
    PaddleOCRVisionAttention: PackedSiglipAttention,
    PaddleOCRVisionMLP: PackedVisionMlp,
}

FAMILY = Family("paddleocr_vl", RENAME, ENVOYS, "model.language_model.layers")
