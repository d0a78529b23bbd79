"""What Aya Vision and Cohere 2 Vision share: a SigLIP tower on tiles, a pixel-shuffle projector, Cohere 2 text blocks.

The image processor cuts each image into tiles of the tower's ``image_size``:
it picks a canvas of ``columns x rows`` tiles for the image's aspect ratio
(between the image processor's ``min_patches`` and ``max_patches`` tiles),
resizes the image to it, cuts it into tiles in raster order and, when there
are several, appends the whole image resized to one tile (the thumbnail). So
an image is ``columns * rows + 1`` tiles, or one tile when its canvas is a
single tile, and ``pixel_values`` is ``[tiles, 3, image_size, image_size]``:
every image's tiles, image after image. The processor returns no image
sizes, so the grids (`ShuffledTileGrids`) take each image's canvas from the
size of the image the trace handed the processor (``ImageInputs.given_sizes``).

The tower (``model.vision_tower``, SigLIP: no CLS) runs once over every tile:
each tile is a row of its values, ``[tiles, patches, vision_hidden_size]``
(`Patches`, the images axis counting tiles), ``patches`` being
``(image_size // patch_size) ** 2`` in raster order, and its ``post_layernorm``
normalises every patch (the tower's ``norm``). The projector
(``model.multi_modal_projector``) pixel-shuffles in its own forward: it folds
each ``downsample_factor`` x ``downsample_factor`` block of a tile's patches
into one row (the block's patches joined on the feature axis, row by row),
then maps it to the text width (a SwiGLU), so ``projector.input`` is the
tower's per-patch stream, ``[tiles, patches, vision_hidden_size]``, and
``projector.output`` is ``[tiles, side, side, hidden_size]`` with ``side =
image_size // patch_size // downsample_factor``: one image token per block, on
the tile's grid of blocks. The host flattens it to ``[tiles, side * side,
hidden_size]`` and scatters that at the image tokens, so ``image_features``
is ``projector.output`` flattened: tile after tile, each tile's tokens in
raster order of its blocks. The patch at row ``r``, column ``c`` of a tile
reaches only the token of block ``(r // downsample_factor, c //
downsample_factor)`` of that tile.

The text model is Cohere 2, whose parallel blocks are `envoys.blocks.parallel`'s.
"""

from __future__ import annotations

import importlib
import re
from typing import Any

from transformers.models.siglip.modeling_siglip import (
    SiglipAttention,
    SiglipEncoderLayer,
    SiglipMLP,
    SiglipVisionModel,
)

from rewrites.image_scatter import Scatter

from ..core.values import Unavailable
from ..image.grids import GridError, ImageInputs, TiledImage, TiledLayout, TokenRun
from ..vision.tower import Vision, VisionAttention, VisionLayer, VisionMlp


