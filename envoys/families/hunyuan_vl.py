"""HunYuanVL (model_type hunyuan_vl, HunyuanOCR): a packed ViT attending per image, its patch merger run once per
image inside the tower, on a dense HunYuan text model with XD-RoPE.

``HunYuanVLModel.forward`` scatters the merged image features into the token
embeddings (``inputs_embeds_masked_scatter_0``, argument 1, found). The tower
is ``model.vision_tower`` (standard ``model.vision``, a `HunYuanVision`):
every image's patches in one packed stream ``[1, patches,
vision_hidden_size]``, image after image, each image's in raster order (the
processor's), split by ``image_grid_thw``; its blocks ``layers``
(``layer_norm1``, ``self_attn``, ``layer_norm2``, ``mlp``), whose attention
splits queries, keys and values at ``cu_seqlens`` and calls the kernel once
per image under every implementation but flash, as the Qwen ViT's does
(`HunYuanVisionAttention`, ``hunyuan_vl.vision-attention``; no rotary
embedding: the queries and keys are the projections'), so under eager
``attention_scores`` and ``attention_probabilities`` hold each image's pattern
on the diagonal of one tensor, ``kernel_calls[k]`` is image ``k``'s call alone
(`envoys.towers.per_image`), and the queries, keys and values are served whole.

- ``patch_embeddings`` is the convolution's output (``embeddings.patch_embedding``,
  ``vision.patch_embed``), one row per patch, before the learned positions
  (a square grid resampled to each image's grid) that ``embeddings`` adds.
- The tower has no final norm: ``tower_output`` is the last block's stream,
  served at the tower's output (``last_hidden_state``), after the merger
  has run: read projector values first.
- The projector is the merger (``vision_tower.patch_merger``,
  ``model.projector``), which the tower calls once per image, on that image's
  rows of the stream: it RMS-norms them (``before_rms``), folds each 2x2
  block with a convolution, appends a learned newline column to every row of
  the merged grid, maps the rows to the text width, puts a learned begin and
  end row around them and RMS-norms the result (``after_rms``). So
  ``projector.input`` and ``projector.output`` are image 0's (``[1, patches_0,
  vision_hidden_size]``, ``[1, tokens_0, hidden_size]``); image i's are the
  merger's i-th call (``tracer.iter[i]``). Each image's tokens are ``h/2 x
  (w/2 + 1) + 2`` (its merged grid with the newline column, and the begin and
  end rows), all image tokens of the prompt, so ``image_features`` is the
  merger's outputs concatenated, as they are.

The text blocks (``model.language_model.layers``) are pre-norm attention +
MLP blocks (query and key RMSNorms inside the attention, XD-RoPE applied
before them), so the standard block values hold as they are.

Unavailable: ``image_size`` (any resolution: ``image_grid_thw`` says each
image's), ``window_index`` (no windows). ``vision.token_grid`` puts each
image's merged cells on its grid, leaving out the newline, begin and end rows.
"""

from __future__ import annotations

from typing import Any

from transformers.models.hunyuan_vl.modeling_hunyuan_vl import (
    HunYuanVLVisionAttention,
    HunYuanVLVisionBlock,
    HunYuanVLVisionMLP,
    HunYuanVLVisionTransformer,
)

from ..core.layouts import PackedPatches
from ..core.values import value
from ..image.grids import RasterGrids
from ..towers.qwen import QwenVision, QwenVisionAttention
from ..vision.tower import PackedVisionLayer, PackedVisionMlp, no_patch_embed
from . import Batching, Family


class HunYuanVisionAttention(QwenVisionAttention):
    """HunYuanVL's tower attention: the Qwen ViT's layout (`QwenVisionAttention`), one kernel call per image, without a
    rotary embedding; ``attention_scores`` and ``attention_probabilities`` each image's pattern on the diagonal of one
    tensor under eager (`envoys.towers.per_image.BlockDiagonal`), ``kernel_calls[k]`` image ``k``'s call alone."""


class HunYuanVision(QwenVision):
    """HunYuanVL's tower: packed (`QwenVision`'s stream, ``[1, patches, vision_hidden_size]``), each image's patches
    in raster order, no final norm, its merger (the projector) called once per image inside it.

    Sizes, off the vision config: ``vision_hidden_size`` (``hidden_size``),
    ``num_heads`` (``num_attention_heads``), ``intermediate_size``,
    ``patch_size``, ``spatial_merge_size``; ``image_size`` is Unavailable
    (any resolution).
    """

    stream_order = "raster order"

    patch_embeddings = value(
        "patch_embeddings", PackedPatches, description="every image's patch embeddings, before the position embedding",
        key=lambda v: f"{v.patch_embed.path}.output", select=None, unavailable=no_patch_embed,
        view=lambda grid: grid.flatten(1).unsqueeze(0), inverse=lambda written, current: written.reshape(current.shape),
        doc="Every image's patch embeddings, ``[1, patches, vision_hidden_size]``, image after image, each in raster "
        "order: the convolution's output, before the learned positions. Assign a tensor of the same shape to "
        "replace it, or edit it in place.",
    )

    @property
    def num_heads(self) -> int:
        return self.vision_config.num_attention_heads


RENAME: dict[str | type, str] = {
    "model.language_model.embed_tokens": "embed_tokens",
    "model.language_model.layers": "layers",
    "model.language_model.norm": "norm",
    "model.vision_tower": "vision",
    "model.vision_tower.patch_merger": "projector",
    "embeddings.patch_embedding": "patch_embed",
    "layer_norm1": "input_layernorm",
    "layer_norm2": "post_attention_layernorm",
    "mlp.fc1": "mlp.up_proj",
    "mlp.fc2": "mlp.down_proj",
}

ENVOYS: dict[type, Any] = {
    HunYuanVLVisionTransformer: HunYuanVision,
    HunYuanVLVisionBlock: PackedVisionLayer,
    HunYuanVLVisionAttention: HunYuanVisionAttention,
    HunYuanVLVisionMLP: PackedVisionMlp,
}

#: Why a later invoke's text values differ from its prompt alone (several invokes in one trace, `envoys.invokes`).
HUNYUAN_IMAGE_ORDINALS = (
    "HunYuanVL's rotary positions number the images across the whole batch (get_rope_index's image_index, one "
    "of its rotary axes), so an invoke's image tokens get other positions than its prompt alone gives them (the "
    "processor batching the prompts does the same); its tower values and image_features are its own, exactly"
)

FAMILY = Family("hunyuan_vl", RENAME, ENVOYS, "model.language_model.layers",
                grid_layout=RasterGrids(lambda config: config.vision_config.spatial_merge_size, newline=1, around=1),
                batching=Batching(invokes_differ=HUNYUAN_IMAGE_ORDINALS))
