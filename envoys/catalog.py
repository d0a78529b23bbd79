"""The rule catalogue: every rule of every tiny checkpoint the installed transformers can build.

For the commands and tests that list rules (``python -m instrument.show``
through the entry point ``instrument.rules:catalog``; the snapshot check and
the release tools, `maintain`). It reads each checkpoint's model classes
alone, so it builds each model on the meta device (`envoys.testing.build_empty`):
no weights, quietly (transformers' remarks about the tiny configs are held
back: `envoys.testing.quiet`), with a progress bar on a terminal.
It imports every builder, so the library never imports it.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

from tqdm.auto import tqdm
from transformers import PreTrainedModel

from instrument import Rule
from rewrites import of_particular_forwards
from rewrites.image_scatter import SCATTER_SUFFIX

from . import testing
from .families import family_for
from .rules import rules_for_model


def model_of(name: str) -> PreTrainedModel:
    """The model of the tiny checkpoint ``name``, as the catalogue reads it: on the meta device, no weights
    (`envoys.testing.build_empty`)."""
    try:
        return testing.build_empty(name)
    except ImportError as error:  # a processor's optional backend: the catalogue would silently lack its rules
        raise ImportError(
            f"the rule catalogue builds every tiny checkpoint, and {name!r} cannot be built here: {error}; "
            "install the project's test extra (pip install -e '.[test]')"
        ) from error


@lru_cache(maxsize=1)
def catalog() -> tuple[Rule, ...]:
    """Every rule of every tiny checkpoint the installed transformers can build, once each: the scatters, then the
    rules of particular forwards (found from their shape), then the attention and router rules, each
    with ``model_types``, the families whose checkpoints run it."""
    found: dict[str, Rule] = {}
    users: dict[str, dict[str, None]] = {}
    for name in tqdm(testing.NAMES, desc="finding the rules: building each tiny checkpoint", unit="checkpoint",
                     disable=None, leave=False):
        model = model_of(name)
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
