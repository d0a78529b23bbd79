"""Qwen3.5 (model_type qwen3_5): Qwen3-VL's tower without DeepStack, on a gated-DeltaNet hybrid text model.

``Qwen3_5Model.forward`` scatters the merged image features
(``inputs_embeds_masked_scatter_0``, argument 1; ``_1`` is video). The text
model's ``layer_types`` mix ``linear_attention`` blocks (a gated DeltaNet,
``linear_attn``) and ``full_attention`` blocks (``self_attn``, output-gated):
every block is a `DeltaNetHybridLayer`, whose attention values are Unavailable
on the blocks without ``self_attn`` and whose DeltaNet values
(``linear_attn.linear_attention_*``, `GatedDeltaNet`, read at the gated delta
rule kernel call) are Unavailable on the blocks without ``linear_attn``
(``support()`` gives the reason per block).
A checkpoint of the text model alone (``qwen3_5_text``, ``Qwen3_5ForCausalLM``)
loads with the same text names.
"""

from __future__ import annotations

from transformers.models.qwen3_5.modeling_qwen3_5 import (
    Qwen3_5DecoderLayer,
    Qwen3_5GatedDeltaNet,
    Qwen3_5VisionAttention,
    Qwen3_5VisionBlock,
    Qwen3_5VisionMLP,
    Qwen3_5VisionModel,
)

from ..blocks.deltanet import DeltaNetHybridLayer, GatedDeltaNet
from ..towers.qwen import QWEN_GRIDS, QwenVision, QwenVisionAttention
from ..vision.tower import PackedVisionLayer, PackedVisionMlp
from . import IMAGE_AND_VIDEO, Family
from .qwen3_vl import RENAME as QWEN3_VL_RENAME

RENAME = dict(QWEN3_VL_RENAME)

ENVOYS = {
    Qwen3_5DecoderLayer: DeltaNetHybridLayer,
    Qwen3_5GatedDeltaNet: GatedDeltaNet,
    Qwen3_5VisionModel: QwenVision,
    Qwen3_5VisionBlock: PackedVisionLayer,
    Qwen3_5VisionAttention: QwenVisionAttention,
    Qwen3_5VisionMLP: PackedVisionMlp,
}

FAMILY = Family("qwen3_5", RENAME, ENVOYS, "model.language_model.layers", text_model_types=("qwen3_5_text",),
                grid_layout=QWEN_GRIDS, media=IMAGE_AND_VIDEO)
