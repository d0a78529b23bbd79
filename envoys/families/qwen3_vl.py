"""Qwen3-VL (model_type qwen3_vl): the Qwen ViT with learned positions and DeepStack, on a Qwen3 text model.

``Qwen3VLModel.forward`` scatters the merged image features
(``inputs_embeds_masked_scatter_0``, argument 1; ``_1`` is video). The tower
adds a learned ``pos_embed`` after ``patch_embed`` and taps the blocks in
``vision_config.deepstack_visual_indexes``, each merged by its own
``vision.deepstack_merger_list[k]`` (native path); the text model adds merger
k's output at the image positions after text block k (`DeepstackLayer`'s
``deepstack_output``, pinned to occurrence k of ``self__deepstack_process_0``).
"""

from __future__ import annotations

from transformers.models.qwen3_vl.modeling_qwen3_vl import (
    Qwen3VLTextDecoderLayer,
    Qwen3VLVisionAttention,
    Qwen3VLVisionBlock,
    Qwen3VLVisionMLP,
    Qwen3VLVisionModel,
)

from ..blocks.deepstack import DeepstackLayer
from ..towers.qwen import QWEN_GRIDS, QWEN_VIT_RENAME, QwenVision, QwenVisionAttention
from ..vision.tower import PackedVisionLayer, PackedVisionMlp
from . import IMAGE_AND_VIDEO, Family

RENAME = {**QWEN_VIT_RENAME, "linear_fc2": "down_proj"}

ENVOYS = {
    Qwen3VLTextDecoderLayer: DeepstackLayer,
    Qwen3VLVisionModel: QwenVision,
    Qwen3VLVisionBlock: PackedVisionLayer,
    Qwen3VLVisionAttention: QwenVisionAttention,
    Qwen3VLVisionMLP: PackedVisionMlp,
}

FAMILY = Family("qwen3_vl", RENAME, ENVOYS, "model.language_model.layers", grid_layout=QWEN_GRIDS, media=IMAGE_AND_VIDEO)
