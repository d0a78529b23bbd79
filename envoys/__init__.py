"""The user layer: standard names for a vision-language model's values, over the rewritten sites.

``from envoys import StandardizedTransformer, Unavailable``. The package, by
what each part is; each part imports only from the parts listed after it:

- ``model``: `StandardizedTransformer`, which loads a checkpoint under the
  standard names, and ``tree``, what ``print(model)`` shows; ``testing``: tiny
  random checkpoints built offline (the builders are in ``tiny``); ``demo``:
  ``python -m envoys.demo``; ``census``: ``python -m envoys.families``;
  ``rules``: the rules a loaded model runs;
- ``families``: one module per supported model_type;
- ``towers``: the tower layouts families share;
- ``blocks``: kinds of block (sandwich norms, hybrid mixers, DeltaNet,
  mixture-of-experts, indexers, DeepStack);
- ``vision``: the vision side's standard envoys (tower, blocks, scatter);
- ``text``: the text surface, as nnterp names it;
- ``image``: the image pathway (values on the image's grid, recipes, pictures);
- ``core``: the value machinery (standard values, layouts, pinning). Its one
  exception is the message of a name no envoy has, which imports the family
  modules when shown, to say which families have that value.
"""

from .core.not_saved import NotSavedError
from .core.values import Unavailable
from .model import StandardizedTransformer

__all__ = ["NotSavedError", "StandardizedTransformer", "Unavailable"]
