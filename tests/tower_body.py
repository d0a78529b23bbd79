"""Where a SigLIP / CLIP tower keeps its embeddings, encoder and norms, for tests that reach the native modules.

``SiglipVisionModel`` and ``CLIPVisionModel`` hold them themselves on recent
transformers, and one level down, in the vision transformer they wrap
(``vision_model``), on older releases; the test asks the loaded tower which.
"""

from __future__ import annotations

from typing import Any


def tower_body(tower: Any) -> Any:
    """The module (or, given an envoy, the envoy) that holds ``tower``'s ``embeddings``, ``encoder`` and norms:
    ``tower`` itself, or its ``vision_model`` where the installed transformers nests one."""
    module = getattr(tower, "_module", tower)
    return tower.vision_model if hasattr(module, "vision_model") else tower
