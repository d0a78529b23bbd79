"""Idefics 3 (model_type idefics3): a tiled SigLIP-like tower, a pixel-shuffle connector, a Llama text model.

``Idefics3Model.forward`` hands the projected features to a helper,
``self.inputs_merger(input_ids=..., inputs_embeds=..., image_hidden_states=...)``
(``self_inputs_merger_0``), which scatters them into the token embeddings;
the helper's keyword argument ``image_hidden_states`` is
``vision.image_features`` (`InputsMerger`). The tower, its tiles and the
connector are `envoys.idefics` (`TiledVision`).
"""

from __future__ import annotations

from transformers.models.idefics3.modeling_idefics3 import (
    Idefics3EncoderLayer,
    Idefics3Model,
    Idefics3VisionAttention,
    Idefics3VisionMLP,
    Idefics3VisionTransformer,
)

from ..idefics import TEXT_LAYERS, TILED_RENAME, TiledGrids, TiledVision
from ..values import Argument
from ..vision import ImageScatter, VisionAttention, VisionLayer, VisionMlp
from . import Family


class InputsMerger(ImageScatter):
    """Idefics3Model: its forward writes the image features in through ``self.inputs_merger(...)``.

    The site is that call (``self_inputs_merger_0``), and the features are its
    keyword argument ``image_hidden_states``, ``[image_tokens, hidden_size]``,
    every image's tiles concatenated: what the helper scatters at the image
    tokens.
    """

    scatter_operation = "self_inputs_merger_0"
    scatter_argument = Argument(2, "image_hidden_states")


RENAME = dict(TILED_RENAME)

ENVOYS = {
    Idefics3Model: InputsMerger,
    Idefics3VisionTransformer: TiledVision,
    Idefics3EncoderLayer: VisionLayer,
    Idefics3VisionAttention: VisionAttention,
    Idefics3VisionMLP: VisionMlp,
}

FAMILY = Family("idefics3", RENAME, ENVOYS, TEXT_LAYERS, grid_layout=TiledGrids())
