"""LLaVA-OneVision (model_type llava_onevision): a SigLIP tower on tiles, a two-layer projector, a Qwen2 text model.

LLaVA-NeXT's anyres tiling (`envoys.towers.anyres`) on a SigLIP tower.
The image processor resizes and pads an image to the best of
``image_grid_pinpoints`` and cuts it into tiles of the tower's ``image_size``,
after a base tile (the whole image resized to one tile); the host drops the
processor's all-zero padding tiles, so the tower runs on every real tile of
the call, one row per tile, ``[tiles, patches, vision_hidden_size]``: each
image's base tile then its grid tiles in raster order, images one after
another, no CLS token (`TilePatches`). An image that shares its prompt with
others (passed nested, ``images=[[a, b]]``: the processor's
``batch_num_images``) is not cut: it is one tile, the whole image padded to a
square.

The projector (``model.multi_modal_projector``) reads the tower's
``hidden_states[-1]`` (``vision_feature_layer`` -1, strategy "full": the last
block's output before ``post_layernorm``, every patch), so ``projector.input``
is ``vision.layers[-1].layer_output`` and ``tower_output``, after the norm,
feeds nothing. After the projector, ``LlavaOnevisionModel.get_image_features``
packs each image as LLaVA-NeXT does: the base tile's features, then the grid
tiles' features laid out as one feature grid, cropped of the padding
(``unpad_image``, from ``image_sizes``), shrunk by bilinear interpolation
where it holds more than about 1.1 x 9 tiles' worth of patches
(``vision_aspect_ratio`` "anyres_max_9"), with the learned ``image_newline``
after each of its rows; an image that was not cut is its tile's features and
one ``image_newline``. ``LlavaOnevisionModel.forward`` scatters the images'
features (``inputs_embeds_masked_scatter_0``, argument 1; videos at ``_1``),
so ``vision.image_features`` is read at the scatter, neither
``projector.output`` nor a reshape of it (`OnevisionVision`).

Videos: after the image's scatter the same tower runs on every frame
(``model.video``, frames as its batch), the projector projects each frame's
patches, ``apply_pooling`` pools them 2 x 2 (bilinear), and one
``image_newline`` follows the video's last frame; the forward scatters them
at ``_1`` (``vision.video_features``; ``vision.video_token_grid`` places each
frame's tokens, the newline on no frame).
"""

from __future__ import annotations

import math

import torch
from transformers.models.siglip.modeling_siglip import (
    SiglipAttention,
    SiglipEncoderLayer,
    SiglipMLP,
    SiglipVisionModel,
)

from rewrites.image_scatter import Scatter

from ..core.layouts import ImageFeatures
from ..core.values import Field, value
from ..image.frames import uniform_frames
from ..image.grids import Grid, ImageInputs
from ..towers.anyres import LlavaNextGrids, LlavaNextVision, TileAttention, TilePatches, TilePatchLayer
from ..towers.encoder_names import SIGLIP_WRAPPER_RENAME
from ..towers.feature_layers import with_feature_layer_gradients
from ..towers.fixed_tower import TileRows
from ..vision.media import scattered_features
from ..vision.tower import VisionMlp, never_an_image, no_images
from . import IMAGE_AND_VIDEO, Family


class OnevisionVision(LlavaNextVision):
    """LLaVA-OneVision's SigLIP tower, on tiles: every tower value has one row per tile, not per image.

    The tile axis runs over every image of the invoke: an image alone in its
    prompt holds ``1 + rows * columns`` tiles, its base tile first, where
    ``rows x columns`` is the grid of the best of ``image_grid_pinpoints``
    for its size (the processor's ``image_sizes``), in tiles of ``image_size``
    pixels; an image among several in one prompt holds one. Each row holds the
    tile's patches in raster order, no CLS. Sizes are the SigLIP tower's;
    ``image_size`` is the side of a tile.
    """

    tower_output = value(
        "tower_output", TilePatches, description="the last block's stream after post_layernorm, one row per tile",
        key="output", select=Field("last_hidden_state"), unavailable=no_images,
        doc="The last block's stream after the tower's ``post_layernorm``, ``[tiles, patches, "
        "vision_hidden_size]``. The projector does not read it: it reads the last block's output before the "
        "norm (``projector.input``, ``vision.layers[-1].layer_output``).",
    )

    image_features = scattered_features(
        "image", ImageFeatures, never_an_image,
        doc="What LLaVA-OneVision scatters into the token embeddings at the image tokens, ``[image_tokens, "
        "hidden_size]``, image after image. An image alone in its prompt is, as on LLaVA-NeXT, its base tile's "
        "projected patches (raster order), then its grid tiles' projected patches laid out as one feature grid, "
        "cropped of the rows or columns the processor's padding added (from ``image_sizes``), shrunk by "
        "bilinear interpolation where it holds more than about 1.1 x 9 tiles' worth of patches "
        "(``vision_aspect_ratio``), in raster order with one ``image_newline`` row (the host's learned "
        "``model.image_newline``) after each of its rows. An image among several in one prompt is its one "
        "tile's projected patches and one ``image_newline`` row. So it is neither ``projector.output`` nor a "
        "reshape of it; assign a tensor of the same shape, or edit it in place.",
    )


