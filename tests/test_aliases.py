"""Binding a family's ``rename=`` in one pass (envoys/core/aliases.py) gives the tree nnsight's ``rename=`` gives.

On every tiny checkpoint, and on the text model of each family that has one
saved alone: the model is built twice from the same config; one copy is
wrapped by nnsight with ``rename=`` (the expected tree), the other without it
and then bound by `bind_rename`. Every envoy must have the same class, the
same aliases in the same order, each naming the envoy at the same path, and
the same ``rename`` for what nnsight wraps later.
"""

from __future__ import annotations

import pytest
import torch
from conftest import skip_if_absent
from nnsight import Envoy
from transformers import AutoModelForCausalLM

from envoys.core.aliases import bind_rename
from envoys.families import families, family_for
from envoys.testing import NAMES, build

TEXT_FAMILIES = sorted(family.model_type for family in families() if family.text_model_types)


def text_model(name: str) -> torch.nn.Module:
    """The causal LM of the tiny checkpoint's text model (random weights: only its structure matters here)."""
    model, _ = build(name)
    return AutoModelForCausalLM.from_config(model.config.get_text_config())


def tree(root: Envoy) -> dict[str, tuple]:
    """Per native path: the envoy's class, its aliases (alias, native path it resolved from, path of the envoy it
    names) in binding order, and its ``rename``."""
    found = {}
    for module in root._module.modules():
        envoy = root.interleaver.envoys[id(module)]
        aliases = tuple((alias, native, envoy.__dict__[alias].path) for alias, native in envoy._aliases.items())
        found[envoy.path] = (type(envoy), aliases, envoy._rename)
    return found


def both_ways(make, family) -> tuple[dict, dict]:
    expected_model, model = make(), make()
    rename, envoys = family.rename_for(model.config), family.envoys_for(model)
    expected = Envoy(expected_model, rename=rename, envoys=envoys)
    bound = Envoy(model, envoys=envoys)
    bind_rename(bound, rename)
    return tree(expected), tree(bound)


@pytest.mark.parametrize("name", NAMES)
def test_one_pass_binds_what_nnsight_binds(name):
    skip_if_absent(name.partition("-")[0])
    family = family_for(build(name)[0].config.model_type)
    expected, bound = both_ways(lambda: build(name)[0], family)
    assert any(aliases for _, aliases, _ in expected.values())
    assert bound == expected


@pytest.mark.parametrize("model_type", TEXT_FAMILIES)
def test_one_pass_binds_what_nnsight_binds_on_a_text_model_alone(model_type):
    skip_if_absent(model_type)
    family = family_for(model_type).for_text_model()
    expected, bound = both_ways(lambda: text_model(model_type), family)
    assert any(aliases for _, aliases, _ in expected.values())
    assert bound == expected


def test_a_key_that_names_two_modules_is_nnsights_error():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="matches 2 modules") as expected:
        Envoy(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)), rename={torch.nn.Linear: "linear"})
    with pytest.raises(ValueError) as raised:
        bind_rename(Envoy(model), {torch.nn.Linear: "linear"})
    assert str(raised.value) == str(expected.value)
