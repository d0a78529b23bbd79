"""MiniCPM-OCR (model_type minicpm_ocr): MiniCPM-V 4.6's layout (`envoys.towers.minicpm`), downsampling 4x by default.

transformers builds MiniCPM-OCR's classes as copies of MiniCPM-V 4.6's
(``MiniCPMOcr*``): the packed SigLIP-NaViT tower at ``model.vision_tower`` (a
`MiniCPMVision`), per-unit attention (under eager, each unit's pattern on the
diagonal of one tensor: `envoys.towers.per_image`), the merger at
``model.merger`` (the projector, a list of one tensor per unit), the scatter
``inputs_embeds_masked_scatter_0`` in ``MiniCPMOcrModel.forward``, on a
Qwen3.5 text model. Its ``downsample_mode`` is "4x": the tower's forward
skips the ``vit_merger``, so every block runs on every patch
(``vision.merged_after`` is None) and the merger folds 2x2 patches into one
image token; the image processor may keep a small image's size or upscale it
(``small_image_upsize``). Unavailable as on MiniCPM-V 4.6.
"""

from __future__ import annotations

from transformers.models.minicpm_ocr.modeling_minicpm_ocr import (
    MiniCPMOcrVisionAttention,
    MiniCPMOcrVisionEncoderLayer,
    MiniCPMOcrVisionMLP,
    MiniCPMOcrVisionModel,
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
    MiniCPMOcrVisionModel: MiniCPMVision,
    MiniCPMOcrVisionEncoderLayer: PackedVisionLayer,
    MiniCPMOcrVisionAttention: MiniCPMVisionAttention,
    MiniCPMOcrVisionMLP: PackedVisionMlp,
}

FAMILY = Family("minicpm_ocr", RENAME, ENVOYS, TEXT_LAYERS, not_served=vit_merger_skipped,
                grid_layout=MINICPM_GRIDS, batching=MINICPM_BATCHING)
