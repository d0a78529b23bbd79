"""Cohere 2 Vision (model_type cohere2_vision, Command A Vision): a SigLIP tower on tiles, a pixel-shuffle projector,
a Cohere 2 text model.

Aya Vision's shape (`envoys.towers.cohere`), with two differences. The projector
reads the tower's ``last_hidden_state``, after ``post_layernorm``, so
``projector.input`` is ``tower_output``; it pixel-shuffles each tile in its
own forward and maps each folded block to the text width with a SwiGLU, with
no norm between, ``[tiles, side, side, hidden_size]``.
``Cohere2VisionModel.forward`` scatters that, flattened to ``[tiles, tokens,
hidden_size]``, at the image tokens (``inputs_embeds_masked_scatter_0``,
argument 1), so ``image_features`` is ``projector.output`` flattened. And its
processor (`Cohere2VisionProcessor`, with `Cohere2VisionImageProcessor`'s own
canvas rule) writes each image as ``<|START_OF_IMG|>``, each tile's
``<|IMG_PATCH|>`` tokens followed by ``<|IMG_LINE_BREAK|>``, the thumbnail
last, then ``<|END_OF_IMG|>`` (`envoys.towers.cohere.Cohere2VisionGrids`).
"""

from __future__ import annotations

from ..blocks.parallel import COHERE2_ENVOYS
from ..towers.cohere import SCATTER, TOWER_ENVOYS, Cohere2VisionGrids
from ..towers.encoder_names import SIGLIP_WRAPPER_RENAME
from . import Family

RENAME = dict(SIGLIP_WRAPPER_RENAME)

ENVOYS = {**TOWER_ENVOYS, **COHERE2_ENVOYS}

FAMILY = Family("cohere2_vision", RENAME, ENVOYS, "model.language_model.layers", scatter=SCATTER,
                grid_layout=Cohere2VisionGrids())
