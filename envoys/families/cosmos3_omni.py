"""Cosmos3-Omni (model_type cosmos3_omni): NVIDIA's Cosmos 3 reasoner, Qwen3-VL's architecture under its own host.

``Cosmos3OmniModel`` is Qwen3-VL's host (transformers' modular copy) and
builds its children from Qwen3-VL's configs, so the tower is a
``Qwen3VLVisionModel`` at ``model.visual`` (a `QwenVision`: packed, learned
``pos_embed`` after ``patch_embed``, one attention call per image, its
``merger`` the projector) and the text model a ``Qwen3VLTextModel`` at
``model.language_model``, whose blocks are `DeepstackLayer`'s: the same
classes, names and envoys as `envoys.families.qwen3_vl`, which this family
reuses. ``Cosmos3OmniModel.forward`` scatters the merged image features
(``inputs_embeds_masked_scatter_0``, argument 1, found: the rule is
``cosmos3_omni.image-scatter``); DeepStack adds tap k's merged features after
text block k (``layers[k].deepstack_output``), as on Qwen3-VL.

Images only: the video scatter (``_1``) is left as it is, and the unified
checkpoint's generator (image and video diffusion), sound and action towers
are dropped by transformers when it loads the reasoner, so nothing of them is
in the model. The processor is Qwen3-VL's (``Qwen3VLProcessor``).
"""

from __future__ import annotations

from ..towers.qwen import QWEN_GRIDS
from . import Family
from .qwen3_vl import ENVOYS, RENAME

FAMILY = Family("cosmos3_omni", RENAME, ENVOYS, "model.language_model.layers", grid_layout=QWEN_GRIDS)
