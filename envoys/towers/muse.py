"""The Muse tower (Muse Glimmer, Muse Spark): a packed ViT attending in windows and per image, a pixel shuffle inside.

The tower (``model.vision_tower``, standard ``model.vision``) is packed as
the Qwen ViT's (`envoys.towers.qwen`): every image's patches in one stream
``[patches, vision_hidden_size]``, image after image, split by the
processor's ``image_grid_thw``; but each image's patches are in raster order
(the processor's), not merge-block order. Its forward:

- ``patch_embedder``: a linear map of each flattened patch
  (``patch_embedder.patch_embedding``, whose output is ``patch_embeddings``)
  plus learned positions resampled to the image's grid; then ``ln_pre``;
- permutes the stream into attention windows of ``pos_emb_height`` patches a
  side (``window_size`` = ``pos_emb_height * patch_size`` pixels), patch by
  patch (``get_vision_window_index(...)``, whose item 0 is ``window_index``):
  every block's values are in window order;
- the blocks (``layers``: ``attn``, ``mlp``, ``norm1``, ``norm2``) split
  their attention at ``cu_seqlens`` as the Qwen ViT's does
  (`MuseVisionAttention`): once per window on the blocks whose
  ``vision_config.layer_types`` is ``window_attention``, once per image on
  the ``full_attention`` ones; under eager, a block's ``attention_scores``
  and ``attention_probabilities`` hold each call's pattern on the diagonal of
  one tensor, in window order (`envoys.towers.per_image`);
- puts the stream back in raster order (``argsort(window_index)``) and norms
  it (``ln_post``, the tower's ``norm``): ``tower_output``, raster order;
- pixel-shuffles each ``merge_size`` x ``merge_size`` block of each image's
  patches into one row of ``merge_size**2 * vision_hidden_size`` (the tower's
  ``last_hidden_state``), which the host maps with ``vision_adapter`` (two
  linear maps under GELU, ``projector_hidden_size`` wide, at its native path),
  ``vision_projection`` (the projector: a linear map to the text width) and a
  weightless RMSNorm (``perception_emb_norm``) before it scatters them, so
  ``projector.input`` is the adapter's output and ``image_features`` is
  ``projector.output`` normed, not ``projector.output``.
"""

from __future__ import annotations

from typing import Any

import torch

from ..core.layouts import PackedPatches
from ..core.values import value
from ..image.grids import Grid, ImageInputs, raster, value_named
from ..vision.tower import as_patches, from_patches, no_images, norm_output
from .qwen import PATCH_VALUES, QwenGrids, QwenVision, QwenVisionAttention, window_positions

#: The native names of the Muse tower under the standard ones, from the wrapper (the text side is the family's).
MUSE_VISION_RENAME = {
    "model.vision_tower": "vision",
    "model.vision_projection": "projector",
    "attn": "self_attn",
    "norm1": "input_layernorm",
    "norm2": "post_attention_layernorm",
    "attn.proj": "attn.o_proj",
    "mlp.fc1": "mlp.up_proj",
    "mlp.fc2": "mlp.down_proj",
    "ln_post": "norm",
}


class MuseVisionAttention(QwenVisionAttention):
    """The Muse tower's attention: the Qwen ViT's layout (`QwenVisionAttention`), one kernel call per window or image.

    ``attention_queries``, ``attention_keys`` and ``attention_values`` are the
    whole ``[1, heads, patches, head_dim]`` tensors (queries and keys after the
    2D rotary embedding), in window order, before the split at
    ``cu_seqlens``; ``attention_scores`` and ``attention_probabilities`` are
    ``[1, heads, patches, patches]`` under eager, in window order, each kernel
    call's pattern a diagonal block (`envoys.towers.per_image.BlockDiagonal`);
    ``kernel_calls[k]`` is call ``k`` alone (window ``k`` on a
    ``window_attention`` block, image ``k`` on a ``full_attention`` one).
    """


def _patch_embedding(vision: Any) -> str:
    return f"{vision.path}.patch_embedder.patch_embedding.output"


