"""Qwen3.5-MoE (model_type qwen3_5_moe): Qwen3.5's tower on a gated-DeltaNet hybrid text model of mixture-of-experts
blocks.

``transformers.models.qwen3_5_moe`` is Qwen3.5's modeling code copied under
new class names, the text block's MLP made sparse; so everything but that MLP
is served as Qwen3.5's is (`envoys.families.qwen3_5`), on this module's
classes:

- ``Qwen3_5MoeModel.forward`` scatters the merged image features
  (``inputs_embeds_masked_scatter_0``, argument 1, found; ``_1`` is video).
- The tower (``model.visual``, ``vision``; a `QwenVision`: packed, learned
  positions, its merger ``projector`` inside, no DeepStack) attends once per
  image, so under eager its blocks' ``attention_scores`` and
  ``attention_probabilities`` hold each image's pattern on the diagonal of one
  tensor, ``kernel_calls[k]`` is image ``k``'s call alone
  (`envoys.towers.per_image`), and the queries and keys are served whole
  (``qwen3_5_moe.vision-attention``).
- The text blocks (``model.language_model.layers``, each a
  `DeltaNetHybridLayer`) mix, by ``layer_types``, gated DeltaNet blocks
  (``linear_attn``, `GatedDeltaNet`, read at the gated delta rule kernel call:
  ``qwen3_5_moe.gated-deltanet``) and output-gated softmax attention blocks
  (``self_attn``); the attention values are Unavailable on the former and the
  ``linear_attn.`` values on the latter, ``support()`` giving the reason per
  block.
- Every block's ``mlp`` is a ``Qwen3_5MoeSparseMoeBlock``: a top-k router
  ``mlp.gate`` over the routed ``mlp.experts``, plus a shared expert
  (``mlp.shared_expert``) scaled by the sigmoid of ``mlp.shared_expert_gate``
  and added to the routed sum. The module returns that sum alone, ``[batch,
  seq, hidden_size]``, which the block adds to the stream, so ``mlp_output``
  is its output and ``layer_input + attention_output + mlp_output ==
  layer_output`` holds (``attention_output`` being the DeltaNet's on a
  DeltaNet block). The MLP is a `RoutedMlp` (`envoys.blocks.moe`):
  ``mlp.router_logits`` is the output of the router's ``F.linear``
  (``F_linear_0`` in ``Qwen3_5MoeTopKRouter.forward``), ``[tokens, experts]``,
  whose softmax's top ``num_experts_per_tok`` are the experts that run. The
  model has no dense block (its decoder layer builds the sparse block on every
  layer), so ``router_logits`` is served on every block.

A checkpoint of the text model alone (``qwen3_5_moe_text``,
``Qwen3_5MoeForCausalLM``) loads with the same text names.

Unavailable, as on Qwen3.5: ``image_size`` (any resolution: ``image_grid_thw``
says each image's), ``window_index`` (no windows); each block's attention
values or DeltaNet values, whichever it lacks.
Videos are scattered (``inputs_embeds_masked_scatter_1``) but no video value
is served yet.
"""

from __future__ import annotations

from transformers.models.qwen3_5_moe.modeling_qwen3_5_moe import (
    Qwen3_5MoeDecoderLayer,
    Qwen3_5MoeGatedDeltaNet,
    Qwen3_5MoeVisionAttention,
    Qwen3_5MoeVisionBlock,
    Qwen3_5MoeVisionMLP,
    Qwen3_5MoeVisionModel,
)

from ..blocks.deltanet import DeltaNetHybridLayer, GatedDeltaNet
from ..towers.qwen import QWEN_GRIDS, QwenVision, QwenVisionAttention
from ..vision.tower import PackedVisionLayer, PackedVisionMlp
from . import IMAGE_AND_VIDEO, Family
from .qwen3_5 import RENAME as QWEN3_5_RENAME

RENAME = dict(QWEN3_5_RENAME)

ENVOYS = {
    Qwen3_5MoeDecoderLayer: DeltaNetHybridLayer,
    Qwen3_5MoeGatedDeltaNet: GatedDeltaNet,
    Qwen3_5MoeVisionModel: QwenVision,
    Qwen3_5MoeVisionBlock: PackedVisionLayer,
    Qwen3_5MoeVisionAttention: QwenVisionAttention,
    Qwen3_5MoeVisionMLP: PackedVisionMlp,
}

FAMILY = Family("qwen3_5_moe", RENAME, ENVOYS, "model.language_model.layers", text_model_types=("qwen3_5_moe_text",),
                grid_layout=QWEN_GRIDS, media=IMAGE_AND_VIDEO)
