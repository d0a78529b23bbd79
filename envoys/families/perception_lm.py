"""PerceptionLM (model_type perception_lm): timm's Perception Encoder in transformers' ``TimmWrapper``, a two-layer
MLP projector that pools its output, a Llama text model.

``PerceptionLMModel`` (the wrapper's inner model) scatters the projected
features into the token embeddings with ``inputs_embeds.masked_scatter``
(``inputs_embeds_masked_scatter_0``, argument 1, found as on every default
host), so ``image_features`` is the projector's output flattened over tiles
and tokens. Videos: the host runs the same tower and projector on every
sampled frame (``model.video``, frames as its batch: each frame one tile,
resized whole by the video processor) and scatters them at
``inputs_embeds_masked_scatter_1``: ``vision.video_features`` is
``[video_tokens, hidden_size]``, frame after frame, each frame's pooled
tokens in raster order (``vision.video_token_grid``).

The processor cuts each image into tiles of ``tile_size`` pixels
(``vision_input_type="thumb+tile"``): first the whole image resized to one
tile (the thumbnail), then the image resized to a canvas of up to
``max_num_tiles`` tiles (the processor's choice of columns and rows, off the
image's size) cut into tiles in raster order. The tower
(``model.vision_tower``, `envoys.towers.timm_vit`) runs on every tile of
every image, ``[tiles, 1 + patches, vision_hidden_size]`` with the CLS row
first; its blocks are ``timm_model.blocks`` (``vision.layers``), its patch
embedding ``timm_model.patch_embed``, its final norm ``timm_model.norm``
(``tower_output`` is after it). The attention is timm's, chosen per instance
by ``fused_attn``: loaded with ``attn_implementation="eager"``, the library
sets every timm attention of the tower to its eager branch (transformers does
not), and the pattern is served; under any other implementation the scores
and probabilities are `Unavailable`, saying so.

The host drops the CLS row (``vision_use_cls_token``), so
``projector.input`` is ``tower_output[:, 1:]``; the projector
(``model.multi_modal_projector``) applies ``linear_1``, GELU, ``linear_2`` to
each patch, then its adaptive average pooling (``projector_pooling_ratio``)
folds each tile's square grid of patches to a grid ``ratio`` times smaller a
side: ``projector.output`` is ``[tiles, (side / ratio)**2, hidden_size]``. The
grids (`PerceptionGrids`) put each image's patches and tokens back where its
tiles came from: the grid tiles stitched by their column and row, the
thumbnail off the grid. Token ``(r, c)`` of a tile is the mean of its patches
``ratio*r .. ratio*r + ratio - 1`` by ``ratio*c .. ratio*c + ratio - 1``
(exactly, where the side is a multiple of the ratio).
"""

from __future__ import annotations

from typing import Any

import torch

from ..image.frames import uniform_frames
from ..image.grids import Grid, GridError, ImageInputs, TiledImage, TiledLayout, TokenRun, check_image, raster
from ..towers.encoder_names import WRAPPER_RENAME
from ..towers.timm_vit import TIMM_PE_ENVOYS, TIMM_PE_RENAME, pooling_head
from . import IMAGE_AND_VIDEO, Family

RENAME = {**WRAPPER_RENAME, **TIMM_PE_RENAME}

ENVOYS = dict(TIMM_PE_ENVOYS)


class PerceptionGrids(TiledLayout):
    """Each image's tiles, the thumbnail first, then the canvas's tiles in raster order; every tile's rows are a CLS
    row then its patches in raster order; its image tokens one run per image, tile after tile, each tile's pooled
    grid in raster order."""

    def _side(self, inputs: ImageInputs) -> int:
        """Patches along a tile's side: the tile's pixels over the processor's patch size."""
        return inputs["pixel_values"].shape[-1] // inputs.processor.patch_size

    def rows_before_patches(self, config: Any) -> int:
        return 1

    def batch_token_side(self, inputs: ImageInputs) -> int:
        """Image tokens along a tile's side: its patches over the projector's pooling ratio."""
        return self._side(inputs) // max(inputs.config.projector_pooling_ratio, 1)

    def canvas(self, inputs: ImageInputs, image: int) -> tuple[int, int]:
        """``(columns, rows)`` of the tiles image ``image`` was cut into, as the image processor chose them off the
        image's size."""
        if inputs.given_sizes is None:
            raise GridError("the tiles' arrangement depends on each image's size, and the invokes handed the processor "
                            "pixels: hand the model images= for vision.patch_grid and token_grid")
        processor = inputs.processor.image_processor
        height, width = inputs.given_sizes[image]
        tile = processor.tile_size
        found = processor._fit_image_to_canvas(img_width=width, img_height=height, tile_size=tile)
        return found if found is not None else processor._find_closest_aspect_ratio(
            img_width=width, img_height=height, tile_size=tile)

    def tiled_images(self, inputs: ImageInputs) -> list[TiledImage]:
        pixels = inputs["pixel_values"]
        images, tiles = pixels.shape[0], pixels.shape[1]
        side = self.batch_token_side(inputs)
        per_tile = side * side
        spots = inputs.image_token_mask.nonzero().tolist()  # (batch, position) of every image token, in order
        found: list[TiledImage] = []
        for image in range(images):
            first = image * tiles * per_tile

            def run(tile: int, start: int = first) -> TokenRun:
                batch, position = spots[start + tile * per_tile]
                return TokenRun(batch, position, start + tile * per_tile, per_tile)

            if tiles == 1:
                found.append(TiledImage((), run(0), image, whole_first=True))
                continue
            columns, rows = self.canvas(inputs, image)
            if columns * rows != tiles - 1:
                raise GridError(f"image {image} has {tiles - 1} grid tiles, not the {columns}x{rows} its size gives")
            grid = tuple((k // columns, k % columns, run(1 + k)) for k in range(tiles - 1))
            found.append(TiledImage(grid, run(0), image * tiles, whole_first=True))
        return found

    def video_token_grid(self, inputs: ImageInputs, video: int, mask: torch.Tensor) -> Grid:
        """Video ``video``'s grids over the video tokens, ``[frames, side, side]``: each frame is one tile, pooled like
        an image's, frame after frame (`uniform_frames`)."""
        return uniform_frames(inputs, video, mask)

    def patch_grid(self, inputs: ImageInputs, image: int) -> Grid:
        images = self.tiled_images(inputs)
        check_image(image, len(images))
        tiled, side = images[image], self._side(inputs)
        rows = 1 + side * side
        cells = tiled.placed(lambda tile, run: raster(side, side, tile * rows + 1))
        tiles = sum(each.count for each in images)
        return Grid(cells, slice(tiled.first * rows, (tiled.first + tiled.count) * rows), tiles * rows)


FAMILY = Family("perception_lm", RENAME, ENVOYS, "model.language_model.layers", grid_layout=PerceptionGrids(),
                not_served=pooling_head, media=IMAGE_AND_VIDEO)
