"""Find rules by what a person types: a class name, a dotted path, a model_type, a rule name.

The compiler imports no rules: the package that holds them registers its
catalogue (every rule its checkpoints run, with the model_types running each)
as the entry point ``catalog`` of the group `GROUP` (as pytest finds its
plugins), and ``python -m instrument.show`` loads it at run time. The
maintainer's tools (`maintain`) import the rules package directly.
"""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any

from .rule import Rule

#: The entry-point group a rules package registers its catalogue and helpers in.
GROUP = "instrument.rules"


def provider(name: str) -> Any:
    """The object the installed rules package registers as ``name`` in `GROUP` (``catalog``); LookupError saying what
    to install."""
    found = list(entry_points(group=GROUP, name=name))
    if not found:
        raise LookupError(
            f"no installed package registers {name!r} in the entry-point group {GROUP!r}: install the project that "
            f"holds the rules (pip install -e . in its checkout; an editable install made before the entry point was "
            f"added needs the same command again)"
        )
    return found[0].load()


def all_rules() -> tuple[Rule, ...]:
    """Every rule the installed rules package's checkpoints run (its ``catalog``)."""
    return provider("catalog")()


def select(query: str, rules: tuple[Rule, ...] | None = None) -> tuple[Rule, ...]:
    """The rules ``query`` names; empty if none.

    ``query`` is a rule name (``qwen3_vl.deepstack``), a model_type
    (``qwen3_vl``: all its rules), a class name (``Qwen3VLModel``), or a dotted
    path to the class or method (``transformers.models.llava.modeling_llava.LlavaModel``,
    with ``.forward`` or as ``module:Class.forward``).
    """
    rules = all_rules() if rules is None else rules
    dotted = query.replace(":", ".")

    def names(rule: Rule) -> set[str]:
        full = f"{rule.module_name}.{rule.qualname}"
        owner = rule.owner_name or ""
        return {rule.name, rule.qualname, full, owner, f"{rule.module_name}.{owner}"} - {""}

    return tuple(rule for rule in rules if query in rule.model_types or query in names(rule) or dotted in names(rule))
