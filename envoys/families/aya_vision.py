"""Aya Vision (model_type aya_vision): a SigLIP tower on tiles, a pixel-shuffle projector, a Cohere 2 text model.

``AyaVisionModel.get_image_features`` runs the tower (``model.vision_tower``)
on every tile of the call and hands the projector
(``model.multi_modal_projector``) the tower's ``hidden_states[-1]``
(``vision_feature_layer`` -1, strategy "full": the last block's output,
before ``post_layernorm``, every patch), so ``projector.input`` is
``vision.layers[-1].layer_output`` and ``tower_output``, after the norm, feeds
nothing (its gradient is unavailable, `envoys.towers.feature_layers`). The projector
pixel-shuffles each tile in its own forward, layer-norms each folded block of
``downsample_factor ** 2`` patches, and maps it to the text width with a
SwiGLU: ``[tiles, side, side, hidden_size]``. ``AyaVisionModel.forward``
scatters that, flattened to ``[tiles, tokens, hidden_size]``, at the image
tokens (``inputs_embeds_masked_scatter_0``, argument 1), so
``image_features`` is ``projector.output`` flattened. The tiles, the shuffle
and the Cohere 2 text blocks are `envoys.towers.cohere`'s; the processor
(`AyaVisionProcessor`, GotOcr2's image processor) writes each image as
``<|START_OF_IMG|>``, ``TILE_k`` and its tile's ``<|IMG_PATCH|>`` tokens for
each grid tile, ``TILE_GLOBAL`` and the thumbnail's, ``<|END_OF_IMG|>``
(`envoys.towers.cohere.AyaGrids`).
"""

from __future__ import annotations

from ..blocks.parallel import COHERE2_ENVOYS
from ..towers.cohere import SCATTER, TOWER_ENVOYS, AyaGrids
from ..towers.encoder_names import SIGLIP_WRAPPER_RENAME
from ..towers.feature_layers import with_feature_layer_gradients
from . import Family

RENAME = dict(SIGLIP_WRAPPER_RENAME)

#: The projector reads hidden_states[vision_feature_layer]: tower_output (after post_layernorm) has no gradient.
ENVOYS = {**with_feature_layer_gradients(TOWER_ENVOYS), **COHERE2_ENVOYS}

FAMILY = Family("aya_vision", RENAME, ENVOYS, "model.language_model.layers", scatter=SCATTER, grid_layout=AyaGrids())
