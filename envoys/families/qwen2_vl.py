"""Qwen2-VL (model_type qwen2_vl): the Qwen ViT, per-image attention, on a Qwen2 text model with M-RoPE.

``Qwen2VLModel.forward`` scatters the merged image features into the token
embeddings (``inputs_embeds_masked_scatter_0``, argument 1; ``_1`` is video,
left as it is). The tower (``model.visual``, a `QwenVision`) is packed, its
blocks ``blocks`` (``attn``, ``mlp``, ``norm1``, ``norm2``), its merger
(``PatchMerger``, the projector) inside it. The vision config's ``embed_dim``
is the tower's width and its ``hidden_size`` the merger's output (the text
width); the MLP is ``embed_dim * mlp_ratio`` wide (``fc1``, ``fc2``).
"""

from __future__ import annotations

from transformers.models.qwen2_vl.modeling_qwen2_vl import (
    Qwen2VisionTransformerPretrainedModel,
    Qwen2VLVisionBlock,
)
from transformers.models.qwen2_vl.modeling_qwen2_vl import VisionAttention as Qwen2VLVisionAttention
from transformers.models.qwen2_vl.modeling_qwen2_vl import VisionMlp as Qwen2VLVisionMlp

from ..towers.qwen import QWEN_GRIDS, QWEN_VIT_RENAME, QwenVision, QwenVisionAttention
from ..vision.tower import PackedVisionLayer, PackedVisionMlp
from . import IMAGE_AND_VIDEO, Family

RENAME = {**QWEN_VIT_RENAME, "mlp.fc1": "mlp.up_proj", "mlp.fc2": "mlp.down_proj"}

ENVOYS = {
    Qwen2VisionTransformerPretrainedModel: QwenVision,
    Qwen2VLVisionBlock: PackedVisionLayer,
    Qwen2VLVisionAttention: QwenVisionAttention,
    Qwen2VLVisionMlp: PackedVisionMlp,
}

FAMILY = Family("qwen2_vl", RENAME, ENVOYS, "model.language_model.layers", grid_layout=QWEN_GRIDS, media=IMAGE_AND_VIDEO)
