"""GLM-GA (model_type glmga): transformers builds it as GLM-4.6V (``Glm46VForConditionalGeneration``).

Its config differs from GLM-4.6V's in name only, and transformers 5.24 maps
glmga to ``Glm46VModel`` and ``Glm46VForConditionalGeneration``, so its
tower, host and text model are GLM-4.6V's (`envoys.families.glm46v`: GLM-4.1V's
tower and text blocks); what is its own is the image processor
(``GlmgaImageProcessor``, whose ``patch_expand_factor`` widens the resize
factor) and video processor, under GLM-4.6V's ``Glm46VProcessor``.
"""

from __future__ import annotations

from ..towers.qwen import QWEN_GRIDS
from . import Family
from .glm4v import ENVOYS, RENAME

FAMILY = Family("glmga", RENAME, ENVOYS, "model.language_model.layers", grid_layout=QWEN_GRIDS)
