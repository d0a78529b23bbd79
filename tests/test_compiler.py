"""Compiling and installing a rule on synthetic modules: faithful functions, tracebacks, drift, install."""

from __future__ import annotations

import traceback

import nnsight
import pytest
import torch
from synthetic import write_module

from instrument import DriftError, InstallError, Rule, compile_rule, install, installed
from instrument.versions import library_version

SOURCE = '''
import torch
from transformers.utils.generic import can_return_tuple
from transformers.utils.deprecation import deprecate_kwarg

OFFSET = 1.0


def shift(x, by):
    return x + by


class Base(torch.nn.Module):
    def forward(self, x):
        return x * 2


def make_scaled(factor):
    class Scaled(Base):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(4, 4)

        @can_return_tuple
        @deprecate_kwarg("old", "99.0.0", new_name="x")
        def forward(self, x, times=1, *, extra=0.0):
            x = super().forward(x)
            for _ in range(times):
                x = shift(self.linear(x), OFFSET * factor + extra)
            return torch.nn.functional.relu(x)

    return Scaled


Scaled = make_scaled(3.0)


class Broken(torch.nn.Module):
    def forward(self, x):
        y = shift(x, 1.0)
        return y.view(-1, 0, 7)
'''


@pytest.fixture()
def synthetic(tmp_path):
    return write_module(tmp_path, "synthetic_model", SOURCE)


def scaled_rule(sites=None):
    return Rule("test.scaled", "synthetic_model:Scaled.forward", sites or {"shift": ("shift_0",)})


def test_rewritten_forward_computes_exactly_what_the_original_does(synthetic):
    torch.manual_seed(0)
    module = synthetic.Scaled()
    x = torch.randn(3, 4)
    expected = module(x, times=2, extra=0.5)
    install(module, compile_rule(scaled_rule()))
    assert torch.equal(module(x, times=2, extra=0.5), expected)  # closure, super(), defaults, kwdefaults
    assert torch.equal(module(old=x), synthetic.Scaled.forward(module, x))  # the decorators still run


def test_rebuilt_function_keeps_globals_closure_and_names(synthetic):
    instrumented = compile_rule(scaled_rule())
    built = instrumented.build(lambda label, fn, *a, **k: fn(*a, **k))
    assert built.__qualname__ == synthetic.Scaled.forward.__qualname__
    assert built.__globals__ is synthetic.Scaled.forward.__globals__
    assert instrumented.innermost.__kwdefaults__ == {"extra": 0.0}
    assert instrumented.code.co_filename == synthetic.__file__
    assert instrumented.code.co_varnames == instrumented.innermost.__code__.co_varnames
    assert {"__class__", "factor"} <= set(instrumented.code.co_freevars)


def test_a_later_patch_of_the_module_global_is_seen(synthetic, monkeypatch):
    torch.manual_seed(0)
    module = synthetic.Scaled()
    install(module, compile_rule(scaled_rule()))
    x = torch.randn(2, 4)
    before = module(x)
    monkeypatch.setattr(synthetic, "OFFSET", 100.0)
    assert not torch.equal(module(x), before)


def test_compiled_code_is_cached_per_code_object(synthetic):
    assert compile_rule(scaled_rule()).code is compile_rule(scaled_rule()).code


def test_two_closures_over_one_code_object_keep_their_own_cells(synthetic):
    torch.manual_seed(0)
    other = synthetic.make_scaled(5.0)
    plain, module = other(), other()
    module.load_state_dict(plain.state_dict())
    rule = Rule("test.other", "synthetic_model:Scaled.forward", {"shift": ("shift_0",)})
    compile_rule(rule)  # caches the code of Scaled (factor 3.0)
    synthetic.Scaled = other  # the same code object, closing over factor 5.0
    install(module, compile_rule(rule))
    x = torch.randn(2, 4)
    assert torch.equal(module(x), plain(x))


def test_only_the_instance_changes(synthetic):
    torch.manual_seed(0)
    rewritten, plain = synthetic.Scaled(), synthetic.Scaled()
    class_forward = synthetic.Scaled.__dict__["forward"]
    install(rewritten, compile_rule(scaled_rule()))
    assert "forward" in rewritten.__dict__ and "forward" not in plain.__dict__
    assert synthetic.Scaled.__dict__["forward"] is class_forward
    assert "test.scaled" in installed(rewritten) and not installed(plain)


def test_traceback_names_the_original_file_and_line(synthetic):
    module = synthetic.Broken()
    install(module, compile_rule(Rule("test.broken", "synthetic_model:Broken.forward", {"shift": ("shift_0",)})))
    with pytest.raises(RuntimeError) as raised:
        module(torch.ones(3))
    frame = [f for f in traceback.extract_tb(raised.value.__traceback__) if f.name == "forward"][-1]
    line = next(n for n, text in enumerate(SOURCE.splitlines(), start=1) if "y.view(-1, 0, 7)" in text)
    assert (frame.filename, frame.lineno) == (synthetic.__file__, line)
    assert frame.line == "return y.view(-1, 0, 7)"


