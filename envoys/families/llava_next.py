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

from transformers.models.clip.modeling_clip import CLIPMLP, CLIPAttention, CLIPEncoderLayer, CLIPVisionModel

from rewrites.image_scatter import Scatter

from ..towers.anyres import LlavaNextGrids, LlavaNextVision, TileAttention, TileLayer
from ..towers.feature_layers import with_feature_layer_gradients
from ..vision.tower import VisionMlp
from . import Family
from .llava import RENAME as LLAVA_RENAME

#: LLaVA's names: the host's children and the CLIP tower's are named alike.
RENAME = dict(LLAVA_RENAME)

ENVOYS = {
    CLIPVisionModel: LlavaNextVision,
    CLIPEncoderLayer: TileLayer,
    CLIPAttention: TileAttention,
    CLIPMLP: VisionMlp,
}
#: The projector reads hidden_states[vision_feature_layer]: the tower values past it have no gradient.
ENVOYS = with_feature_layer_gradients(ENVOYS)


SCATTER = Scatter(purpose="image features scattered into the embeddings, after the host unpads the tiles and adds image_newline rows")

FAMILY = Family("llava_next", RENAME, ENVOYS, "model.language_model.layers", scatter=SCATTER, grid_layout=LlavaNextGrids())
