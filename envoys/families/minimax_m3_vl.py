"""MiniMax M3 VL (model_type minimax_m3_vl): a packed CLIP-shaped tower attending per image, a projector that merges
2x2 patches, on a mixture-of-experts text model whose sparse attention keeps the key blocks a lightning indexer picks.

``MiniMaxM3VLModel.forward`` scatters the projected image features into the
token embeddings (``inputs_embeds_masked_scatter_0``, argument 1, found;
``_1`` is video, through the same tower, not served here: its values say so).

The tower is ``model.vision_tower`` (standard ``model.vision``, a
`MiniMaxVision`), laid out as the Qwen ViT's (`envoys.towers.qwen`): the
processor cuts each image into ``patch_size`` squares two frames deep and lays
them out in ``spatial_merge_size`` x ``spatial_merge_size`` blocks, each
block's patches consecutive, images one after another, split by
``image_grid_thw``; a Conv3d embeds every patch alone (``embeddings``,
``vision.patch_embed``, whose ``[patches, vision_hidden_size]`` output is
``patch_embeddings``; no learned positions: the attention's 3D rotary
embedding places each patch), ``pre_layrnorm`` norms the stream, and the
blocks ``layers`` are CLIP's (``layer_norm1``, ``self_attn`` with
``out_proj``, ``layer_norm2``, ``mlp`` with ``fc1`` / ``fc2``) run packed,
``[1, patches, vision_hidden_size]``. Their attention splits queries, keys and
values at ``cu_seqlens`` and calls the kernel once per image under every
implementation but flash, the Qwen ViT's forward to the names
(``minimax_m3_vl.vision-attention``, `envoys.towers.packed_siglip.PackedSiglipAttention`),
so under eager ``attention_scores`` and ``attention_probabilities`` hold each
image's pattern on the diagonal of one tensor, ``kernel_calls[k]`` is image
``k``'s call alone (`envoys.towers.per_image`), and the queries (after the
rotary embedding), keys and values are served whole. The tower has no final norm:
``tower_output`` is the last block's stream, the tower's ``last_hidden_state``.

The projector (``model.multi_modal_projector``, ``model.projector``, after the
tower) reads ``tower_output`` without its leading 1, maps every patch to the
text width (``linear_1``, GELU, ``linear_2``), folds each merge block's
``spatial_merge_size**2`` consecutive rows into one and maps that with a second
MLP (``merge_linear_1``, GELU, ``merge_linear_2``): its output, one row per
image token, raster order over each image's merged grid, is ``image_features``.

The text model (``MiniMaxM3VLTextModel`` at ``model.language_model``) has
pre-norm blocks (``input_layernorm``, ``self_attn``,
``post_attention_layernorm``, ``mlp``) returning the stream alone, so the
standard block values hold as they are; its norms scale by ``1 + weight``.

- The attention (``MiniMaxM3VLAttention``) RMS-norms queries and keys per head,
  rotates a part of each head (``partial_rotary_factor``), and calls the kernel
  once on transformers' shared interface (found from the module, with its
  eager kernel). On the blocks ``layer_types`` calls ``minimax_m3_sparse`` a
  lightning indexer (``self_attn.indexer``, its output each query's chosen
  key blocks, ``[batch, index_n_heads, seq, index_topk_blocks]``, ``-1`` in a
  slot no block fills) scores blocks of ``index_block_size`` keys and keeps
  each query's best ``index_topk_blocks`` (its own block among them); under eager and SDPA
  attention the choice is folded into the mask the kernel receives
  (``finfo.min`` on every key outside the chosen blocks, per key-value group),
  so ``attention_probabilities`` are zero outside them and
  ``attention_scores`` carry that mask.
- The MLP is a dense gated MLP (``MiniMaxM3VLDenseMLP``) on the blocks
  ``mlp_layer_types`` calls ``dense`` and ``MiniMaxM3VLSparseMoeBlock`` on the
  ``sparse`` ones: routed experts (``experts``, weighted by ``gate``'s top-k,
  times ``routed_scaling_factor``) plus the shared experts
  (``shared_experts``). On either, ``mlp_output`` is the MLP's output, what
  the block adds to the stream. On a mixture ``mlp.router_logits`` is the
  output of ``gate``'s ``F.linear`` (`envoys.blocks.moe`), whose sigmoid plus
  the correction bias (``e_score_correction_bias``) picks each token's top
  ``num_experts_per_tok``; on the dense blocks it is Unavailable, saying so.

Unavailable: ``image_size`` (any resolution: ``image_grid_thw`` says each
image's), ``window_index`` (no windows); ``mlp.router_logits`` on the dense
text blocks; the videos' values.
"""