def test_drift_names_rule_class_file_version_and_what_was_found(synthetic):
    rule = Rule("test.drift", "synthetic_model:Broken.forward", {"inputs_embeds.masked_scatter": ("inputs_embeds_masked_scatter_0",)})
    with pytest.raises(DriftError) as raised:
        compile_rule(rule)
    message = str(raised.value)
    for part in ("'test.drift'", "Broken.forward", synthetic.__file__, "found none", "inputs_embeds.masked_scatter"):
        assert part in message


def test_drift_on_a_different_count_lists_the_calls_found(synthetic):
    rule = Rule("test.count", "synthetic_model:Broken.forward", {"shift": ("shift_0", "shift_1")})
    with pytest.raises(DriftError, match=r"expected call sites \['shift_0', 'shift_1'\] of `shift`, found \['shift_0'\]: shift_0 \(line 2\)"):
        compile_rule(rule)


def test_drift_on_a_missing_target_names_the_library_version():
    rule = Rule("test.gone", "transformers.models.llava.modeling_llava:NoSuchModel.forward", {"f": ("f_0",)})
    with pytest.raises(DriftError, match=f"'test.gone'.*NoSuchModel.forward.*{library_version('transformers')}"):
        compile_rule(rule)


def test_unknown_decorator_is_refused(tmp_path):
    module = write_module(
        tmp_path,
        "decorated_model",
        '''
        import functools
        import torch

        def mine(func):
            @functools.wraps(func)
            def wrapper(*args, **kwargs):
                return func(*args, **kwargs)
            return wrapper

        class Decorated(torch.nn.Module):
            @mine
            def forward(self, x):
                return torch.relu(x)
        ''',
    )
    with pytest.raises(DriftError, match=r"made by decorated_model:mine, is a wrapper this compiler does not know.*"
                                         r"add 'decorated_model:mine' to instrument.decorators.KNOWN with the closure "
                                         r"cell 'func'"):
        compile_rule(Rule("test.unknown", "decorated_model:Decorated.forward", {"torch.relu": ("torch_relu_0",)}))
    assert "forward" not in module.Decorated().__dict__


def test_install_refuses_an_instance_of_another_class(synthetic):
    with pytest.raises(InstallError, match="different function"):
        install(synthetic.Base(), compile_rule(scaled_rule()))


def test_sites_serve_values_in_a_trace_and_writes_replace_them(synthetic):
    torch.manual_seed(0)
    module = synthetic.Scaled()
    install(module, compile_rule(scaled_rule()))
    model = nnsight.NNsight(module)
    x = torch.randn(2, 4)
    with model.trace(x):
        args, _ = model.source.shift_0.inputs
        by = args[1].save()
        model.source.shift_0.output = torch.zeros(2, 4)
        out = model.output.save()
    assert by == 3.0
    assert torch.equal(out, torch.zeros(2, 4))
    assert not torch.equal(module(x), torch.zeros(2, 4))  # nothing leaks out of the trace


def test_install_after_nnsight_wrapped_the_module(synthetic):
    torch.manual_seed(0)
    module = synthetic.Scaled()
    model = nnsight.NNsight(module)
    install(module, compile_rule(scaled_rule()))
    x = torch.randn(2, 4)
    with model.trace(x):
        value = model.source.shift_0.output.save()
    assert torch.equal(value, module.linear(x * 2) + 3.0)  # super().forward doubles; factor 3, OFFSET 1


DRILL_SOURCE = '''
import torch


def kernel(x):
    return torch.softmax(x, dim=-1)


def other(x):
    return x * 0


class Host(torch.nn.Module):
    def __init__(self, use_other=False):
        super().__init__()
        self.use_other = use_other

    def forward(self, x):
        fn = other if self.use_other else kernel
        return fn(x) + 1
'''


def test_a_drill_runs_the_inner_rule_at_nnsights_nested_location(tmp_path):
    module = write_module(tmp_path, "drill_model", DRILL_SOURCE)
    inner = Rule("test.kernel", "drill_model:kernel", {"torch.softmax": ("torch_softmax_0",)})
    outer = Rule("test.host", "drill_model:Host.forward", {"fn": ("fn_1",)}, drill={"fn_1": inner})
    host, plain = module.Host(), module.Host(use_other=True)
    install(host, compile_rule(outer))
    install(plain, compile_rule(outer))
    x = torch.randn(2, 3)
    assert torch.equal(host(x), torch.softmax(x, dim=-1) + 1)  # outside a trace: the same computation
    model = nnsight.NNsight(host)
    with model.trace(x):
        probabilities = model.source.fn_1.source.torch_softmax_0.output.save()
        model.source.fn_1.source.torch_softmax_0.output = torch.zeros(2, 3)
        out = model.output.save()
    assert torch.equal(probabilities, torch.softmax(x, dim=-1))
    assert torch.equal(out, torch.ones(2, 3))
    assert torch.equal(plain(x), torch.ones(2, 3))  # another callee at the same site is not substituted
