"""Qwen2.5-VL (model_type qwen2_5_vl): the Qwen ViT with windowed attention, on a Qwen2 text model with M-RoPE.

``Qwen2_5_VLModel.forward`` scatters the merged image features
(``inputs_embeds_masked_scatter_0``, argument 1; ``_1`` is video). The tower
permutes its stream into attention windows at entry (``window_size`` pixels a
side; ``self_permute_input_for_window_attn_0``, whose argument 1 is
``vision.window_index``; releases before transformers 5.17 permute inline, and
serve the index at item 0 of the call computing it): every block,
``tower_output`` and the merger's output are in window order, and the tower
restores merge-block order after the merger (``torch.argsort(window_index)``),
so ``image_features`` is in scatter order. The blocks not in ``fullatt_block_indexes`` call the attention
kernel once per window, the others once per image. The tower's norms are
RMSNorms and its MLP is gated (``gate_proj``, ``up_proj``, ``down_proj``).
"""

from __future__ import annotations

from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import (
    Qwen2_5_VisionTransformerPretrainedModel,
    Qwen2_5_VLMLP,
    Qwen2_5_VLVisionAttention,
    Qwen2_5_VLVisionBlock,
)

from ..towers.qwen import QWEN_GRIDS, QWEN_VIT_RENAME, QwenVision, QwenVisionAttention
from ..vision.tower import PackedVisionLayer, PackedVisionMlp
from . import IMAGE_AND_VIDEO, Family

RENAME = dict(QWEN_VIT_RENAME)

ENVOYS = {
    Qwen2_5_VisionTransformerPretrainedModel: QwenVision,
    Qwen2_5_VLVisionBlock: PackedVisionLayer,
    Qwen2_5_VLVisionAttention: QwenVisionAttention,
    Qwen2_5_VLMLP: PackedVisionMlp,
}

FAMILY = Family("qwen2_5_vl", RENAME, ENVOYS, "model.language_model.layers", grid_layout=QWEN_GRIDS, media=IMAGE_AND_VIDEO)