from __future__ import annotations

from transformers.models.minimax_m3_vl.modeling_minimax_m3_vl import (
    MiniMaxM3VLVisionAttention,
    MiniMaxM3VLVisionEncoderLayer,
    MiniMaxM3VLVisionMLP,
    MiniMaxM3VLVisionModel,
)

from ..core.layouts import PackedPatches
from ..core.values import value
from ..towers.encoder_names import ENCODER_BLOCK_RENAME, WRAPPER_RENAME
from ..towers.packed_siglip import PackedSiglipAttention
from ..towers.qwen import QwenGrids, QwenVision, tower_output_at
from ..vision.tower import PackedVisionLayer, PackedVisionMlp, as_patches, from_patches, no_images
from . import Batching, Family

#: Why an invoke's text values may differ from its prompt alone when several invokes share a batch.
INDEXER_BLOCKS = (
    "its sparse attention's lightning indexer cuts the keys into blocks of index_block_size at their slots in the "
    "batch, and compares each key's slot with each query's position, so a left-padded row's blocks and causal cut "
    "differ from its prompt's alone (transformers' MiniMaxM3VLIndexer says only right-padding is equivalent): its "
    "choice of key blocks, and so its attention and logits, differ beyond float reassociation; its tower values and "
    "image_features are its own, exactly"
)


class MiniMaxVision(QwenVision):
    """MiniMax M3 VL's tower: packed (`QwenVision`'s stream, ``[1, patches, vision_hidden_size]``), merge-block order,
    CLIP-shaped blocks, no final norm, the projector outside it.

    ``patch_embeddings`` is the Conv3d embedding's output
    (``vision.patch_embed``, ``[patches, vision_hidden_size]`` as one packed
    row), before ``pre_layrnorm``; ``tower_output`` the last block's stream,
    which the projector reads. Sizes, off the vision config:
    ``vision_hidden_size`` (``hidden_size``), ``num_heads``
    (``num_attention_heads``), ``intermediate_size``, ``patch_size``,
    ``spatial_merge_size``; ``image_size`` is Unavailable (any resolution).
    """

    tower_output = value(
        "tower_output", PackedPatches, description="the last block's stream, the projector's input (there is no final norm)",
        key=lambda v: tower_output_at(v)[0], select=lambda v: tower_output_at(v)[1], unavailable=no_images,
        view=as_patches, inverse=from_patches,
        doc="The last block's stream, ``[1, patches, vision_hidden_size]``, merge-block order: the tower has no final "
        "norm, so this is its ``last_hidden_state``, which the projector (``model.projector``, after the tower) reads "
        "without the leading 1. Read it after the blocks' values and before the projector's.",
    )

    @property
    def num_heads(self) -> int:
        return self.vision_config.num_attention_heads


RENAME = {
    **WRAPPER_RENAME,
    "embeddings": "patch_embed",  # the tower's patch embedding: no other module of the model is named so
    **ENCODER_BLOCK_RENAME,
}

ENVOYS = {
    MiniMaxM3VLVisionModel: MiniMaxVision,
    MiniMaxM3VLVisionEncoderLayer: PackedVisionLayer,
    MiniMaxM3VLVisionAttention: PackedSiglipAttention,
    MiniMaxM3VLVisionMLP: PackedVisionMlp,
}

FAMILY = Family("minimax_m3_vl", RENAME, ENVOYS, "model.language_model.layers",
                grid_layout=QwenGrids(merger_is_projector=False), batching=Batching(invokes_differ=INDEXER_BLOCKS))
