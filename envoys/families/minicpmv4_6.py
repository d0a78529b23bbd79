"""MiniCPM-V 4.6 (model_type minicpmv4_6): a packed SigLIP-NaViT tower merged inside, per-image attention, the merger,
on a Qwen3.5 text model.

``MiniCPMV4_6Model.forward`` scatters the merged image features
(``inputs_embeds_masked_scatter_0``, argument 1; ``_1`` is video). The tower
(``model.vision_tower``, a `MiniCPMVision`; blocks ``encoder.layers``, SigLIP's
names) is packed, every source image and slice one unit, and attends per unit
as the Qwen ViT does (`envoys.towers.minicpm`); under 16x (the default) its
``vit_merger`` folds the stream 2x2 after block ``insert_layer_id``. The
projector is the merger (``model.merger``), whose output is a list of one tensor
per unit. The text model is Qwen3.5's gated-DeltaNet hybrid (`envoys.blocks.deltanet`).

Unavailable: ``vision.image_size`` (each unit keeps its own size), and, as on
Qwen3.5, the attention values of the DeltaNet blocks and the DeltaNet values of
the full-attention blocks.
"""

from __future__ import annotations

from transformers.models.minicpmv4_6.modeling_minicpmv4_6 import (
    MiniCPMV4_6VisionAttention,
    MiniCPMV4_6VisionEncoderLayer,
    MiniCPMV4_6VisionMLP,
    MiniCPMV4_6VisionModel,
)

from ..towers.minicpm import (
    MINICPM_BATCHING,
    MINICPM_GRIDS,
    MINICPM_RENAME,
    MINICPM_TEXT_ENVOYS,
    TEXT_LAYERS,
    MiniCPMVision,
    MiniCPMVisionAttention,
    vit_merger_skipped,
)
from ..vision.tower import PackedVisionLayer, PackedVisionMlp
from . import Family

RENAME = dict(MINICPM_RENAME)

ENVOYS = {
    MiniCPMV4_6VisionModel: MiniCPMVision,
    MiniCPMV4_6VisionEncoderLayer: PackedVisionLayer,
    MiniCPMV4_6VisionAttention: MiniCPMVisionAttention,
    MiniCPMV4_6VisionMLP: PackedVisionMlp,
    **MINICPM_TEXT_ENVOYS,
}

FAMILY = Family("minicpmv4_6", RENAME, ENVOYS, TEXT_LAYERS, not_served=vit_merger_skipped,
                grid_layout=MINICPM_GRIDS, batching=MINICPM_BATCHING)
