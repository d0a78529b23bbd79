"""The user layer: standard names for a vision-language model's values, over the rewritten sites.

``from envoys import StandardizedTransformer, Unavailable``. ``envoys.tiny``
builds tiny random checkpoints (model and processor) locally, for the tests
and the demo; ``python -m envoys.demo`` runs the walkthrough on one.
"""

from .model import StandardizedTransformer
from .not_saved import NotSavedError
from .values import Unavailable

__all__ = ["NotSavedError", "StandardizedTransformer", "Unavailable"]
