"""MiniCPM-V 4.7 (model_type minicpmv4_7): MiniCPM-V 4.6's layout (`envoys.towers.minicpm`) under canvas M-RoPE.

transformers builds 4.7's tower, merger and host as copies of 4.6's
(``MiniCPMV4_7*``): the packed SigLIP-NaViT tower at ``model.vision_tower``
(a `MiniCPMVision`, its ``vit_merger`` folding the stream 2x2 after block
``insert_layer_id`` under 16x, the default), per-unit attention (under eager,
each unit's pattern on the diagonal of one tensor: `envoys.towers.per_image`),
the merger at ``model.merger`` (the projector, a list of one tensor per unit),
the scatter ``inputs_embeds_masked_scatter_0`` in ``MiniCPMV4_7Model.forward``,
on a Qwen3.5 text model. What differs is where the text positions come from: the host computes 3D positions that lay
each image's tokens out on a canvas (the processor's ``mm_token_type_ids``
and the marker tokens' ids in the config) before the text model runs, which
changes no standard value's meaning. Unavailable as on MiniCPM-V 4.6.
"""

from __future__ import annotations

from transformers.models.minicpmv4_7.modeling_minicpmv4_7 import (
    MiniCPMV4_7VisionAttention,
    MiniCPMV4_7VisionEncoderLayer,
    MiniCPMV4_7VisionMLP,
    MiniCPMV4_7VisionModel,
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
    **MINICPM_TEXT_ENVOYS,
    MiniCPMV4_7VisionModel: MiniCPMVision,
    MiniCPMV4_7VisionEncoderLayer: PackedVisionLayer,
    MiniCPMV4_7VisionAttention: MiniCPMVisionAttention,
    MiniCPMV4_7VisionMLP: PackedVisionMlp,
}

FAMILY = Family("minicpmv4_7", RENAME, ENVOYS, TEXT_LAYERS, not_served=vit_merger_skipped,
                grid_layout=MINICPM_GRIDS, batching=MINICPM_BATCHING)
