"""LLaVA-NeXT (model_type llava_next): a CLIP tower on tiles, a two-layer projector, any text model.

The image processor resizes and pads each image to the best of the config's
``image_grid_pinpoints`` and cuts it into tiles of the tower's ``image_size``,
after a base tile (the whole image resized to one tile); the processor pads
the tile axis of ``pixel_values`` to the largest count, and the host drops
the padding tiles before the tower. So the tower runs on every real tile of
the call, one row per tile: ``[tiles, 1 + patches, vision_hidden_size]``, each
image's base tile then its grid tiles in raster order, images one after
another, the CLS token first (`Tiles`).

The projector reads block -2 without the CLS token (``vision_feature_layer``
-2, strategy "default", as on Llava 1.5; the last block still runs, unused),
so ``projector.input`` is ``vision.layers[-2].layer_output[:, 1:]``. After the
projector, ``LlavaNextModel.get_image_features`` rearranges each image's grid
tiles into one feature grid, crops the rows or columns the padding added
(``unpad_image``, from ``image_sizes``), appends the learned ``image_newline``
after each row of it and puts the base tile's features first. So the features
``LlavaNextModel.forward`` scatters (``inputs_embeds_masked_scatter_0``,
argument 1) are neither ``projector.output`` nor a reshape of it:
``vision.image_features`` is read at the scatter (`LlavaNextVision`).
"""

from __future__ import annotations

from transformers.models.clip.modeling_clip import CLIPAttention, CLIPEncoderLayer, CLIPMLP, CLIPVisionModel
from transformers.models.llava_next.modeling_llava_next import LlavaNextModel

from ..layouts import ImageFeatures, Layout
from ..text import interior_values, stream_values, value
from ..values import Field
from ..vision import (
    ImageScatter,
    Vision,
    VisionAttention,
    VisionLayer,
    VisionMlp,
    image_scatter,
    no_image_features,
    no_images,
    no_patch_embed,
    scattered_argument,
)
from ..feature_layers import with_feature_layer_gradients
from . import Family
from .llava import RENAME as LLAVA_RENAME


class Tiles(Layout):
    """[tiles, 1+patches, vision_hidden_size]: the tower's stream, one row per tile (each image's base tile, then its grid tiles in raster order; images one after another), the CLS token first."""


class TilePatches(Layout):
    """[tiles, patches, vision_hidden_size]: the patch embedding's output, one row per tile, patches in raster order (no CLS)."""


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
        "patch_embeddings", TilePatches, "the patch embedding's output, one row per tile",
        lambda v: f"{v.patch_embed.path}.output", None, no_patch_embed,
        view=lambda grid: grid.flatten(2).transpose(1, 2),
        inverse=lambda written, current: written.transpose(1, 2).reshape(current.shape),
        doc="The patch embedding's output, ``[tiles, patches, vision_hidden_size]``, one row per tile, patches in "
        "raster order, before the position embedding, the CLS token and ``pre_layrnorm``.",
    )

    tower_output = value(
        "tower_output", Tiles, "the last block's stream, one row per tile (CLIP has no final norm over the patches)",
        "output", Field("last_hidden_state"), no_images,
        doc="The last block's stream, ``[tiles, 1 + patches, vision_hidden_size]``: CLIP's ``post_layernorm`` "
        "normalises only the pooled CLS, so this is the last block's output. The projector does not read it: it "
        "reads block -2 (``projector.input``).",
    )

    image_features = value(
        "image_features", ImageFeatures, "what the wrapper scatters into the embeddings",
        image_scatter, scattered_argument, no_image_features,
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


class TileAttention(VisionAttention):
    """A CLIP block's attention on tiles: the interior has one row per tile, and a tile's positions attend to each other only."""

    (
        attention_queries,
        attention_keys,
        attention_values,
        attention_scores,
        attention_probabilities,
        attention_head_outputs,
    ) = interior_values("tile", no_images)


#: LLaVA's names: the host's children and the CLIP tower's are named alike.
RENAME = dict(LLAVA_RENAME)

ENVOYS = {
    LlavaNextModel: ImageScatter,
    CLIPVisionModel: LlavaNextVision,
    CLIPEncoderLayer: TileLayer,
    CLIPAttention: TileAttention,
    CLIPMLP: VisionMlp,
}
#: The projector reads hidden_states[vision_feature_layer]: the tower values past it have no gradient.
ENVOYS = with_feature_layer_gradients(ENVOYS, host=LlavaNextModel)


FAMILY = Family("llava_next", RENAME, ENVOYS, "model.language_model.layers")
