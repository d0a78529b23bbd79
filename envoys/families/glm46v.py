"""GLM-4.6V (model_type glm46v): GLM-4.1V's tower and text model under another host.

``Glm46VModel`` builds its tower and text model from the sub-configs
(``AutoModel``: GLM-4.1V's ``Glm4vVisionModel`` and ``Glm4vTextModel``), so
everything but the host is GLM-4.1V's (`envoys.families.glm4v`);
``Glm46VModel.forward`` scatters the merged image features
(``inputs_embeds_masked_scatter_0``, argument 1; ``_1`` is video).
"""

from __future__ import annotations

from ..towers.qwen import QWEN_GRIDS
from . import Family
from .glm4v import ENVOYS, RENAME

FAMILY = Family("glm46v", RENAME, ENVOYS, "model.language_model.layers", grid_layout=QWEN_GRIDS)
