"""The rules a loaded model runs, found from its module classes and its family; and the catalogue of them all.

`rules_for_model` is what `StandardizedTransformer` installs: the rules for
the classes the model holds (`rewrites.rules_for_classes`: the listed
forwards it runs, the forwards whose shape a concern recognises, the
attention kernel of every other class on the shared interface, the routers'
logits) and the scatter of its family's host (`rewrites.image_scatter`),
the host being the wrapper's inner model unless the family's `Scatter` says
otherwise (`Family.host_class`).

`catalog` is every rule of every tiny checkpoint (`envoys.tiny`), once each,
with the model_types whose checkpoints run it: what ``python -m
instrument.show`` lists, what the snapshots store and what the naming tests
check, found the same way as at load.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

import torch

from instrument import Rule
from rewrites import of_particular_forwards, rules_for_classes
from rewrites.image_scatter import SCATTER_SUFFIX, scatter_rule

from .families import Family, family_for


def rules_for_model(model: torch.nn.Module, family: Family) -> tuple[Rule, ...]:
    """Every rule ``model`` runs: its host's scatter first, then the rules for the classes it holds."""
    host = family.host_class(model)
    scatter = (scatter_rule(host, family.scatter),) if host is not None else ()
    return scatter + rules_for_classes(type(module) for module in model.modules())


@lru_cache(maxsize=1)
def catalog() -> tuple[Rule, ...]:
    """Every rule of every tiny checkpoint the installed transformers can build, once each: the scatters, then the
    rules of particular forwards (listed, or found from their shape), then the attention and router rules, each
    with ``model_types``, the families whose checkpoints run it."""
    from . import tiny  # builds every checkpoint's model: only for the commands and the tests that list rules

    found: dict[str, Rule] = {}
    users: dict[str, dict[str, None]] = {}
    for name in tiny.NAMES:
        try:
            model, _ = tiny.build(name)
        except ImportError as error:  # a processor's optional backend: the catalogue would silently lack its rules
            raise ImportError(
                f"the rule catalogue builds every tiny checkpoint, and {name!r} cannot be built here: {error}; "
                "install the project's test extra (pip install -e '.[test]')"
            ) from error
        family = family_for(model.config.model_type)
        for rule in rules_for_model(model, family):
            for each in (rule, *rule.drill.values()):  # and what it drills into (a scatter helper, never installed)
                found.setdefault(each.name, each)
                users.setdefault(each.name, {})[family.model_type] = None

    def concern(rule: Rule) -> int:
        return 0 if rule.name.endswith(SCATTER_SUFFIX) else 1 if of_particular_forwards(rule) else 2

    ordered = sorted(found.values(), key=concern)
    return tuple(replace(rule, model_types=tuple(users[rule.name])) for rule in ordered)


def rule_named(name: str) -> Rule:
    """The catalogue's rule called ``name``; KeyError listing the names otherwise."""
    for rule in catalog():
        if rule.name == name:
            return rule
    raise KeyError(f"no rule {name!r}; rules: {', '.join(rule.name for rule in catalog())}")


def rules_for(model_type: str) -> tuple[Rule, ...]:
    """The catalogue's rules that ``model_type``'s tiny checkpoints run (empty for a model_type with none)."""
    return tuple(rule for rule in catalog() if model_type in rule.model_types)
