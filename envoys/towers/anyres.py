"""The anyres tiled tower (LLaVA-NeXT's and its kin's): a CLIP or SigLIP tower run on each image's base tile and grid
tiles, the host stitching the tiles' features into one grid, unpadding it and appending a newline row.

The image processor resizes and pads each image to the best of the config's
``image_grid_pinpoints`` and cuts it into tiles of the tower's ``image_size``,
after a base tile (the whole image resized to one tile); the processor pads
the tile axis of ``pixel_values`` to the largest count, and the host drops
the padding tiles before the tower. So the tower runs on every real tile of
the call, one row per tile (`Tiles`). The features the host scatters are
neither ``projector.output`` nor a reshape of it: ``vision.image_features`` is
read at the scatter (`LlavaNextVision`); `LlavaNextGrids` places each tile's
patches and each image token on the image's grid.
"""


from __future__ import annotations

import torch
from transformers.models.llava_next.modeling_llava_next import (
    get_anyres_image_grid_shape,
    image_size_to_num_patches,
    unpad_image,
)

from ..core.layouts import ImageFeatures, Layout
from ..core.values import Field, value
from ..image.frames import uniform_frames
from ..image.grids import Grid, ImageInputs, check_image, raster, stitch
from ..text.blocks import interior_values, stream_values
from ..towers.fixed_tower import TileRows
from ..vision.media import scattered_features
from ..vision.tower import (
    Vision,
    VisionAttention,
    VisionLayer,
    never_an_image,
    no_images,
    no_patch_embed,
)


class Tiles(Layout):
    """[tiles, 1+patches, vision_hidden_size]: the tower's stream, one row per tile, the CLS token first.

    Each image's base tile, then its grid tiles in raster order; images one after another.
    """


class TilePatches(Layout):
    """[tiles, patches, vision_hidden_size]: one row per tile, patches in raster order, no CLS.

    A CLIP tower's patch embedding's output (LLaVA-NeXT); a SigLIP tower's stream (LLaVA-OneVision).
    """


class LlavaNextVision(Vision):
    """LLaVA-NeXT's CLIP tower, on tiles: every tower value has one row per tile, not per image.

    The tile axis runs over every image of the invoke: image ``i`` holds
    ``1 + rows * columns`` tiles, its base tile first, where ``rows x columns``
    is the grid of the best of ``image_grid_pinpoints`` for its size (the
    processor's ``image_sizes``), in tiles of ``image_size`` pixels. Each row
    has the CLS token first, then the tile's patches in raster order. Sizes are
    the CLIP tower's; ``image_size`` is the side of a tile.
    """

    patch_embeddings = value(
        "patch_embeddings", TilePatches, description="the patch embedding's output, one row per tile",
        key=lambda v: f"{v.patch_embed.path}.output", select=None, unavailable=no_patch_embed,
        view=lambda grid: grid.flatten(2).transpose(1, 2),
        inverse=lambda written, current: written.transpose(1, 2).reshape(current.shape),
        doc="The patch embedding's output, ``[tiles, patches, vision_hidden_size]``, one row per tile, patches in "
        "raster order, before the position embedding (and the CLS token and ``pre_layrnorm`` a CLIP tower adds).",
    )

    tower_output = value(
        "tower_output", Tiles, description="the last block's stream, one row per tile (CLIP has no final norm over the patches)",
        key="output", select=Field("last_hidden_state"), unavailable=no_images,
        doc="The last block's stream, ``[tiles, 1 + patches, vision_hidden_size]``: CLIP's ``post_layernorm`` "
        "normalises only the pooled CLS, so this is the last block's output. The projector does not read it: it "
        "reads block -2 (``projector.input``).",
    )

    image_features = scattered_features(
        "image", ImageFeatures, never_an_image,
        doc="What LLaVA-NeXT scatters into the token embeddings at the image tokens, ``[image_tokens, "
        "hidden_size]``, image after image. An image's rows are: its base tile's projected patches (raster "
        "order, no CLS); then its grid tiles' projected patches laid out as one feature grid (``rows * "
        "side`` x ``columns * side`` for a grid of ``rows x columns`` tiles of ``side x side`` patches), "
        "cropped of the rows or columns the processor's padding added (from ``image_sizes``), in raster "
        "order, with one ``image_newline`` row (the host's learned ``model.image_newline``) after each of "
        "its rows. So it is neither ``projector.output`` nor a reshape of it; assign a tensor of the same "
        "shape, or edit it in place.",
    )

    @property
    def image_size(self) -> int:
        """Side of a square tile, in pixels: every tile the tower sees is this size."""
        return self.vision_config.image_size

    @property
    def image_grid_pinpoints(self) -> list[list[int]]:
        """The resolutions, ``[height, width]`` in pixels, an image may be resized and padded to before it is cut into tiles."""
        return [list(resolution) for resolution in self.root.config.image_grid_pinpoints]


