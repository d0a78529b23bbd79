"""GLM-OCR (model_type glm_ocr): GLM-4.1V's layout with a leaner tower, on a GLM-4 text model.

``GlmOcrModel.forward`` scatters the merged image features
(``inputs_embeds_masked_scatter_0``, argument 1; ``_1`` is video). The tower
(``model.visual``, a `GlmVision`) is GLM-4.1V's without the post-convolution
norm and the learned position embeddings, so the first block receives
``patch_embeddings``; its attention RMS-norms queries and keys per head
(``q_norm``, ``k_norm``) before the 2D rotary embedding and, as GLM-4.1V's,
calls the kernel once per image (under eager, each image's pattern on the
diagonal of one tensor: `envoys.towers.per_image`); its blocks' MLP is the
config's ``intermediate_size`` wide. Then ``post_layernorm``
(``vision.norm``), ``downsample`` and the merger (the projector). The text
blocks are GLM-4's, sandwich-normed (`GlmLayer`), their attention without
biases.
"""

from __future__ import annotations

from transformers.models.glm_ocr.modeling_glm_ocr import (
    GlmOcrTextAttention,
    GlmOcrTextDecoderLayer,
    GlmOcrTextMLP,
    GlmOcrVisionAttention,
    GlmOcrVisionBlock,
    GlmOcrVisionMlp,
    GlmOcrVisionModel,
)

from ..blocks.glm import GlmAttention, GlmLayer, GlmMlp
from ..towers.glm import GLM_RENAME, GlmVision, GlmVisionAttention
from ..towers.qwen import QWEN_GRIDS
from ..vision.tower import PackedVisionLayer, PackedVisionMlp
from . import Family

RENAME = dict(GLM_RENAME)

ENVOYS = {
    GlmOcrVisionModel: GlmVision,
    GlmOcrVisionBlock: PackedVisionLayer,
    GlmOcrVisionAttention: GlmVisionAttention,
    GlmOcrVisionMlp: PackedVisionMlp,
    GlmOcrTextDecoderLayer: GlmLayer,
    GlmOcrTextAttention: GlmAttention,
    GlmOcrTextMLP: GlmMlp,
}

FAMILY = Family("glm_ocr", RENAME, ENVOYS, "model.language_model.layers", grid_layout=QWEN_GRIDS)
