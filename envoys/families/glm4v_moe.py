"""GLM-4.5V (model_type glm4v_moe): GLM-4.1V's tower on a mixture-of-experts GLM-4.5 text model.

``transformers.models.glm4v_moe`` copies GLM-4.1V's modeling code under new
class names: its tower is GLM-4.1V's, served as it is (`envoys.towers.glm`), on this
module's classes; its text blocks are GLM-4.5's, not GLM-4's.

- ``Glm4vMoeModel.forward`` scatters the merged image features
  (``inputs_embeds_masked_scatter_0``, argument 1, found; ``_1`` is video).
- The tower (``model.visual``, ``vision``; a `GlmVision`): packed, its patch
  convolution, post-convolution RMSNorm and learned position embeddings, the
  blocks ``blocks`` (``attn``, ``mlp``, ``norm1``, ``norm2``), the final norm
  ``post_layernorm`` (``vision.norm``, ``tower_output`` its output), then the
  2x2 convolution ``downsample`` and the merger (``merger``, the projector).
  Its attention calls the kernel once per image (``glm4v_moe.vision-attention``),
  so under eager ``attention_scores`` and ``attention_probabilities`` hold
  each image's pattern on the diagonal of one tensor, ``kernel_calls[k]`` is
  image ``k``'s call alone (`envoys.towers.per_image`), and the queries and
  keys are served whole.
- The text blocks (``model.language_model.layers``) are plain pre-norm blocks
  (``input_layernorm``, ``self_attn``, ``post_attention_layernorm``,
  ``mlp``; none of GLM-4's post-norms), found as every plain block is. The
  first ``first_k_dense_replace`` blocks hold a dense ``Glm4vMoeTextMLP``; the
  rest a ``Glm4vMoeTextMoE``: a router ``mlp.gate`` over the routed
  ``mlp.experts``, plus always-on shared experts (``mlp.shared_experts``)
  added to their weighted sum. The module returns that sum alone, ``[batch,
  seq, hidden_size]``, which the block adds to the stream, so ``mlp_output``
  is its output and ``layer_input + attention_output + mlp_output ==
  layer_output`` holds on either kind of block. Every block's MLP is a
  `RoutedMlp` (`envoys.blocks.moe`): ``mlp.router_logits`` is the output of the
  router's ``F.linear`` on float32 (``F_linear_0`` in
  ``Glm4vMoeTextTopkRouter.forward``), ``[tokens, experts]``. The router is
  DeepSeek-V3's: it keeps each token's best ``topk_group`` of ``n_group``
  expert groups and adds a score-correction bias (``e_score_correction_bias``)
  to the sigmoid of the logits before its top ``num_experts_per_tok``, so its
  choice is its own output (``mlp.gate.output[2]``), the logits' top-k only
  with one group and a zero bias. On a dense block ``router_logits`` is
  Unavailable, saying the block is dense.

Unavailable: ``image_size`` (any resolution: ``image_grid_thw`` says each
image's), ``window_index`` (no windows); ``mlp.router_logits`` on the dense
blocks. Videos are scattered (``inputs_embeds_masked_scatter_1``) but no video
value is served yet. transformers has no causal LM for the text
model saved alone (``glm4v_moe_text``), so no text-only checkpoint loads.
"""

from __future__ import annotations

from transformers.models.glm4v_moe.modeling_glm4v_moe import (
    Glm4vMoeisionMlp,
    Glm4vMoeVisionAttention,
    Glm4vMoeVisionBlock,
    Glm4vMoeVisionModel,
)

from ..towers.glm import GLM_RENAME, GlmVision, GlmVisionAttention
from ..towers.qwen import QWEN_GRIDS
from ..vision.tower import PackedVisionLayer, PackedVisionMlp
from . import Family

RENAME = dict(GLM_RENAME)

#: The tower's classes (the generated copy names its MLP ``Glm4vMoeisionMlp``); the text blocks are found.
ENVOYS = {
    Glm4vMoeVisionModel: GlmVision,
    Glm4vMoeVisionBlock: PackedVisionLayer,
    Glm4vMoeVisionAttention: GlmVisionAttention,
    Glm4vMoeisionMlp: PackedVisionMlp,
}

FAMILY = Family("glm4v_moe", RENAME, ENVOYS, "model.language_model.layers", grid_layout=QWEN_GRIDS)
