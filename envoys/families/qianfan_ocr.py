"""Qianfan-OCR (model_type qianfan_ocr): InternVL's tower and host, a Qwen3 text model.

InternVL's shape (`envoys.families.internvl`): ``QianfanOCRModel`` is an
``InternVLModel`` whose ``get_image_features`` runs the InternViT tower
(``model.vision_tower``) on the tiles, drops each tile's CLS from its
``last_hidden_state`` (``layernorm`` an identity on its mean-pooling tower),
pixel-shuffles each tile in the host and hands the projector
(``model.multi_modal_projector``) ``[tiles, tokens, 4 * vision_hidden_size]``;
its forward scatters ``projector.output`` at the image tokens
(``inputs_embeds_masked_scatter_0``, argument 1, found). What differs: the
tower's blocks are at ``layers`` (no ``encoder``), and each block passes its
scaled sublayer outputs through stochastic-depth modules (``drop_path1``,
``drop_path2``) before adding them to the stream, so ``attention_output``
and ``mlp_output`` are read at those modules' outputs (`envoys.towers.internvit`);
the text model is Qwen3 (found from its blocks); the processor
(`QianfanOCRProcessor`) expands each ``<image>`` of the prompt into ``<img>``,
the tiles' ``<IMG_CONTEXT>`` tokens, ``</img>``, and takes no video.
"""

from __future__ import annotations

from transformers.models.qianfan_ocr.modeling_qianfan_ocr import (
    QianfanOCRVisionAttention,
    QianfanOCRVisionLayer,
    QianfanOCRVisionMLP,
    QianfanOCRVisionModel,
)

from ..towers.encoder_names import WRAPPER_RENAME
from ..towers.internvit import INTERNVIT_RENAME, InternVitGrids, internvit_envoys, tower_norm
from . import Family

#: InternVL's names; the blocks are already at ``layers``.
RENAME = {**WRAPPER_RENAME, **{key: name for key, name in INTERNVIT_RENAME.items() if key != "encoder.layer"}}

ENVOYS = internvit_envoys(QianfanOCRVisionModel, QianfanOCRVisionLayer, QianfanOCRVisionAttention, QianfanOCRVisionMLP)

FAMILY = Family("qianfan_ocr", RENAME, ENVOYS, "model.language_model.layers", extra_rename=tower_norm,
                grid_layout=InternVitGrids())
