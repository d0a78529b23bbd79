"""The grids of a tower whose rows are whole images padded with zeros to one patch grid, read by a resampler.

Idefics 2 and Aria: the processor pads each image, bottom and right, to a
common size and says which pixels are real (``pixel_attention_mask``
``[batch, images, height, width]`` on Idefics 2, ``pixel_mask`` ``[images,
height, width]`` on Aria); the tower's stream is ``[images, patches, ...]``
over the padded grid in raster order. An image's real patches are the
top-left ``rows x columns`` of that grid: on Idefics 2 a patch is real
where all its pixels are, on Aria where any is. Images whose mask holds no
real pixel (Idefics 2's padding of a batch whose prompts hold different
image counts) never reach the tower.

The image tokens are not on any grid: a resampler's latents (Idefics 2's
perceiver) or learned queries (Aria's projector) each cross-attend to every
real patch of the image, so ``token_grid`` is Unavailable, with that reason.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..core.values import Unavailable
from ..image.grids import Grid, ImageInputs, check_image


@dataclass(frozen=True)
class PaddedImageGrids:
    """Where each image's patches are on a tower of padded whole images; no grid for its resampled tokens."""

    mask: str  #: the processor output marking the real pixels
    whole: bool  #: a patch is real where all its pixels are (else where any is)
    tokens: str  #: why the image tokens have no grid (what they are)
    #: the image processor's switch that cuts each image into crops, each a row of its own (Idefics 2's
    #: ``do_image_splitting``), or None: while it is on, a row is no longer an image and no grid is served
    splits: str | None = None

    stream_dims = 2  # [images, patches, ...]

    def real_patches(self, inputs: ImageInputs) -> torch.Tensor:
        """bool ``[images, grid_rows, grid_columns]``: which patches of each image the tower receives are real."""
        if self.splits is not None and getattr(getattr(inputs.processor, "image_processor", None), self.splits, False):
            raise Unavailable(f"the grids are unavailable while the image processor's {self.splits} is on: each "
                              f"image is then several crops, each a row of the tower, and no grid places them")
        pixels = inputs[self.mask]
        pixels = pixels.reshape(-1, *pixels.shape[-2:]).bool()
        pixels = pixels[pixels.flatten(1).any(1)]  # images the host drops: no real pixel at all
        side = inputs.config.vision_config.patch_size
        cells = pixels.unfold(1, side, side).unfold(2, side, side).flatten(-2)
        return cells.all(-1) if self.whole else cells.any(-1)

    def patch_grid(self, inputs: ImageInputs, image: int) -> Grid:
        """Image ``image``'s real patches over the stream's rows (images by padded patches, flattened)."""
        real = self.real_patches(inputs)
        check_image(image, real.shape[0])
        images, height, width = real.shape
        rows, columns = int(real[image].any(1).sum()), int(real[image].any(0).sum())
        start = image * height * width
        cells = start + torch.arange(rows)[:, None] * width + torch.arange(columns)[None, :]
        return Grid(cells, slice(start, start + height * width), images * height * width)

    def token_grid(self, inputs: ImageInputs, image: int) -> Grid:
        raise Unavailable(f"the image tokens have no grid: they are {self.tokens}, each attending to every real "
                          f"patch of its image, so none sits on a cell of the image")