class MuseVision(QwenVision):
    """The Muse tower: packed, raster order per image, windows then the whole image, ``ln_post``, a pixel shuffle.

    Its stream values are `PackedPatches`, 1 in the images axis, ``[1, patches,
    vision_hidden_size]``; the blocks' values are in window order
    (``window_index``: which patch, counted over every image of the call, is
    at each position), ``patch_embeddings`` and ``tower_output`` in raster
    order. ``tower_output`` is ``ln_post``'s output, after the tower put the
    stream back from window order; the pixel shuffle then folds it inside
    the tower's forward, and the host's ``vision_adapter`` maps the shuffled
    rows, ``[image_tokens, merge_size**2 * vision_hidden_size]``, before the
    projector (``vision_projection``).

    Sizes, off the vision config: ``vision_hidden_size``, ``num_heads``
    (``num_attention_heads``), ``intermediate_size``, ``patch_size``,
    ``spatial_merge_size`` (``merge_size``), ``window_size`` (the window's side
    in pixels, ``pos_emb_height * patch_size``). ``image_size`` is Unavailable
    (any resolution).
    """

    patch_embeddings = value(
        "patch_embeddings", PackedPatches, description="every image's patch embeddings, before the position embedding",
        key=_patch_embedding, select=None, unavailable=no_images, view=as_patches, inverse=from_patches,
        doc="Every image's patch embeddings, ``[1, patches, vision_hidden_size]``, image after image, each in raster "
        "order: the linear patch embedding's output, before the learned positions and ``ln_pre``. Assign a tensor "
        "of the same shape to replace it, or edit it in place.",
    )

    tower_output = value(
        "tower_output", PackedPatches, description="the last block's stream back in raster order, after the final norm (ln_post)",
        key=norm_output, select=None, unavailable=no_images, view=as_patches, inverse=from_patches,
        doc="The last block's stream put back from window order into raster order and normed (``ln_post``, "
        "``vision.norm``), ``[1, patches, vision_hidden_size]``: what the tower pixel-shuffles. Read it before the "
        "projector values.",
    )

    @property
    def num_heads(self) -> int:
        return self.vision_config.num_attention_heads

    @property
    def spatial_merge_size(self) -> int:
        """The side, in patches, of the square block the pixel shuffle folds into one image token."""
        return self.vision_config.merge_size

    @property
    def window_size(self) -> int:
        """The attention window's side in pixels: the learned position grid's side in patches times the patch."""
        return self.vision_config.pos_emb_height * self.vision_config.patch_size


class MuseGrids(QwenGrids):
    """Where each image's rows are on the Muse tower: `QwenGrids` with raster order, and windows patch by patch.

    The stream is packed, ``[1, patches, vision_hidden_size]``: every image's
    ``h * w`` patches (``image_grid_thw``), image after image. Each image's
    patches are in raster order in ``patch_embeddings`` and ``tower_output``
    (``of="patch_embeddings"``), and in window order in the blocks' values
    (``of="stream"``, the default): the image's grid cut into windows of
    ``pos_emb_height`` patches a side from its top left corner, windows in
    raster order, each window's patches in raster order (`window_positions`,
    one unit a patch). The image tokens (``image_features``, the text's
    values, ``projector_output``) are one per ``merge_size`` x ``merge_size``
    block, raster order over the merged grid, image after image.
    """

    def patch_grid(self, inputs: ImageInputs, image: int, of: str = "stream") -> Grid:
        """Image ``image``'s patch grid over the tower's packed rows: ``of`` "stream" (the blocks' values, window order)
        or "patch_embeddings" (raster order: ``patch_embeddings``, ``tower_output``)."""
        windowed = value_named(of, PATCH_VALUES, "Muse per-patch") == "stream"
        _, _, sizes = self._image(inputs, image)
        height, width = (int(size) for size in sizes[image, 1:])
        start = int(sizes[:image].prod(dim=1).sum())
        side = inputs.config.vision_config.pos_emb_height
        cells = window_positions(height, width, side) if windowed else raster(height, width)
        return Grid(start + cells, slice(start, start + height * width), int(sizes.prod(dim=1).sum()))

    @staticmethod
    def _units(inputs: ImageInputs, height: int, width: int) -> torch.Tensor | None:
        """The image tokens are in raster order on every value: None."""
        return None


MUSE_GRIDS = MuseGrids()

__all__ = ["MUSE_GRIDS", "MUSE_VISION_RENAME", "MuseGrids", "MuseVision", "MuseVisionAttention"]
