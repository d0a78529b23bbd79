"""Find rules by what a person types: a class name, a dotted path, a model_type, a rule name.

The command-line tools look the rules up at run time (``envoys.rules.catalog``:
every rule of every tiny checkpoint, found from its model as at load), so the
compiler itself imports no rules.
"""

from __future__ import annotations

import importlib

from .rule import Rule


def all_rules() -> tuple[Rule, ...]:
    """Every rule the project's checkpoints run (`envoys.rules.catalog`)."""
    return importlib.import_module("envoys.rules").catalog()


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