class TileLayer(VisionLayer):
    """A CLIP block on tiles: ``layer_input + attention_output + mlp_output == layer_output``, each `Tiles`."""

    layer_input, attention_output, mlp_output, layer_output = stream_values(Tiles, no_images)


class TilePatchLayer(VisionLayer):
    """A SigLIP block on tiles (LLaVA-OneVision): ``layer_input + attention_output + mlp_output == layer_output``, each `TilePatches`."""

    layer_input, attention_output, mlp_output, layer_output = stream_values(TilePatches, no_images)


class TileAttention(VisionAttention):
    """A tower block's attention on tiles: the interior has one row per tile, and a tile's positions attend to each other only."""

    (
        attention_queries,
        attention_keys,
        attention_values,
        attention_scores,
        attention_probabilities,
        attention_head_outputs,
    ) = interior_values("tile", no_images)


class LlavaNextGrids:
    """LLaVA-NeXT's grids: each image's grid tiles placed where they came from, the padding cropped as the host crops it.

    Image ``i``'s grid is the host's unpadded feature grid: its ``rows x
    columns`` grid tiles (from ``image_sizes`` and ``image_grid_pinpoints``,
    with transformers' own functions) stitched into ``rows * side`` x
    ``columns * side`` patches, then cropped of the processor's padding
    (``unpad_image``). On the tower's stream (``[tiles, 1 + patches, ...]``)
    each cell is its patch's row; on the image tokens, its token, the
    ``image_newline`` after each grid row dropped. The base tile (the whole
    image on one tile) is in the image's span, not on its grid.
    """

    stream_dims = 2

    def video_token_grid(self, inputs: ImageInputs, video: int, mask: torch.Tensor) -> Grid:
        """Video ``video``'s grids over the video tokens, ``[frames, side, side]``: LLaVA-NeXT-Video pools each frame's
        patches into a square of tokens, raster order, frame after frame (`uniform_frames`)."""
        return uniform_frames(inputs, video, mask)

    def _tiles(self, inputs: ImageInputs, image: int) -> list[int]:
        """How many tiles each image has (its base tile included)."""
        sizes = inputs["image_sizes"]
        check_image(image, sizes.shape[0])
        config = inputs.config
        return [image_size_to_num_patches(size, config.image_grid_pinpoints, config.vision_config.image_size)
                for size in sizes]

    @staticmethod
    def _placed(inputs: ImageInputs, image: int, first_tile: int, tile: TileRows, per_tile: int) -> torch.Tensor:
        """long ``[grid_rows, grid_columns]``: the unpadded grid of image ``image``, each cell's index when each tile
        holds ``per_tile`` indices from ``first_tile * per_tile`` on and a patch sits at ``tile.patches`` within."""
        config = inputs.config
        size = inputs["image_sizes"][image]
        rows, columns = get_anyres_image_grid_shape(size, config.image_grid_pinpoints, config.vision_config.image_size)
        tiles = torch.stack([tile.patches((first_tile + 1 + t) * per_tile) for t in range(rows * columns)])
        return unpad_image(stitch(tiles, rows, columns)[None], size)[0]

    def _feature_shape(self, inputs: ImageInputs, image: int) -> tuple[int, int]:
        """``(rows, columns)`` of image ``image``'s feature grid, the tokens after its base tile's: its unpadded grid."""
        side = TileRows.of(inputs.config).side
        rows, columns = self._placed(inputs, image, 0, TileRows(side, 0, 0), side**2).shape
        return rows, columns

    def _token_cells(self, inputs: ImageInputs, image: int, start: int) -> tuple[torch.Tensor, int]:
        """Image ``image``'s token grid when its tokens begin at ``start``, and where they end: the base tile's
        tokens, then the feature grid with one newline token after each of its rows."""
        rows, columns = self._feature_shape(inputs, image)
        grid_start = start + TileRows.of(inputs.config).tokens
        return raster(rows, columns + 1, grid_start)[:, :columns], grid_start + rows * (columns + 1)

    def tiles(self, inputs: ImageInputs) -> int:
        """How many tiles the batch's images make on the tower's stream: each image's, as the host unpads them."""
        return sum(self._tiles(inputs, 0))

    def patch_grid(self, inputs: ImageInputs, image: int) -> Grid:
        tiles, tile = self._tiles(inputs, image), TileRows.of(inputs.config)
        first = sum(tiles[:image])
        cells = self._placed(inputs, image, first, tile, tile.rows)
        return Grid(cells, slice(first * tile.rows, (first + tiles[image]) * tile.rows), sum(tiles) * tile.rows)

    def token_grid(self, inputs: ImageInputs, image: int) -> Grid:
        check_image(image, inputs["image_sizes"].shape[0])
        start = 0
        for earlier in range(image):
            _, start = self._token_cells(inputs, earlier, start)
        cells, end = self._token_cells(inputs, image, start)
        return Grid(cells, slice(start, end))