class ShuffleVision(Vision):
    """The SigLIP tower of Aya Vision and Cohere 2 Vision: each tile of each image is a row, ``[tiles, patches,
    vision_hidden_size]``.

    Rows are the tiles the image processor made, image after image: each
    image's grid tiles in raster order, then its thumbnail (an image whose
    canvas is one tile has that tile alone); each row holds a tile's
    ``(image_size // patch_size) ** 2`` patches in raster order, no CLS
    token. ``tower_output`` is after ``post_layernorm``. Sizes are SigLIP's;
    ``image_size`` is the tile's side, and ``downsample_factor`` and
    ``tokens_per_tile`` say how the projector folds a tile into image tokens.
    """

    @property
    def image_size(self) -> int:
        """The side of a tile, in pixels (the vision config's ``image_size``): every row of the tower is one tile."""
        return self.vision_config.image_size

    @property
    def downsample_factor(self) -> int:
        """The side, in patches, of the square block the projector's pixel shuffle folds into one image token."""
        return self.root.config.downsample_factor

    @property
    def tokens_per_tile(self) -> int:
        """Image tokens per tile: ``(image_size // patch_size // downsample_factor) ** 2``."""
        return (self.image_size // self.patch_size // self.downsample_factor) ** 2


#: The tower's envoys (the family adds the feature-layer gradients where its projector reads an earlier state).
TOWER_ENVOYS = {SiglipVisionModel: ShuffleVision, SiglipEncoderLayer: VisionLayer, SiglipAttention: VisionAttention,
                SiglipMLP: VisionMlp}


#: The host flattens the projector's tile grids to [tiles, tokens, hidden] before it scatters them.
SCATTER = Scatter(purpose="pixel-shuffled tiles, [tiles, tokens, hidden], scattered into the embeddings")


def canvas(inputs: ImageInputs, image: int) -> tuple[int, int]:
    """``(columns, rows)``: the canvas of tiles the image processor picks for image ``image``, from the size of the
    image the trace handed it and the image processor's own canvas rule (``get_optimal_tiled_canvas`` of its
    module: GotOcr2's for Aya Vision, Cohere 2 Vision's own)."""
    if inputs.given_sizes is None:
        raise Unavailable(
            "the grids are unavailable: this processor returns no image sizes, and how it tiles an image depends on "
            "the image's size; pass the images to the trace as images= (not as pixel_values), so their sizes are known"
        )
    processor = inputs.processor.image_processor
    rule = getattr(importlib.import_module(type(processor).__module__), "get_optimal_tiled_canvas", None)
    if rule is None:
        raise Unavailable(f"the grids are unavailable: {type(processor).__name__}'s module has no "
                          f"get_optimal_tiled_canvas, the rule by which it tiles an image")
    size = processor.size
    tile = (size["height"], size["width"])
    return tuple(rule(tuple(inputs.given_sizes[image]), tile, processor.min_patches, processor.max_patches))


class ShuffledTileGrids(TiledLayout):
    """The grids of Aya Vision and Cohere 2 Vision: each image's grid tiles placed on its canvas, the thumbnail in
    the image's rows, off the grid.

    The prompt holds one run of image tokens per tile, image after image;
    `image_runs` (the family's reading of its processor's prompt) groups them
    into each image's grid tiles and its last tile, and the canvas's
    ``columns`` (`canvas`) places grid tile ``k`` at row ``k // columns``,
    column ``k % columns``. On the tower's stream (``[tiles, patches, ...]``)
    a cell is its patch's row; on the image tokens a cell is one token: the
    ``downsample_factor`` x ``downsample_factor`` block of patches the pixel
    shuffle folds into it.
    """

    def image_runs(self, inputs: ImageInputs) -> list[tuple[list[TokenRun], TokenRun]]:
        """Each image's grid tiles' runs of image tokens, in the prompt's order, and the run of its last tile (the
        thumbnail, or the image's one tile)."""
        raise NotImplementedError

    def token_side(self, config: Any) -> int:
        return self.patch_side(config) // config.downsample_factor

    def tiled_images(self, inputs: ImageInputs) -> list[TiledImage]:
        images, first = [], 0
        for image, (grid, whole) in enumerate(self.image_runs(inputs)):
            tiles: tuple = ()
            if grid:
                columns, rows = canvas(inputs, image)
                if columns * rows != len(grid):
                    height, width = inputs.given_sizes[image]
                    raise GridError(
                        f"image {image}'s prompt holds {len(grid)} grid tiles, and its image processor tiles a "
                        f"{height}x{width} image into {columns}x{rows}: the batch was processed with other settings "
                        f"(min_patches, max_patches) than the processor's own, so its tiles cannot be placed"
                    )
                tiles = tuple((k // columns, k % columns, run) for k, run in enumerate(grid))
            images.append(TiledImage(tiles, whole, first))
            first += len(grid) + 1
        return images


def unexpected(inputs: ImageInputs, run: TokenRun, expected: str) -> GridError:
    """The error for a run of image tokens after a token the processor does not write there."""
    return GridError(f"the image tokens at position {run.position} of prompt {run.batch} follow "
                     f"{inputs.token_before(run)!r}, not {expected}: the prompt is not one the processor wrote, so "
                     f"its tiles cannot be placed")


class AyaGrids(ShuffledTileGrids):
    """Aya Vision's prompt: ``<|START_OF_IMG|>``, then ``TILE_k`` before grid tile ``k`` (from 1) and
    ``TILE_GLOBAL`` before the last tile, each followed by the tile's image tokens, then ``<|END_OF_IMG|>``."""

    def image_runs(self, inputs: ImageInputs) -> list[tuple[list[TokenRun], TokenRun]]:
        tile, last = inputs.processor.tile_token, inputs.processor.tile_global_token
        numbered = re.compile(rf"{re.escape(tile)}_(\d+)")
        images, pending = [], []
        for run in inputs.token_runs():
            before = inputs.token_before(run) or ""
            placed = numbered.fullmatch(before)
            if placed is not None and int(placed.group(1)) == len(pending) + 1:
                pending.append(run)
            elif before == last:
                images.append((pending, run))
                pending = []
            else:
                raise unexpected(inputs, run, f"{tile}_{len(pending) + 1} or {last}")
        return images


class Cohere2VisionGrids(ShuffledTileGrids):
    """Cohere 2 Vision's prompt: ``<|START_OF_IMG|>``, then each tile's image tokens followed by
    ``<|IMG_LINE_BREAK|>``, then ``<|END_OF_IMG|>``; the last tile of an image of several is its thumbnail."""

    def image_runs(self, inputs: ImageInputs) -> list[tuple[list[TokenRun], TokenRun]]:
        start, between = inputs.processor.boi_token, inputs.processor.img_line_break_token
        images: list[list[TokenRun]] = []
        for run in inputs.token_runs():
            before = inputs.token_before(run)
            if before == start:
                images.append([run])
            elif before == between and images:
                images[-1].append(run)
            else:
                raise unexpected(inputs, run, f"{start} or {between}")
        return [(runs[:-1], runs[-1]) for runs in images]
