"""LLaVA (model_type llava): a SigLIP, CLIP or Pixtral tower, a two-layer projector, any text model.

``LlavaModel.forward`` scatters the projected features into the token
embeddings (``inputs_embeds_masked_scatter_0``, argument 1). What the
projector reads depends on the checkpoint: llava-interleave
(``vision_feature_layer=-1``, strategy "full") reads the last block's output
before the tower's final norm, so ``projector.input`` is
``vision.layers[-1].layer_output``, not ``tower_output``; Llava 1.5 (``-2``,
"default") reads block -2 without its CLS token (the last block still runs,
unused). SigLIP has no CLS and a final norm over the patches
(``post_layernorm``, the tower's ``norm``); CLIP puts the CLS token first and
its ``post_layernorm`` normalises only the pooled CLS, so it is no ``norm``.

Llava-Pixtral (a Pixtral vision config, like mistral-community/pixtral-12b,
with the stock ``PixtralProcessor``) has the packed tower of `envoys.towers.pixtral`:
every image's patches in one row, ``[1, all patches, vision_hidden_size]``,
its native names (``transformer.layers``, ``attention``, ...) renamed only on
such a checkpoint. The host passes the processor's ``image_sizes`` to the
tower; the projector reads the last block's stream (``vision_feature_layer``
-1, strategy "full"), leading 1 included, with no merge, so each patch is one
image token, and the host splits the features per image by ``image_sizes``.
"""

from __future__ import annotations

from typing import Any

from transformers.models.clip.modeling_clip import CLIPMLP, CLIPAttention, CLIPEncoderLayer, CLIPVisionModel
from transformers.models.siglip.modeling_siglip import (
    SiglipAttention,
    SiglipEncoderLayer,
    SiglipMLP,
    SiglipVisionModel,
)

from ..image.grids import Grid, ImageInputs, check_image
from ..towers.encoder_names import ENCODER_BLOCK_RENAME, ENCODER_TOWER_RENAME, WRAPPER_RENAME, tower_rooted
from ..towers.feature_layers import with_feature_layer_gradients
from ..towers.fixed_tower import TileRows
from ..towers.pixtral import PIXTRAL_ENVOYS, PIXTRAL_RENAME, PixtralGrids
from ..vision.tower import Vision, VisionAttention, VisionLayer, VisionMlp
from . import Family

RENAME = {**WRAPPER_RENAME, **tower_rooted(ENCODER_TOWER_RENAME), **ENCODER_BLOCK_RENAME}

#: A SigLIP tower's envoys, and a CLIP tower's.
SIGLIP_ENVOYS = {SiglipVisionModel: Vision, SiglipEncoderLayer: VisionLayer, SiglipAttention: VisionAttention, SiglipMLP: VisionMlp}
CLIP_ENVOYS = {CLIPVisionModel: Vision, CLIPEncoderLayer: VisionLayer, CLIPAttention: VisionAttention, CLIPMLP: VisionMlp}

#: The projector reads hidden_states[vision_feature_layer]: the tower values past it have no gradient.
ENVOYS = with_feature_layer_gradients({**SIGLIP_ENVOYS, **CLIP_ENVOYS, **PIXTRAL_ENVOYS})


def tower_names(config: Any) -> dict[str, str]:
    """The names particular to the checkpoint's tower: SigLIP's post_layernorm normalises the patches, so it is the
    tower's ``norm`` (CLIP's is not); a Pixtral tower's native names are its own."""
    vision_type = config.vision_config.model_type
    if vision_type == "siglip_vision_model":
        return tower_rooted({"post_layernorm": "norm"})
    if vision_type == "pixtral":
        return dict(PIXTRAL_RENAME)
    return {}


#: Llava-Pixtral's projector merges nothing: one image token per patch.
PIXTRAL_GRIDS = PixtralGrids()


class LlavaGrids:
    """LLaVA's grids: each image is one tile of a SigLIP or CLIP tower (`envoys.towers.fixed_tower.TileRows`), image after
    image, on the tower's stream ``[images, patches, ...]`` and on the image tokens alike. A Pixtral tower's are
    `envoys.towers.pixtral.PixtralGrids`' (packed, no merge: one image token per patch)."""

    stream_dims = 2

    @staticmethod
    def _images(inputs: ImageInputs) -> int:
        """How many images the batch carries: its ``pixel_values``' first axis."""
        return inputs["pixel_values"].shape[0]

    def _tiles(self, inputs: ImageInputs, image: int) -> TileRows:
        check_image(image, self._images(inputs))
        return TileRows.of(inputs.config)

    def patch_grid(self, inputs: ImageInputs, image: int) -> Grid:
        if inputs.config.vision_config.model_type == "pixtral":
            return PIXTRAL_GRIDS.patch_grid(inputs, image)
        tile = self._tiles(inputs, image)
        start = image * tile.rows
        stream = self._images(inputs) * tile.rows
        return Grid(tile.patches(start), slice(start, start + tile.rows), stream)

    def token_grid(self, inputs: ImageInputs, image: int) -> Grid:
        if inputs.config.vision_config.model_type == "pixtral":
            return PIXTRAL_GRIDS.token_grid(inputs, image)
        tile = self._tiles(inputs, image)
        start = image * tile.tokens
        return Grid(tile.token_cells(start), slice(start, start + tile.tokens))


FAMILY = Family("llava", RENAME, ENVOYS, "model.language_model.layers", extra_rename=tower_names,
                grid_layout=LlavaGrids())