RENAME = dict(SIGLIP_WRAPPER_RENAME)

#: The projector reads hidden_states[vision_feature_layer]: tower_output (after post_layernorm) has no gradient.
ENVOYS = with_feature_layer_gradients({
    SiglipVisionModel: OnevisionVision,
    SiglipEncoderLayer: TilePatchLayer,
    SiglipAttention: TileAttention,
    SiglipMLP: VisionMlp,
})


def cut(inputs: ImageInputs) -> list[bool]:
    """Whether each image of the batch was cut into tiles: those alone in their prompt (``batch_num_images``)."""
    counts = inputs.get("batch_num_images")
    if counts is None:
        return [True] * inputs["image_sizes"].shape[0]
    return [int(count) == 1 for count in counts.tolist() for _ in range(int(count))]


class OnevisionGrids(LlavaNextGrids):
    """LLaVA-OneVision's grids: LLaVA-NeXT's (`LlavaNextGrids`) on an image cut into tiles; the image's one tile on an
    image among several in its prompt.

    A cut image's token grid is its feature grid as the host packs it: the
    unpadded grid, or, where the host shrinks it (more than about 1.1 x 9
    tiles' worth of patches, ``vision_aspect_ratio``), the shrunk one, each of
    whose tokens blends several patches (bilinear interpolation), so its
    cells are not the patch grid's. An image that was not cut has its tile's
    patch grid on the stream and its tile's tokens on the image tokens (the
    ``image_newline`` after them is in its span, off the grid).
    """

    def video_token_grid(self, inputs: ImageInputs, video: int, mask: torch.Tensor) -> Grid:
        """Video ``video``'s grids over the video tokens, ``[frames, side, side]``: each frame pooled to a square of
        tokens, raster order, frame after frame, then one ``image_newline`` after the last (in the video's span, off
        the grid)."""
        return uniform_frames(inputs, video, mask, after=1)

    def _tiles(self, inputs: ImageInputs, image: int) -> list[int]:
        tiles = super()._tiles(inputs, image)
        return [count if whole else 1 for count, whole in zip(tiles, cut(inputs))]

    def _feature_shape(self, inputs: ImageInputs, image: int) -> tuple[int, int]:
        rows, columns = super()._feature_shape(inputs, image)
        side = TileRows.of(inputs.config).side
        most = int(inputs.config.vision_aspect_ratio.removeprefix("anyres_max_"))  # "anyres_max_9": 9
        ratio = math.sqrt(rows * columns / (most * side**2))
        if ratio > 1.1:  # the host interpolates the grid down to this size
            rows, columns = int(rows // ratio), int(columns // ratio)
        return rows, columns

    def _token_cells(self, inputs: ImageInputs, image: int, start: int):
        if cut(inputs)[image]:
            return super()._token_cells(inputs, image, start)
        tile = TileRows.of(inputs.config)
        return tile.token_cells(start), start + tile.tokens + 1  # the tile's tokens, then one newline

    def patch_grid(self, inputs: ImageInputs, image: int) -> Grid:
        tiles, tile = self._tiles(inputs, image), TileRows.of(inputs.config)
        if cut(inputs)[image]:
            return super().patch_grid(inputs, image)
        start = sum(tiles[:image]) * tile.rows
        return Grid(tile.patches(start), slice(start, start + tile.rows), sum(tiles) * tile.rows)


SCATTER = Scatter(purpose="image features (_0), the tiles unpadded with image_newline rows added, and video "
                          "features (_1), scattered into the embeddings")

FAMILY = Family("llava_onevision", RENAME, ENVOYS, "model.language_model.layers", scatter=SCATTER,
                grid_layout=OnevisionGrids(), media=IMAGE_AND_VIDEO)
