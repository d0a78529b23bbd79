"""The rules a loaded model runs, found from its module classes and its family.

`rules_for_model` is what `StandardizedTransformer` installs: the rules for
the classes the model holds (`rewrites.rules_for_classes`: the listed
forwards it runs, the forwards whose shape a concern recognises, the
attention kernel of every other class on the shared interface, the routers'
logits) and the scatter of its family's host (`rewrites.image_scatter`),
the host being the wrapper's inner model unless the family's `Scatter` says
otherwise (`Family.host_class`).

`rules_to_install` is what the library would give any model transformers
builds, served family or not (transformers' own tests run with it). The
catalogue of every checkpoint's rules is `envoys.catalog`'s.
"""

from __future__ import annotations

import torch
from transformers import MODEL_MAPPING

from instrument import Rule
from instrument.calls import calls, defining_class, innermost
from rewrites import rules_for_classes
from rewrites.image_scatter import scatter_rule

from .families import Family, family_for


def rules_for_model(model: torch.nn.Module, family: Family) -> tuple[Rule, ...]:
    """Every rule ``model`` runs: its host's scatter first, then the rules for the classes it holds."""
    host = family.host_class(model)
    scatter = (scatter_rule(host, family.scatter),) if host is not None else ()
    return scatter + rules_for_classes(type(module) for module in model.modules())


def _scatters(cls: type, callee: str) -> bool:
    """Whether the forward instances of ``cls`` run calls ``callee`` (the scatter), as `scatter_rule` reads it."""
    forward = innermost((defining_class(cls) or cls).__dict__.get("forward"))
    return forward is not None and calls(forward, callee) > 0


def rules_to_install(model: torch.nn.Module) -> tuple[Rule, ...]:
    """The rules to install on any model transformers builds, served family or not, as the library would give them:
    a served family's model gets `rules_for_model` (its host's scatter, the rules of the classes it holds); the
    family's base model built alone (``LlavaModel``: the host when a wrapper holds it) gets the scatter too; where
    the family scatters in the root's forward (Llama 4, Nemotron-H Omni), the model whose own forward scatters gets
    it; any other model (a tower, a text model of a family not served) the rules of the classes it holds.
    `maintain.hf_plugin` installs them on every model transformers' own tests build."""
    classes = rules_for_classes(type(module) for module in model.modules())
    try:
        family = family_for(model.config.model_type)
    except ValueError:  # not a served family: the class rules alone
        return classes
    if family.text_only:
        return rules_for_model(model, family)
    if family.scatter.in_root:  # the root scatters: the model whose own forward does (a part alone has no scatter)
        return rules_for_model(model, family) if _scatters(type(model), family.scatter.callee) else classes
    try:
        base = MODEL_MAPPING[type(model.config)]
    except (KeyError, ValueError):
        base = None
    if family.host_class(model) is None and type(model) is base:  # the base model alone: the host, as a wrapper's part
        return (scatter_rule(family.scatter.host or type(model), family.scatter), *classes)
    return rules_for_model(model, family)
