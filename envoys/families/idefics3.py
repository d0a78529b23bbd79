"""Idefics 3 (model_type idefics3): a tiled SigLIP-like tower, a pixel-shuffle connector, a Llama text model.

``Idefics3Model.forward`` hands the projected features to a helper,
``self.inputs_merger(input_ids=..., inputs_embeds=..., image_hidden_states=...)``
(``self_inputs_merger_0``), which scatters them into the token embeddings;
the helper's keyword argument ``image_hidden_states`` is
``vision.image_features`` (the scatter `INPUTS_MERGER`). The tower, its tiles
and the connector are `envoys.towers.idefics` (`TiledVision`).
"""

from __future__ import annotations

from transformers.models.idefics3.modeling_idefics3 import (
    Idefics3EncoderLayer,
    Idefics3VisionAttention,
    Idefics3VisionMLP,
    Idefics3VisionTransformer,
)

from rewrites.image_scatter import INPUTS_MERGER

from ..towers.idefics import TEXT_LAYERS, TILED_RENAME, TiledGrids, TiledVision
from ..vision.tower import VisionAttention, VisionLayer, VisionMlp
from . import Family

RENAME = dict(TILED_RENAME)

ENVOYS = {
    Idefics3VisionTransformer: TiledVision,
    Idefics3EncoderLayer: VisionLayer,
    Idefics3VisionAttention: VisionAttention,
    Idefics3VisionMLP: VisionMlp,
}

#: The features are the helper's keyword ``image_hidden_states``, ``[image_tokens, hidden_size]``, every image's tiles
#: concatenated: what the helper scatters at the image tokens.
FAMILY = Family("idefics3", RENAME, ENVOYS, TEXT_LAYERS, scatter=INPUTS_MERGER, grid_layout=TiledGrids())
