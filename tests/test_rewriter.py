"""The pure rewrite: byte-for-byte round trips and golden before/after pairs."""

from __future__ import annotations

import textwrap

import pytest
from conftest import compiled_or_skip

from envoys.catalog import catalog
from instrument import RewriteError, rewrite


@pytest.mark.parametrize("rule", catalog(), ids=lambda rule: rule.name)
def test_no_op_rewrite_round_trips_every_target(rule):
    source = compiled_or_skip(rule).original_source
    assert rewrite(source, set()).source == source


@pytest.mark.parametrize("rule", catalog(), ids=lambda rule: rule.name)
def test_rewrite_keeps_every_line_but_the_sites(rule):
    instrumented = compiled_or_skip(rule)
    before = instrumented.original_source.splitlines()
    after = instrumented.rewritten.source.splitlines()
    assert len(before) == len(after)
    changed = {number for number, (old, new) in enumerate(zip(before, after), start=1) if old != new}
    assert changed == {site.line for site in instrumented.rewritten.sites}


def golden(before: str, callees: set[str], after: str) -> None:
    result = rewrite(textwrap.dedent(before), callees)
    assert result.source == textwrap.dedent(after)


def test_decorated_method():
    golden(
        '''\
        @can_return_tuple
        @deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
        def forward(self, x, mask, features):
            x = self.embed(x)
            return x.masked_scatter(mask, features)
        ''',
        {"x.masked_scatter"},
        '''\
        @can_return_tuple
        @deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
        def forward(self, x, mask, features):
            x = self.embed(x)
            return __vlm_site__("x_masked_scatter_0", x.masked_scatter, mask, features)
        ''',
    )


def test_closure_and_zero_argument_super():
    golden(
        '''\
        def forward(self, x):
            x = super().forward(x)
            return scale(x) * factor
        ''',
        {"scale", "super"},
        '''\
        def forward(self, x):
            x = super().forward(x)
            return __vlm_site__("scale_0", scale, x) * factor
        ''',
    )


def test_call_inside_list_comprehension_keeps_its_layout():
    golden(
        '''\
        def forward(self, q, k, lengths):
            outputs = [
                attention(
                    self,
                    a,
                    b,
                    dropout=0.0,
                )[0]
                for a, b in zip(torch.split(q, lengths), torch.split(k, lengths))
            ]
            return torch.cat(outputs, dim=1)
        ''',
        {"attention", "torch.split", "torch.cat"},
        '''\
        def forward(self, q, k, lengths):
            outputs = [
                __vlm_site__("attention_0", attention,
                    self,
                    a,
                    b,
                    dropout=0.0,
                )[0]
                for a, b in zip(__vlm_site__("torch_split_0", torch.split, q, lengths), __vlm_site__("torch_split_1", torch.split, k, lengths))
            ]
            return __vlm_site__("torch_cat_0", torch.cat, outputs, dim=1)
        ''',
    )


def test_call_inside_a_loop_and_nested_calls():
    golden(
        '''\
        def forward(self, hidden, embeds):
            for index, layer in enumerate(self.layers):
                hidden = layer(hidden)
                if index < len(embeds):
                    hidden = self.add(self.add(hidden, embeds[index]), 0)
            return hidden
        ''',
        {"self.add"},
        '''\
        def forward(self, hidden, embeds):
            for index, layer in enumerate(self.layers):
                hidden = layer(hidden)
                if index < len(embeds):
                    hidden = __vlm_site__("self_add_1", self.add, __vlm_site__("self_add_0", self.add, hidden, embeds[index]), 0)
            return hidden
        ''',
    )


def test_a_call_with_no_arguments():
    golden("def f(self):\n    return self.go()\n", {"self.go"}, 'def f(self):\n    return __vlm_site__("self_go_0", self.go)\n')


def test_refuses_a_source_that_uses_the_reserved_prefix():
    with pytest.raises(RewriteError, match="reserved name.*__vlm_site__"):
        rewrite("def f(x):\n    return __vlm_site__(x)\n", {"g"})


def test_refuses_what_is_not_one_function():
    with pytest.raises(RewriteError, match="exactly one function"):
        rewrite("x = 1\n", set())
