"""InternVL (model_type internvl): an InternViT tower on tiles, the host's pixel shuffle, a Qwen2 text model.

``InternVLModel.get_image_features`` runs the tower (``model.vision_tower``,
`envoys.towers.internvit`: CLS first, layer-scaled blocks at ``encoder.layer``) on
every tile of the call, takes its ``last_hidden_state`` (``vision_feature_layer``
-1; the tower's ``layernorm`` is an identity on a mean-pooling tower, so this is
the last block's output), drops each tile's CLS (strategy "default"), folds
each 2x2 block of the tile's patches into one row (its own ``pixel_shuffle``,
``downsample_ratio`` 0.5: the block's four patches joined on the feature axis)
and hands the projector (``model.multi_modal_projector``: LayerNorm, two
linear layers) ``[tiles, tokens, 4 * vision_hidden_size]``. So unlike Aya
Vision's, this projector reads what the host already shuffled, and
``projector.output`` is ``[tiles, tokens, hidden_size]``.
``InternVLModel.forward`` scatters it at the image tokens
(``inputs_embeds_masked_scatter_0``, argument 1, found), so ``image_features``
is ``projector.output`` flattened: tile after tile. The image processor is
GotOcr2's, which tiles as Aya Vision's does (`envoys.towers.cohere`); the processor
(`InternVLProcessor`) writes each image as ``<img>``, every tile's
``<IMG_CONTEXT>`` tokens in one run, ``</img>``. The text model is Qwen2,
found from its blocks.
"""

from __future__ import annotations

from transformers.models.internvl.modeling_internvl import (
    InternVLVisionAttention,
    InternVLVisionLayer,
    InternVLVisionMLP,
    InternVLVisionModel,
)

from ..towers.encoder_names import WRAPPER_RENAME
from ..towers.internvit import INTERNVIT_RENAME, InternVitGrids, internvit_envoys, tower_norm
from . import Family

RENAME = {**WRAPPER_RENAME, **INTERNVIT_RENAME}

ENVOYS = internvit_envoys(InternVLVisionModel, InternVLVisionLayer, InternVLVisionAttention, InternVLVisionMLP)

FAMILY = Family("internvl", RENAME, ENVOYS, "model.language_model.layers", extra_rename=tower_norm,
                grid_layout=InternVitGrids())
