"""The grids of a host that encodes each image as a square global view, then its local crops in a second run of the
tower (Step-3.7's): where each image's rows are (`envoys.image.grids`).

The views' run (``model.vision``) has one stream row per image, its view's
``side x side`` patches in raster order (``side``: the view's pixels over
the tower's patch size). The image tokens of each image are its crops'
tokens, crop after crop, then its view's ``view_side x view_side`` in raster
order (the processor's ``num_image_feature_size`` tokens; each crop's are
``num_patch_feature_size``); markers between them are not image tokens. So
``vision.patch_grid(value, image)`` is the image's view on its patch grid and
``vision.token_grid(value, image)`` its view's tokens on the view's token
grid. The crops' run (``model.crops``) lays each crop out on its own patch
grid: ``crops.patch_grid(value, crop)`` (`envoys.vision.crops.CropsRun`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..image.grids import Grid, ImageInputs, check_image, raster


def square_side(count: int, what: str) -> int:
    """The side of a square grid of ``count`` cells."""
    side = math.isqrt(count)
    if side * side != count:
        raise ValueError(f"{what} is {count}, not a square grid's")
    return side


@dataclass(frozen=True)
class GlobalViewGrids:
    """Each image's global view as one row of the views' run; its tokens after its crops' (Step-3.7)."""

    stream_dims: int = 2  # [views, patches, ...]

    def patch_grid(self, inputs: ImageInputs, image: int) -> Grid:
        pixels = inputs["pixel_values"]
        check_image(image, pixels.shape[0])
        side = pixels.shape[-1] // inputs.config.vision_config.patch_size
        start = image * side * side
        return Grid(raster(side, side, start), slice(start, start + side * side), pixels.shape[0] * side * side)

    def token_grid(self, inputs: ImageInputs, image: int) -> Grid:
        crops = [int(count) for count in inputs["num_local_patches"]]
        check_image(image, len(crops))
        view, crop = inputs.processor.num_image_feature_size, inputs.processor.num_patch_feature_size
        counts = [count * crop + view for count in crops]
        start = sum(counts[:image])
        side = square_side(view, "the processor's num_image_feature_size")
        return Grid(raster(side, side, start + crops[image] * crop), slice(start, start + counts[image]))


__all__ = ["GlobalViewGrids"]
