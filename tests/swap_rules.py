"""Build models with one rule left out or replaced, to test what a missing or drifted rule does to the values."""

from __future__ import annotations

import pytest

import envoys.model
from instrument import Rule


def without_rule(monkeypatch: pytest.MonkeyPatch, name: str, *instead: Rule) -> None:
    """Until the test ends, `StandardizedTransformer` installs every rule it finds but the one called ``name``, and
    the rules ``instead`` (a drifted copy, say) in its place."""
    found = envoys.model.rules_for_model

    def rules(model, family):
        return tuple(rule for rule in found(model, family) if rule.name != name) + instead

    monkeypatch.setattr(envoys.model, "rules_for_model", rules)
