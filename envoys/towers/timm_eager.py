"""A timm tower loaded eager runs timm's eager attention: what ``attn_implementation="eager"`` asks of it.

transformers' ``TimmWrapperModel`` does not pass ``attn_implementation`` on to
the timm model it wraps (it warns that timm keeps torch's fused kernel): timm
chooses per module instance, by its ``fused_attn``. `run_eager_where_asked`
sets that flag on the instances of a model whose timm tower's config asks for
eager, so the tower forms the attention pattern the envoys read
(`envoys.towers.timm_vit`). Per instance only: no class attribute and no timm
global is touched, so another model, built without this library, runs as
before. Imports no timm, nor transformers' wrapper of it: a model that holds a timm tower has imported both.
"""

from __future__ import annotations

import sys

import torch

#: transformers' module of the timm tower wrapper: imported by any model that holds one (importing it here would
#: import timm with every `import envoys`).
TIMM_WRAPPER = "transformers.models.timm_wrapper.modeling_timm_wrapper"


def run_eager_where_asked(model: torch.nn.Module) -> None:
    """Make every timm attention of ``model``'s timm towers run its eager branch where the tower's config asks for
    eager (``attn_implementation="eager"``): ``fused_attn`` set False on each module instance that has it, nothing
    else."""
    wrapper = sys.modules.get(TIMM_WRAPPER)
    if wrapper is None:  # no model of this process holds a timm tower
        return
    TimmWrapperPreTrainedModel = wrapper.TimmWrapperPreTrainedModel
    for tower in model.modules():
        if isinstance(tower, TimmWrapperPreTrainedModel) and tower.config._attn_implementation == "eager":
            for module in tower.modules():
                if isinstance(getattr(module, "fused_attn", None), bool):
                    module.fused_attn = False
