"""The tiled tower and pixel-shuffle connector that Idefics 3 and SmolVLM share.

The processor cuts each image into tiles (``do_image_splitting``): it resizes
the image so its longest edge is the image processor's ``size``, rounds both
sides up to multiples of the tile side (``max_image_size``, the vision
config's ``image_size``), cuts that into rows x cols tiles in raster order,
and appends the whole image resized to one tile (the global image). So an
image is ``rows * cols + 1`` tiles (1 when it is not split), and
``pixel_values`` is ``[batch, tiles, 3, image_size, image_size]``, padded with
all-zero tiles to the batch's largest tile count.

The host drops every all-zero tile (the padding) before the tower and runs
the tower (``model.vision_model``, a SigLIP-like ``Idefics3VisionTransformer``
/ ``SmolVLMVisionTransformer``; blocks ``encoder.layers``; no CLS token) once
over the remaining tiles: each tile is a row of the tower's values,
``[tiles, patches, vision_hidden_size]`` (`Patches`, the images axis counting
tiles), ``patches`` being ``(image_size // patch_size) ** 2`` in raster
order. The tiles are in the order the processor made them: image after
image, each image's tiles row by row, its global image last. The tower's
``post_layernorm`` normalises every patch (the tower's ``norm``), and its
output, ``tower_output``, is what the connector (``model.projector``)
receives. The connector pixel-shuffles each tile, folding each
``scale_factor`` x ``scale_factor`` block of patches into one row, and maps
it to the text width, so a tile becomes ``image_seq_len`` image tokens, and
``image_features`` is ``[tiles * image_seq_len, hidden_size]``: tile after
tile in the tower's order, each tile's tokens in raster order of its blocks,
as the prompt holds the image tokens (the processor writes
``<fake_token_around_image><row_r_col_c>`` before each tile's tokens, and
``<global-img>`` before the global image's).

Granite-Docling's tower is the same ViT on the same kind of tiles, with the
connector inside it and two differences the ``Connected*`` classes serve: an
image its processor does not split is one grid tile (``<row_1_col_1>``, no
global image), and ``tower_output`` is read at ``post_layernorm`` before the
connector runs (`ConnectedTiledVision`, `ConnectedTiledGrids`).
"""

from __future__ import annotations

import re
from typing import Any

from ..core.layouts import Patches
from ..core.standard import child
from ..core.values import value
from ..image.grids import GridError, ImageInputs, TiledImage, TiledLayout
from ..vision.tower import Vision, no_images
from .encoder_names import ENCODER_RENAME

#: The native names of the tower, the connector and the Llama text model under the standard ones.
TILED_RENAME = {
    "model.text_model.embed_tokens": "embed_tokens",
    "model.text_model.layers": "layers",
    "model.text_model.norm": "norm",
    "model.vision_model": "vision",
    "model.connector": "projector",
    **ENCODER_RENAME,
    "post_layernorm": "norm",
}

#: Where the text blocks are.
TEXT_LAYERS = "model.text_model.layers"


