"""Granite-Docling (model_type granite_docling): Idefics 3's tiled ViT with the connector inside it, DeepStack, a
Granite text model.

``GraniteDoclingModel.forward`` scatters the image features into the token
embeddings itself (``inputs_embeds_masked_scatter_0``, argument 1). The tower
(``model.vision_model``, `ConnectedTiledVision`: blocks ``encoder.layers``,
run by its ``encode`` helper; ``post_layernorm`` its ``norm``) takes the tiles
Idefics 3's does, except that an image the processor does not split is one
tile with no thumbnail (``<row_1_col_1>`` before its tokens). The connector is
the tower's child ``connector`` (``model.projector``): it receives
``tower_output`` and returns ``(image features [tiles * tokens, hidden_size],
DeepStack features)``, so ``projector.output[0]`` is the features, flattened
over the tiles; it shuffles 4x4 blocks of patches on its coarse path
(``connector.coarse``) and 2x2 on its fine path (``connector.fine``, taken
when the processor is called with ``fine_route=True``: four times as many
image tokens). Each path's ``deepstack_mergers[k]`` merge tower block
``vision_config.deepstack_visual_indexes[k]``, and the text model adds merger
k's output at the image positions after text block k, as Qwen3-VL's does
(``layers[k].deepstack_output``, `DeepstackLayer`). The density router
(``model.density_router``, where the config has one) scores each prompt's
tiles off the tower's ``last_hidden_state`` beside the image path, at its
native path; it changes nothing the text model receives.

The Granite text model scales what the standard values are over, so two of
the spec's equalities hold with its multipliers (the text config's), exactly:

- ``GraniteDoclingTextModel.forward`` multiplies the embeddings by
  ``embedding_multiplier`` after the scatter, so
  ``layers[0].input[mask] == image_features * embedding_multiplier``
  (``image_features`` is what the host scatters, as on every family;
  ``token_embeddings`` is before the multiplier too);
- a block adds each sublayer's output times ``residual_multiplier``, so
  ``layer_output == (layer_input + attention_output * m) + mlp_output * m``
  with ``attention_output`` and ``mlp_output`` the sublayers' own outputs
  (the product is no call, so no site serves it).

The root divides the head's output by ``logits_scaling``
(``model.logits`` is after it, and so is ``project_on_vocab``).

The grids (``vision.patch_grid`` / ``token_grid``) place each tile by the
``<row_r_col_c>`` token before its image tokens, an image not split being
its one tile, and fold ``scale_factor`` (halved on the fine route) patches a
side into a token (`ConnectedTiledGrids`).
"""

from __future__ import annotations

from transformers.models.granite_docling.modeling_granite_docling import (
    GraniteDoclingEncoderLayer,
    GraniteDoclingTextDecoderLayer,
    GraniteDoclingVisionAttention,
    GraniteDoclingVisionMLP,
    GraniteDoclingVisionModel,
)

from ..blocks.deepstack import DeepstackLayer
from ..towers.idefics import TEXT_LAYERS, TILED_RENAME, ConnectedTiledGrids, ConnectedTiledVision
from ..vision.tower import VisionAttention, VisionLayer, VisionMlp
from . import Family

#: Idefics 3's names, the connector inside the tower.
RENAME = {key: name for key, name in TILED_RENAME.items() if name != "projector"}
RENAME["model.vision_model.connector"] = "projector"


class GraniteDoclingLayer(DeepstackLayer):
    """A Granite-Docling text block: each sublayer's output joins the stream times the text config's
    ``residual_multiplier`` m, ``layer_output == (layer_input + attention_output * m) + mlp_output * m``, and
    ``deepstack_output`` is added after the first blocks, as on Qwen3-VL."""


ENVOYS = {
    GraniteDoclingTextDecoderLayer: GraniteDoclingLayer,
    GraniteDoclingVisionModel: ConnectedTiledVision,
    GraniteDoclingEncoderLayer: VisionLayer,
    GraniteDoclingVisionAttention: VisionAttention,
    GraniteDoclingVisionMLP: VisionMlp,
}

FAMILY = Family("granite_docling", RENAME, ENVOYS, TEXT_LAYERS, grid_layout=ConnectedTiledGrids())
