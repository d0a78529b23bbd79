"""Mistral Large 4 (model_type mistral_large4): Mistral 3's vision side on a sparse-attention, mixture-of-experts text model.

``MistralLarge4Model`` is Mistral 3's host, names and all: the tower
``model.vision_tower`` (Pixtral, `PixtralVision`), the projector
``model.multi_modal_projector`` reading the tower's hidden state at
``vision_feature_layer`` (RMSNorm, the 2x2 ``patch_merger``, two linears),
and the scatter in its own forward (``inputs_embeds_masked_scatter_0``,
argument 1, found). What differs is the text model (``MistralLarge4TextModel``
at ``model.language_model``), whose blocks are pre-norm attention + MLP on the
residual stream (``input_layernorm``, ``self_attn``, ``post_attention_layernorm``,
``mlp``), so the standard block values hold as they are; a block returns
``(hidden_states, topk_indices)``, and ``layer_output`` is the first; a
skipped block (`IndexedLayer`) passes on the ``prev_topk_indices`` it received.

- The attention (``MistralLarge4TextAttention``) is multi-head latent attention
  with a DeepSeek sparse-attention indexer: queries ``[batch, heads, seq,
  qk_nope_head_dim + qk_rope_head_dim]``, keys of the same width and values
  ``[batch, heads, seq, v_head_dim]`` expanded from one latent
  (``kv_b_proj``), the queries scaled per position (``softmax_scaling``)
  before one kernel call on transformers' shared interface. Under eager and
  SDPA attention the indexer's choice (each query's top ``index_topk`` keys)
  is folded into the mask the kernel receives (``finfo.min`` on the keys it
  left out), so ``attention_probabilities`` are zero outside them and
  ``attention_scores`` carry that mask. The kernel is DeepSeek-V3.2's eager
  one, found from the module like every other.
- The MLP is ``MistralLarge4TextMLP`` (a gated MLP) on the first
  ``first_k_dense_replace`` blocks and ``MistralLarge4TextMoE`` after them:
  routed experts (``experts``, weighted by ``gate``'s top-k) plus the shared
  experts (``shared_experts``). On either, ``mlp_output`` is the MLP's output,
  what the block adds to the stream. On a MoE block ``mlp.router_logits`` is
  the output of ``gate``'s ``F.linear`` (float32; `envoys.blocks.moe`), from whose
  softmax it picks the top-k within the best ``topk_group`` expert groups;
  on the dense blocks it is Unavailable, saying so.
- The root soft-caps the logits (``final_logit_softcapping``): ``logits`` is
  the root's output, after the cap, not ``lm_head``'s.
"""

from __future__ import annotations

from transformers.models.mistral_large4.modeling_mistral_large4 import MistralLarge4TextDecoderLayer

from ..blocks.indexed import INDEXER_TOP_K, IndexedLayer
from ..towers.pixtral import MERGED_PIXTRAL_GRIDS
from . import Batching, Family
from .mistral3 import ENVOYS, RENAME

FAMILY = Family("mistral_large4", RENAME, {**ENVOYS, MistralLarge4TextDecoderLayer: IndexedLayer},
                "model.language_model.layers", grid_layout=MERGED_PIXTRAL_GRIDS,
                batching=Batching(invokes_differ=INDEXER_TOP_K))
