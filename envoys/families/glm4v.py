"""GLM-4.1V (model_type glm4v): the GLM ViT, per-image attention, on a GLM-4 text model with M-RoPE.

``Glm4vModel.forward`` scatters the merged image features into the token
embeddings (``inputs_embeds_masked_scatter_0``, argument 1; ``_1`` is video,
whose frames are the same image tokens, left as it is). The tower
(``model.visual``, a `GlmVision`) is packed and attends per image, as the Qwen
ViT does (`envoys.towers.glm`); its blocks ``blocks`` (``attn``, ``mlp``, ``norm1``,
``norm2``), its final norm ``post_layernorm`` (``vision.norm``), then the 2x2
convolution ``downsample`` and the merger (``merger``, the projector), both
inside the tower's forward. The text blocks are GLM-4's, sandwich-normed
(`GlmLayer`). Under eager, ``attention_scores`` and
``attention_probabilities`` of the tower's blocks hold each image's pattern on
the diagonal of one tensor (`envoys.towers.per_image`).
"""

from __future__ import annotations

from transformers.models.glm4v.modeling_glm4v import (
    Glm4VisionMlp,
    Glm4vTextAttention,
    Glm4vTextDecoderLayer,
    Glm4vTextMLP,
    Glm4vVisionAttention,
    Glm4vVisionBlock,
    Glm4vVisionModel,
)

from ..blocks.glm import GlmAttention, GlmLayer, GlmMlp
from ..towers.glm import GLM_RENAME, GlmVision, GlmVisionAttention
from ..towers.qwen import QWEN_GRIDS
from ..vision.tower import PackedVisionLayer, PackedVisionMlp
from . import Family

RENAME = dict(GLM_RENAME)

#: GLM-4.1V's tower and text blocks, which GLM-4.6V and GLM-GA run too.
ENVOYS = {
    Glm4vVisionModel: GlmVision,
    Glm4vVisionBlock: PackedVisionLayer,
    Glm4vVisionAttention: GlmVisionAttention,
    Glm4VisionMlp: PackedVisionMlp,
    Glm4vTextDecoderLayer: GlmLayer,
    Glm4vTextAttention: GlmAttention,
    Glm4vTextMLP: GlmMlp,
}

FAMILY = Family("glm4v", RENAME, ENVOYS, "model.language_model.layers", grid_layout=QWEN_GRIDS)