class TiledVision(Vision):
    """The tower of Idefics 3 and SmolVLM: each tile of each image is a row, ``[tiles, patches, vision_hidden_size]``.

    Rows are the tiles the host keeps (the processor's all-zero padding tiles
    are dropped before the tower): image after image, each image's rows x
    cols tiles in raster order, then its global image; each row holds a
    tile's ``(image_size // patch_size) ** 2`` patches in raster order, no
    CLS token. ``tower_output`` is after ``post_layernorm`` and is what the
    connector receives. Sizes are the vision config's (SigLIP's spellings);
    ``image_size`` is the tile's side, and ``scale_factor`` and
    ``image_seq_len`` say how the connector folds a tile into image tokens.
    """

    @property
    def image_size(self) -> int:
        """The side of a tile, in pixels (the vision config's ``image_size``): every row of the tower is one tile."""
        return self.vision_config.image_size

    @property
    def scale_factor(self) -> int:
        """The side, in patches, of the square block the connector's pixel shuffle folds into one image token."""
        return self.root.config.scale_factor

    @property
    def image_seq_len(self) -> int:
        """Image tokens per tile: ``(image_size // patch_size) ** 2 // scale_factor ** 2``."""
        return (self.image_size // self.patch_size) ** 2 // self.scale_factor**2


def _norm_output(vision: Any) -> str:
    return f"{child(vision, 'norm').path}.output"


class ConnectedTiledVision(TiledVision):
    """A tiled tower that holds its connector (Granite-Docling's ``GraniteDoclingVisionModel``): `TiledVision`'s
    rows and sizes, the connector run inside the tower's forward.

    The connector (``model.projector``, the tower's child ``connector``)
    receives the tower's ``post_layernorm`` output, and the tower returns
    after it, so ``tower_output`` is served at ``post_layernorm``'s output
    (the tower's ``last_hidden_state``, the same tensor), before the
    connector's values, where a write reaches the connector. The pixel
    shuffle's factor is the vision config's ``scale_factor`` (the coarse path;
    the fine path, when the processor is called with ``fine_route=True``,
    shuffles by half of it: four times as many image tokens a tile).
    """

    tower_output = value(
        "tower_output", Patches, description="the last block's stream after post_layernorm, what the connector receives",
        key=_norm_output, select=None, unavailable=no_images,
        doc="The last block's stream after ``post_layernorm`` (the tower's ``last_hidden_state``), "
            "``[tiles, patches, vision_hidden_size]``: what the connector receives, read before the connector runs.",
    )

    @property
    def scale_factor(self) -> int:
        """The side, in patches, of the square block the coarse path's pixel shuffle folds into one image token."""
        return self.vision_config.scale_factor

    @property
    def image_seq_len(self) -> int:
        """Image tokens per tile on the coarse path: ``(image_size // patch_size) ** 2 // scale_factor ** 2`` (four
        times as many on the fine path)."""
        return super().image_seq_len


#: The token before a grid tile's image tokens: ``<row_{r}_col_{c}>``, both counted from 1.
ROW_COLUMN = re.compile(r"<row_(\d+)_col_(\d+)>")


def tiled_images(inputs: ImageInputs, unsplit_tile: bool = False) -> list[TiledImage]:
    """The batch's images as their prompts lay out their tiles: each run of image tokens is a tile, placed by the
    ``<row_r_col_c>`` token before it; the run after the global-image token is the whole image, and closes it.

    ``unsplit_tile``: an image the processor did not split is one tile placed at ``<row_1_col_1>``, with no
    global image after it (Granite-Docling's prompts), closed by the next image's first tile or the batch's end.
    """
    whole_image = getattr(inputs.processor, "global_image_token", "<global-img>")
    images: list[TiledImage] = []
    pending: list = []
    tile = 0

    def close_unsplit() -> None:
        nonlocal pending, tile
        if len(pending) != 1:
            raise GridError(f"the prompt's tiles {[placed[:2] for placed in pending]} are not followed by the "
                            f"{whole_image} token, and an image that was not split is one tile: the prompt is not one "
                            f"the processor wrote, so its tiles cannot be placed")
        images.append(TiledImage((), pending[0][2], tile))
        tile += 1
        pending = []

    for run in inputs.token_runs():
        before = inputs.token_before(run)
        placed = ROW_COLUMN.fullmatch(before or "")
        if placed is not None:
            row, column = int(placed.group(1)) - 1, int(placed.group(2)) - 1
            if unsplit_tile and (row, column) == (0, 0) and pending:  # a new image: the one before was not split
                close_unsplit()
            pending.append((row, column, run))
        elif before == whole_image:
            images.append(TiledImage(tuple(pending), run, tile))
            tile += len(pending) + 1
            pending = []
        else:
            raise GridError(f"the image tokens at position {run.position} of prompt {run.batch} follow {before!r}, "
                            f"neither a <row_r_col_c> nor the {whole_image} token: the prompt is not one the "
                            f"processor wrote, so its tiles cannot be placed")
    if unsplit_tile and pending:
        close_unsplit()
    return images


class TiledGrids(TiledLayout):
    """The grids of Idefics 3 and SmolVLM: each image's tiles placed by the ``<row_r_col_c>`` token before their
    image tokens (an image that was not split: its one tile), the global image in the span, off the grid.

    On the tower's stream (``[tiles, patches, ...]``, no CLS) a cell is its
    patch's row; on the image tokens, a cell is one token: the
    ``scale_factor`` x ``scale_factor`` block of patches the pixel shuffle
    folds into it, in raster order of the blocks within each tile.
    """

    def tiled_images(self, inputs: ImageInputs) -> list[TiledImage]:
        return tiled_images(inputs)

    def token_side(self, config: Any) -> int:
        return self.patch_side(config) // config.scale_factor


class ConnectedTiledGrids(TiledGrids):
    """The grids of Granite-Docling: `TiledGrids`'s, but an image the processor did not split is one grid tile (the
    whole image, ``<row_1_col_1>`` before its tokens, no global image), and the pixel shuffle's factor is the vision
    config's ``scale_factor``, halved on a batch the processor routed to the fine path (``tile_fine_mask``)."""

    def tiled_images(self, inputs: ImageInputs) -> list[TiledImage]:
        return tiled_images(inputs, unsplit_tile=True)

    def token_side(self, config: Any) -> int:
        return self.patch_side(config) // config.vision_config.scale_factor

    def batch_token_side(self, inputs: ImageInputs) -> int:
        if inputs.get("tile_fine_mask") is not None:
            return self.patch_side(inputs.config) // (inputs.config.vision_config.scale_factor // 2)
        return self.token_side(inputs.config)
