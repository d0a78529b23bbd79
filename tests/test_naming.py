"""Site names equal the names nnsight's own compiler gives the same calls."""

from __future__ import annotations

import inspect
import itertools
import textwrap

import pytest
from conftest import compiled_or_skip
from nnsight.intervention.source import compile_source
from synthetic import write_module

from envoys.catalog import catalog
from instrument import rewrite, source_names

TRICKY = '''
import torch

def helper(*args, **kwargs):
    return args

class Thing(torch.nn.Module):
    def forward(self, x, y=None, *rest, scale: float = 1.0, **extra):
        a, b = helper(x), helper(y)
        c = {helper(1): helper(2), helper(3): helper(4)}
        d = helper(x) if helper(y) else helper(x, y)
        e = helper(key=helper(0), *rest, **extra)
        f: list = [helper(i) for i in helper(x) if helper(i)]
        g = lambda v: helper(v)
        self.h = x.view(helper(x))[helper(y)]
        x[helper(1)] = helper(2)
        k = m = helper(5)
        for i in helper(x):
            x = helper(x).view(-1)
        n, *p = helper(x)
        q = (lambda: x)()
        r = f"{helper(x)} {x.size(helper(0))}"
        x += helper(x)
        def inner(z=helper(6)) -> helper(7):
            return helper(z)
        w = {**extra, "k": helper(8)}
        result = super().forward(x)
        return helper(a, b, c, d, e, f, g, k, m, n, p, q, r, inner, w)
'''


@pytest.fixture(scope="module")
def tricky(tmp_path_factory):
    return write_module(tmp_path_factory.mktemp("tricky"), "tricky_forward", TRICKY).Thing.forward


def test_every_label_matches_nnsight_on_tricky_source(tricky):
    source = textwrap.dedent(inspect.getsource(tricky))
    ours = tuple(source_names(source).order)
    assert ours == compile_source(tricky).names


def test_selected_sites_get_nnsight_labels_on_tricky_source(tricky):
    source = textwrap.dedent(inspect.getsource(tricky))
    nnsight_names = compile_source(tricky).names
    sites = rewrite(source, {"helper", "x.view"}).sites
    expected = [n for n in nnsight_names if n.startswith(("helper_", "x_view_"))]
    assert [site.served_as for site in sites] == expected
    assert {site.callee for site in sites} == {"helper", "x.view"}


@pytest.mark.parametrize("rule", catalog(), ids=lambda rule: rule.name)
def test_rule_site_names_match_nnsight(rule):
    instrumented = compiled_or_skip(rule)
    reference = compile_source(instrumented.innermost)
    assert tuple(source_names(instrumented.original_source).order) == reference.names
    for site in instrumented.rewritten.sites:
        assert site.label in reference.names  # nnsight's label; a variant may serve it under another (serve_as)
        # nnsight's line is within its dedented source, whose first line is the `def`
        # (decorators dropped); ours is within the source with decorators.
        decorators = len(instrumented.original_source.splitlines()) - len(reference.source.splitlines())
        assert reference.lines[site.label] == site.line - decorators
    labels = sorted(site.label for site in instrumented.rewritten.sites)
    assert labels == sorted(itertools.chain.from_iterable(instrumented.rule.sites.values()))
