"""Qwen3-VL-MoE (model_type qwen3_vl_moe): Qwen3-VL's tower and DeepStack on a mixture-of-experts text model.

``transformers.models.qwen3_vl_moe`` is Qwen3-VL's modeling code copied
under new class names, the text block's MLP made sparse; so everything but
that block is served as Qwen3-VL's is (`envoys.families.qwen3_vl`), on this
module's classes:

- ``Qwen3VLMoeModel.forward`` scatters the merged image features
  (``inputs_embeds_masked_scatter_0``, argument 1, found; ``_1`` is video).
- The tower (``model.visual``, ``vision``; a `QwenVision`: packed, its merger
  ``projector`` inside) attends once per image, so under eager its blocks'
  ``attention_scores`` and ``attention_probabilities`` hold each image's
  pattern on the diagonal of one tensor, ``kernel_calls[k]`` is image ``k``'s
  call alone (`envoys.towers.per_image`), and the queries and keys are served
  whole (``qwen3_vl_moe.vision-attention``). It taps the blocks in
  ``vision_config.deepstack_visual_indexes``, each merged by
  ``vision.deepstack_merger_list[k]`` (native path), and the text model adds
  merger k's output at the image positions after text block k
  (``layers[k].deepstack_output``, `DeepstackLayer`, at occurrence k of the
  text model's ``self__deepstack_process_0``: ``qwen3_vl_moe.deepstack``).
- The text blocks (``model.language_model.layers``) are Qwen3's attention and,
  as ``mlp``, a ``Qwen3VLMoeTextSparseMoeBlock`` (a top-k router ``mlp.gate``
  over the routed ``mlp.experts``, no shared expert) on every block but those
  in ``mlp_only_layers`` or off ``decoder_sparse_step``, which hold a dense
  ``Qwen3VLMoeTextMLP``. The sparse block returns the routed sum alone,
  ``[batch, seq, hidden_size]``, which the block adds to the stream, so
  ``mlp_output`` is its output and ``layer_input + attention_output +
  mlp_output == layer_output`` holds on either kind of block. Every block's MLP
  is a `RoutedMlp` (`envoys.blocks.moe`): ``mlp.router_logits`` is the output of the
  router's ``F.linear`` (``F_linear_0`` in ``Qwen3VLMoeTextTopKRouter.forward``),
  ``[tokens, experts]``, whose softmax's top ``num_experts_per_tok`` are the
  experts that run; on a dense block it is Unavailable, saying the block is
  dense.

Unavailable, as on Qwen3-VL: ``image_size`` (any resolution: ``image_grid_thw``
says each image's), ``window_index`` (no windows), ``deepstack_output`` on the
blocks past the taps; and ``mlp.router_logits`` on the dense blocks. Videos are
scattered (``inputs_embeds_masked_scatter_1``) but no video value is served yet.
"""

from __future__ import annotations

from transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe import (
    Qwen3VLMoeTextDecoderLayer,
    Qwen3VLMoeVisionAttention,
    Qwen3VLMoeVisionBlock,
    Qwen3VLMoeVisionMLP,
    Qwen3VLMoeVisionModel,
)

from ..blocks.deepstack import DeepstackLayer
from ..towers.qwen import QWEN_GRIDS, QwenVision, QwenVisionAttention
from ..vision.tower import PackedVisionLayer, PackedVisionMlp
from . import IMAGE_AND_VIDEO, Family
from .qwen3_vl import RENAME as QWEN3_VL_RENAME

RENAME = dict(QWEN3_VL_RENAME)

ENVOYS = {
    Qwen3VLMoeTextDecoderLayer: DeepstackLayer,
    Qwen3VLMoeVisionModel: QwenVision,
    Qwen3VLMoeVisionBlock: PackedVisionLayer,
    Qwen3VLMoeVisionAttention: QwenVisionAttention,
    Qwen3VLMoeVisionMLP: PackedVisionMlp,
}

FAMILY = Family("qwen3_vl_moe", RENAME, ENVOYS, "model.language_model.layers", grid_layout=QWEN_GRIDS, media=IMAGE_AND_VIDEO)
