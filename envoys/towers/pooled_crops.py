"""Where an image's rows are when a tower sees it as overlapping crops and an adapter pools patches per token by index.

Molmo 2's processor cuts each image into its low-resolution view (the whole
image resized to one crop) and high-resolution crops that overlap by
``overlap_margins`` patches, and names, for each image token, the patches it
pools: ``image_token_pooling`` (the adapter's ``pooled_patches_idx``), long
``[image_tokens, pool_h * pool_w]``, each entry a row of the tower's stream
flattened over its crops (``crop * patches_per_crop + patch``), -1 a padding
slot, counted over the batch's crops or, where the host moves them
(``numbered_per_image``, transformers 5.25 on), over the image's own. Its ``image_grids`` give each image's ``[low_rows, low_columns,
high_rows, high_columns]`` in tokens, ``image_num_crops`` its crops (the
low-resolution view first).

So the grids come from those indices, not from the crops' geometry: a
token's pooling window is ``pool_h x pool_w`` patches of the image's canvas,
windows in raster order, and the processor's index grid of the canvas (each
patch once, the overlapping margins left to one crop) is the windows put back
side by side, padding slots (all -1 rows and columns at its edges) dropped.

- ``patch_grid``: the canvas's patches, each cell the stream row the adapter
  pools there; ``view="low"``: the low-resolution view's patches, its crop in
  raster order.
- ``token_grid``: the high-resolution tokens on their ``high_rows x
  high_columns`` grid (a token is the window of patches its
  ``image_token_pooling`` row names); ``view="low"``: the low-resolution
  view's tokens on theirs. An image's tokens are its low-resolution ones first,
  then the high-resolution ones, each run in raster order (the processor's
  ``<im_col>`` tokens between rows are no image tokens).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..image.grids import Grid, GridError, ImageInputs, check_image, raster

#: The two views of an image a grid may be over.
VIEWS = ("high", "low")


def chosen_view(view: str) -> str:
    """``view`` if it is one of `VIEWS`; else `GridError` saying which there are."""
    if view not in VIEWS:
        raise GridError(f"view={view!r} is not a view of the image; Molmo 2 sees each image as its high-resolution "
                        "crops (view='high', the default) and its low-resolution view (view='low')")
    return view


@dataclass(frozen=True)
class PooledImage:
    """One image of the batch, as the processor's pooling inputs lay it out.

    ``first_crop`` and ``crops``: its crops among the batch's (the
    low-resolution view first); ``first_token``: its first row of ``out[mask]``;
    ``low`` and ``high``: ``(rows, columns)`` of its two token grids;
    ``windows``: long ``[high_rows * high_columns, pool_h * pool_w]``, the
    high-resolution tokens' rows of ``image_token_pooling``.
    """

    first_crop: int
    crops: int
    first_token: int
    low: tuple[int, int]
    high: tuple[int, int]
    windows: torch.Tensor

    @property
    def tokens(self) -> int:
        """Its image tokens: the low-resolution view's, then the high-resolution crops'."""
        return self.low[0] * self.low[1] + self.high[0] * self.high[1]


def pooling_window(inputs: ImageInputs) -> tuple[int, int]:
    """``(pool_h, pool_w)``: the processor's ``pooling_size``, checked against ``image_token_pooling``'s width."""
    pool_h, pool_w = (int(side) for side in inputs.processor.image_processor.pooling_size)
    width = inputs["image_token_pooling"].shape[-1]
    if pool_h * pool_w != width:
        raise GridError(f"image_token_pooling names {width} patches a token, not the processor's pooling_size "
                        f"{pool_h} x {pool_w}; the grids need the processor that made the inputs")
    return pool_h, pool_w


def pooled_images(inputs: ImageInputs, numbered_per_image: bool = False) -> list[PooledImage]:
    """Every image of the batch, in order, off ``image_grids``, ``image_num_crops`` and ``image_token_pooling``;
    ``numbered_per_image``: each image's indices count its own patches, so they are moved past the earlier images'."""
    grids = inputs["image_grids"].cpu().long().tolist()
    crops = inputs["image_num_crops"].cpu().long().tolist()
    pooling = inputs["image_token_pooling"].cpu().long()
    images, first_crop, first_token = [], 0, 0
    for (low_rows, low_columns, high_rows, high_columns), count in zip(grids, crops):
        low = low_rows * low_columns
        windows = pooling[first_token + low:first_token + low + high_rows * high_columns]
        if numbered_per_image:
            windows = torch.where(windows >= 0, windows + first_crop * inputs["pixel_values"].shape[1], windows)
        images.append(PooledImage(first_crop, count, first_token, (low_rows, low_columns), (high_rows, high_columns),
                                  windows))
        first_crop += count
        first_token += low + high_rows * high_columns
    return images


def canvas(image: PooledImage, pool: tuple[int, int]) -> torch.Tensor:
    """long ``[patch_rows, patch_columns]``: the image's high-resolution canvas, each cell the stream row pooled there.

    The token windows put back side by side, then the padding the processor
    added at the canvas's edges to fill the last windows (rows and columns
    of -1 only) dropped.
    """
    (rows, columns), (pool_h, pool_w) = image.high, pool
    cells = image.windows.reshape(rows, columns, pool_h, pool_w).permute(0, 2, 1, 3).reshape(rows * pool_h, columns * pool_w)
    real_rows = (cells >= 0).any(dim=1).nonzero().flatten()
    real_columns = (cells >= 0).any(dim=0).nonzero().flatten()
    return cells[real_rows.min():real_rows.max() + 1, real_columns.min():real_columns.max() + 1]


@dataclass(frozen=True)
class PooledCropGrids:
    """Molmo 2's grids (see the module's docstring): the tower's stream is ``[crops, patches_per_crop, ...]``, crops
    image after image; the image tokens are each image's low-resolution run, then its high-resolution run.
    ``numbered_per_image``: the processor numbers each image's patches from 0 (the host moves them)."""

    numbered_per_image: bool = False
    stream_dims = 2

    def _image(self, inputs: ImageInputs, image: int) -> PooledImage:
        images = pooled_images(inputs, self.numbered_per_image)
        check_image(image, len(images))
        return images[image]

    def patch_grid(self, inputs: ImageInputs, image: int, view: str = "high") -> Grid:
        """Image ``image``'s patches on its canvas (``view="high"``) or in its low-resolution crop (``"low"``)."""
        view, chosen = chosen_view(view), self._image(inputs, image)
        crops, per_crop = inputs["pixel_values"].shape[:2]
        span = slice(chosen.first_crop * per_crop, (chosen.first_crop + chosen.crops) * per_crop)
        if view == "low":
            side = int(per_crop ** 0.5)
            return Grid(raster(side, side, chosen.first_crop * per_crop), span, crops * per_crop)
        return Grid(canvas(chosen, pooling_window(inputs)), span, crops * per_crop)

    def token_grid(self, inputs: ImageInputs, image: int, view: str = "high") -> Grid:
        """Image ``image``'s high-resolution tokens on their grid (``view="high"``), or its low-resolution ones
        (``"low"``)."""
        view, chosen = chosen_view(view), self._image(inputs, image)
        span = slice(chosen.first_token, chosen.first_token + chosen.tokens)
        if view == "low":
            return Grid(raster(*chosen.low, chosen.first_token), span)
        return Grid(raster(*chosen.high, chosen.first_token + chosen.low[0] * chosen.low[1]), span)
