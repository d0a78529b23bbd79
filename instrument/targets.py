"""Find rules by what a person types: a class name, a dotted path, a model_type, a rule name.

The compiler imports no rules: the package that holds them registers its
catalogue (every rule its checkpoints run, with the model_types running each)
as the entry point ``catalog`` of the group `GROUP` (as pytest finds its
plugins), and ``python -m instrument.show`` loads it at run time. The
maintainer's tools (`maintain`) import the rules package directly.
"""

from __future__ import annotations

import difflib
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


def rules_near(query: str) -> tuple[Rule, ...]:
    """The rules of the one modeling module ``query`` points at, as the rules package finds them without its whole
    catalogue (its ``rules_named``); empty where it points at none, or registers no such helper."""
    try:
        named = provider("rules_named")
    except LookupError:
        return ()
    return named(query) or ()


def names_of(rule: Rule) -> set[str]:
    """What a person may type for ``rule``: its name, its target's qualname, dotted path and class."""
    full = f"{rule.module_name}.{rule.qualname}"
    owner = rule.owner_name or ""
    return {rule.name, rule.qualname, full, owner, f"{rule.module_name}.{owner}"} - {""}


def select(query: str, rules: tuple[Rule, ...] | None = None) -> tuple[Rule, ...]:
    """The rules ``query`` names; empty if none.

    ``query`` is a rule name (``qwen3_vl.deepstack``), a model_type
    (``qwen3_vl``: all its rules), a class name (``Qwen3VLModel``), or a dotted
    path to the class or method (``transformers.models.llava.modeling_llava.LlavaModel``,
    with ``.forward`` or as ``module:Class.forward``). Without ``rules``, the
    rules of the one modeling module the query points at are searched first
    (`rules_near`: a class, a path or a rule's name, found in the time of
    importing that module), then the whole catalogue.
    """
    if rules is None:
        near = select(query, rules_near(query))
        return near if near else select(query, all_rules())
    dotted = query.replace(":", ".")
    return tuple(rule for rule in rules
                 if query in rule.model_types or query in names_of(rule) or dotted in names_of(rule))


def nearest(query: str, rules: tuple[Rule, ...], n: int = 5) -> list[str]:
    """The names of ``rules`` (model_types, rule names, classes) closest to ``query``, closest first (`difflib`)."""
    candidates = {name for rule in rules for name in (*rule.model_types, rule.name, rule.owner_name or "")} - {""}
    return difflib.get_close_matches(query, sorted(candidates), n=n, cutoff=0.6)
