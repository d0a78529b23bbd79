"""Qwen3.5's gated-DeltaNet blocks: the linear attention's interior at the gated delta rule kernel call, exact.

Every expected value is a recording of the kernel's own arguments and results
in a separately loaded plain model (transformers alone, no nnsight): the test
wraps the kernel functions of the modeling module for the length of one plain
run (`recording`), so the values are compared with what the plain forward
passed and got back, call by call.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import nnsight
import pytest

pytest.importorskip("transformers.models.qwen3_5", reason="target absent: this transformers release has no qwen3_5")
import torch
import transformers
from packaging.version import Version
from swap_rules import without_rule
from synthetic import write_module
from transformers import AutoModelForImageTextToText
from transformers.models.qwen3_5 import modeling_qwen3_5
from transformers.utils import is_kernels_available

from envoys import StandardizedTransformer, Unavailable
from envoys.catalog import rule_named, rules_for
from envoys.image import recipes
from envoys.testing import chat_prompt, noise_image
from instrument import Rule, compile_rule, install
from instrument.decorators import peel
from instrument.show import main as show
from instrument.versions import for_installed

ONE = [noise_image(32, 32, seed=0)]
KERNELS = ("torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule")
VALUES = ("queries", "keys", "values", "decays", "betas", "head_outputs", "state")


@pytest.fixture(scope="module")
def path(tiny_checkpoint):
    return tiny_checkpoint("qwen3_5")


@pytest.fixture(scope="module")
def model(path):
    return StandardizedTransformer(path, task="image-text-to-text", device="cpu", attn_implementation="eager")


@pytest.fixture(scope="module")
def plain(path):
    """The same checkpoint loaded by transformers alone: the recordings' model."""
    return AutoModelForImageTextToText.from_pretrained(path, attn_implementation="eager").eval()


@pytest.fixture(scope="module")
def text(model):
    return chat_prompt(model.processor, 1, "What is in the picture?")


def kinds(model) -> list[str]:
    return list(model.config.text_config.layer_types)


def deltanet_blocks(model) -> list[int]:
    return [i for i, kind in enumerate(kinds(model)) if kind == "linear_attention"]


class Recorder:
    """Wraps one kernel function (``name``: from transformers 5.25 a kernels hub function object, which has no
    ``__name__``): records every call's tensors (cloned) and what it returned, per layer."""

    def __init__(self, kernel, calls: list, name: str) -> None:
        self.kernel = kernel
        self.calls = calls
        self.name = name

    def __call__(self, query, key, value, **kwargs):
        output, state = self.kernel(query, key, value, **kwargs)
        self.calls.append({
            "kernel": self.name,
            "queries": query.clone(), "keys": key.clone(), "values": value.clone(),
            "decays": kwargs["g"].clone(), "betas": kwargs["beta"].clone(),
            "head_outputs": output.clone(), "state": None if state is None else state.clone(),
        })
        return output, state


def recording(plain, monkeypatch, run) -> list[dict]:
    """Every kernel call of ``run()`` on the plain model, in call order (blocks in order, step after step).

    The blocks call the kernel functions of the modeling module, or, on releases whose blocks hold them as
    attributes (``self.chunk_gated_delta_rule``), those attributes of this plain model's blocks: both are wrapped."""
    calls: list[dict] = []
    with monkeypatch.context() as patch:
        for name in KERNELS:
            patch.setattr(modeling_qwen3_5, name, Recorder(getattr(modeling_qwen3_5, name), calls, name))
        for block in plain.modules():
            for name in KERNELS:
                attribute = name.removeprefix("torch_")
                if isinstance(block, modeling_qwen3_5.Qwen3_5GatedDeltaNet) and hasattr(block, attribute):
                    patch.setattr(block, attribute, Recorder(getattr(block, attribute), calls, name))
        with torch.no_grad():
            run()
    return calls


def per_block(calls: list[dict], blocks: int) -> list[list[dict]]:
    """The calls of each forward (step), each a list with one call per DeltaNet block."""
    return [calls[i: i + blocks] for i in range(0, len(calls), blocks)]


def read_all(deltanet) -> dict[str, torch.Tensor]:
    """Every DeltaNet value of one block in forward order (inputs before outputs), saved."""
    return nnsight.save({name: getattr(deltanet, f"linear_attention_{name}") for name in VALUES})


def as_received(values: dict, name: str, received: torch.Tensor) -> torch.Tensor:
    """The value ``name`` in the layout the kernel received it: queries and keys (one head per key head) repeated to
    the heads the call got, as the block repeats them on releases where it does; the others as they are."""
    value = values[name]
    if name in ("queries", "keys"):
        return value.repeat_interleave(received.shape[2] // value.shape[2], dim=2)
    return value


def assert_equal_to(values: dict, call: dict) -> None:
    for name in VALUES:
        assert torch.equal(as_received(values, name, call[name]), call[name]), name


# -- the rule and its decorators ---------------------------------------------------------------------


def test_the_rule_exposes_both_kernel_calls(capsys):
    rule = next(r for r in rules_for("qwen3_5") if r.name == "qwen3_5.gated-deltanet")
    assert rule.target.endswith(":Qwen3_5GatedDeltaNet.forward")
    assert show(["Qwen3_5GatedDeltaNet"]) == 0
    out = capsys.readouterr().out
    numbered = r"(?: \(numbered \w+\))?"  # nnsight's own label, where a release's variant serves the call under ours
    # from 5.25 a prompt pass also calls the per-token kernel for each token whose state the cache keeps
    kept = r", torch_recurrent_gated_delta_rule_1 \(line (\d+)\)" if Version(transformers.__version__) >= Version("5.25") else ""
    found = re.search(rf"^# sites: torch_recurrent_gated_delta_rule_0{numbered} \(line (\d+)\), "
                      rf"torch_chunk_gated_delta_rule_0{numbered} \(line (\d+)\){kept}$", out, re.M)
    assert found, out
    lines = Path(modeling_qwen3_5.__file__).read_text().splitlines()
    recurrent, chunk, *tail = (lines[int(number) - 1] for number in found.groups())
    assert "recurrent_gated_delta_rule(" in recurrent and "chunk_gated_delta_rule(" in chunk  # the file's own lines
    assert all("recurrent_gated_delta_rule(" in line for line in tail)


def test_the_forward_s_decorators_are_peeled():
    """The DeltaNet forward's decorators (force_accelerate_hooks, deprecate_kwarg, where the release has them) are
    peeled down to the function itself."""
    innermost, layers = peel(modeling_qwen3_5.Qwen3_5GatedDeltaNet.forward)
    decorators = inspect.getsource(modeling_qwen3_5.Qwen3_5GatedDeltaNet.forward).split("def forward", 1)[0]
    on_class = inspect.getsource(modeling_qwen3_5.Qwen3_5GatedDeltaNet).split("class ", 1)[0]
    kernelized = "@use_kernelized_func" in on_class and is_kernels_available()  # kernels' class decorator, outermost
    expected = (["layer.py"] if kernelized else []) + (["accelerate.py"] if "@force_accelerate_hooks" in decorators else []) + (
        ["deprecation.py"] if "@deprecate_kwarg" in decorators else [])
    assert [layer.wrapper.__code__.co_filename.rpartition("/")[2] for layer in layers] == expected
    assert innermost.__qualname__ == "Qwen3_5GatedDeltaNet.forward"


def test_force_accelerate_hooks_is_peeled_and_rebuilt(tmp_path):
    """A forward wrapped by force_accelerate_hooks is peeled, and the rebuilt wrapper still fires the hooks."""
    accelerate = pytest.importorskip("transformers.integrations.accelerate")
    if not hasattr(accelerate, "force_accelerate_hooks"):
        pytest.skip("this transformers release has no force_accelerate_hooks: nothing to peel")
    source = '''
import torch
from transformers.integrations.accelerate import force_accelerate_hooks


class Hooked(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    @force_accelerate_hooks("linear")
    def forward(self, x):
        return torch.relu(torch.nn.functional.linear(x, self.linear.weight, self.linear.bias))
'''
    synthetic = write_module(tmp_path, "hooked_model", source)
    torch.manual_seed(0)
    module = synthetic.Hooked()
    fired: list[str] = []

    class Hook:  # what accelerate's hook would do before and after the child's weights are used
        def pre_forward(self, child):
            fired.append("pre")

        def post_forward(self, child, output):
            fired.append("post")

    module.linear._hf_hook = Hook()
    x = torch.randn(2, 4)
    expected = module(x)
    assert fired == ["pre", "post"]
    install(module, compile_rule(Rule("test.hooked", "hooked_model:Hooked.forward", {"torch.relu": ("torch_relu_0",)})))
    assert torch.equal(module(x), expected)
    assert fired == ["pre", "post", "pre", "post"]  # the rebuilt wrapper still fires the child's hook
    assert len(peel(synthetic.Hooked.forward)[1]) == 1


# -- the values, exact against the plain model's kernel calls ---------------------------------------


def test_prompt_pass_values_equal_the_chunk_call_of_the_plain_forward(model, plain, text, monkeypatch):
    inputs = model.processor(text=[text], images=ONE, return_tensors="pt")
    calls = recording(plain, monkeypatch, lambda: plain(**inputs))
    blocks = deltanet_blocks(model)
    assert [call["kernel"] for call in calls] == ["torch_chunk_gated_delta_rule"] * len(blocks)
    with model.trace(text, images=ONE):
        read = nnsight.save([read_all(model.layers[i].linear_attn) for i in blocks])
    for values, call in zip(read, calls):
        assert_equal_to(values, call)


def test_layouts_follow_the_config(model, text):
    config = model.config.text_config
    length = model.processor(text=[text], images=ONE, return_tensors="pt")["input_ids"].shape[1]
    with model.trace(text, images=ONE):
        values = read_all(model.layers[0].linear_attn)
    key = (1, length, config.linear_num_key_heads, config.linear_key_head_dim)
    heads = config.linear_num_value_heads
    assert values["queries"].shape == values["keys"].shape == key
    assert values["values"].shape == values["head_outputs"].shape == (1, length, heads, config.linear_value_head_dim)
    assert values["decays"].shape == values["betas"].shape == (1, length, heads)
    assert values["state"].shape == (1, heads, config.linear_key_head_dim, config.linear_value_head_dim)
    assert (values["decays"] <= 0).all() and ((values["betas"] > 0) & (values["betas"] < 1)).all()


def test_values_equal_nnsight_own_source_of_the_same_call(path, text):
    # a model of its own: opening nnsight's .source swaps the module's body for nnsight's, which numbers the calls
    # as the release does, and the module's other tests read the rule's labels
    model = StandardizedTransformer(path, task="image-text-to-text", device="cpu", attn_implementation="eager")
    deltanet = model.layers[1].linear_attn
    rule = for_installed(rule_named("qwen3_5.gated-deltanet"))
    # nnsight's own name of the chunk call, as this release's forward numbers it (served under the rule's label)
    label = next((own for own, served in rule.serve_as.items() if served == "torch_chunk_gated_delta_rule_0"),
                 "torch_chunk_gated_delta_rule_0")
    with model.trace(text, images=ONE):
        values = read_all(deltanet)
    with model.trace(text, images=ONE):
        inputs = nnsight.save(getattr(deltanet.source, label).inputs)
        outputs = nnsight.save(getattr(deltanet.source, label).output)
    (args, kwargs), (output, state) = inputs, outputs
    assert torch.equal(as_received(values, "queries", args[0]), args[0]) and torch.equal(values["decays"], kwargs["g"])
    assert torch.equal(values["head_outputs"], output) and torch.equal(values["state"], state)


# -- writes -------------------------------------------------------------------------------------------


def clean(model, text, layer: int):
    with model.trace(text, images=ONE):
        output = model.layers[layer].linear_attn.output.save()
        logits = model.logits.save()
    return output, logits


@pytest.mark.parametrize("name", ["betas", "values"])
def test_zeroing_betas_or_values_empties_the_state_and_changes_the_logits(model, text, name):
    """With no writes (beta 0) or nothing to write (v 0), the state stays zero, so every head output is zero."""
    layer = deltanet_blocks(model)[0]
    before, logits = clean(model, text, layer)
    deltanet = model.layers[layer].linear_attn
    with model.trace(text, images=ONE):
        setattr(deltanet, f"linear_attention_{name}", torch.zeros_like(getattr(deltanet, f"linear_attention_{name}")))
        heads = deltanet.linear_attention_head_outputs.save()
        state = deltanet.linear_attention_state.save()
        output = deltanet.output.save()
        edited = model.logits.save()
    assert torch.equal(heads, torch.zeros_like(heads)) and torch.equal(state, torch.zeros_like(state))
    assert not torch.equal(output, before) and not torch.equal(edited, logits)
    again = clean(model, text, layer)
    assert torch.equal(again[0], before) and torch.equal(again[1], logits)


def test_an_in_place_edit_reaches_the_kernel(model, text):
    layer = deltanet_blocks(model)[0]
    before, _ = clean(model, text, layer)
    deltanet = model.layers[layer].linear_attn
    with model.trace(text, images=ONE):
        deltanet.linear_attention_betas[:] = 0
        values = read_all(deltanet)
        output = deltanet.output.save()
    assert torch.equal(values["head_outputs"], torch.zeros_like(values["head_outputs"]))
    assert torch.equal(values["state"], torch.zeros_like(values["state"]))
    assert not torch.equal(output, before)


def test_writing_head_outputs_and_decays_reaches_the_block(model, text):
    layer = deltanet_blocks(model)[1]
    before, logits = clean(model, text, layer)
    deltanet = model.layers[layer].linear_attn
    with model.trace(text, images=ONE):
        deltanet.linear_attention_decays = torch.zeros_like(deltanet.linear_attention_decays)
        state = deltanet.linear_attention_state.save()
        output = deltanet.output.save()
    assert not torch.equal(output, before)
    with model.trace(text, images=ONE):
        deltanet.linear_attention_head_outputs = torch.zeros_like(deltanet.linear_attention_head_outputs)
        zeroed = deltanet.output.save()
    # the gated norm of zero is zero, so out_proj's input is zero: the block adds nothing
    assert torch.equal(zeroed, torch.zeros_like(zeroed))
    assert state.abs().sum() > 0
    again = clean(model, text, layer)
    assert torch.equal(again[0], before) and torch.equal(again[1], logits)


def test_a_write_of_another_shape_is_refused(model, text):
    deltanet = model.layers[0].linear_attn
    with pytest.raises(ValueError, match=r"linear_attention_betas takes a tensor of shape \(1, \d+, 4\)"):
        with model.trace(text, images=ONE):
            deltanet.linear_attention_betas = torch.zeros(1, 3, 4)


# -- generation: the prompt pass at the chunk call, decode steps at the recurrent call -----------------


def test_generation_serves_the_chunk_call_then_the_recurrent_call(model, plain, text, monkeypatch):
    inputs = model.processor(text=[text], images=ONE, return_tensors="pt")
    calls = recording(plain, monkeypatch, lambda: plain.generate(**inputs, max_new_tokens=3, do_sample=False))
    blocks = deltanet_blocks(model)
    steps = per_block(calls, len(blocks))
    assert [step[0]["kernel"] for step in steps] == ["torch_chunk_gated_delta_rule"] + ["torch_recurrent_gated_delta_rule"] * 2
    with model.generate(text, images=ONE, max_new_tokens=3, do_sample=False) as tracer:
        read = nnsight.save([])
        for _step in tracer.iter[:3]:
            read.append([read_all(model.layers[i].linear_attn) for i in blocks])
    assert len(read) == 3
    for values, recorded in zip(read, steps):
        for block, call in zip(values, recorded):
            assert call["state"] is not None
            assert_equal_to(block, call)
    assert read[1][0]["queries"].shape[1] == 1  # a decode step: one token


def test_a_decode_step_read_after_other_values_of_its_step(model, plain, text, monkeypatch):
    """Relaxed after the step's first read (the block's input), the values still find the step's recurrent call."""
    inputs = model.processor(text=[text], images=ONE, return_tensors="pt")
    calls = recording(plain, monkeypatch, lambda: plain.generate(**inputs, max_new_tokens=3, do_sample=False))
    blocks = deltanet_blocks(model)
    steps = per_block(calls, len(blocks))
    layer = blocks[-1]
    with model.generate(text, images=ONE, max_new_tokens=3, do_sample=False) as tracer:
        read = nnsight.save([])
        for _step in tracer.iter[1:3]:
            model.layers[0].layer_input.save()
            read.append(read_all(model.layers[layer].linear_attn))
    assert len(read) == 2
    for values, recorded in zip(read, steps[1:]):
        assert_equal_to(values, recorded[-1])


def test_a_decode_write_to_the_state_reaches_the_next_step(model, text):
    """The state the prompt pass returns is what the cache keeps: zeroing it changes the first decode step."""
    layer = deltanet_blocks(model)[0]
    deltanet = model.layers[layer].linear_attn
    with model.generate(text, images=ONE, max_new_tokens=2, do_sample=False) as tracer:
        clean_heads = nnsight.save([])
        for _ in tracer.iter[:2]:
            clean_heads.append(deltanet.linear_attention_head_outputs.save())
    with model.generate(text, images=ONE, max_new_tokens=2, do_sample=False) as tracer:
        heads = nnsight.save([])
        for step in tracer.iter[:2]:
            if step == 0:
                deltanet.linear_attention_state = torch.zeros_like(deltanet.linear_attention_state)
            else:
                heads.append(deltanet.linear_attention_head_outputs.save())
    assert not torch.equal(heads[0], clean_heads[1])


def test_without_a_cache_every_step_runs_the_chunk_call_and_there_is_no_state(model, plain, text, monkeypatch):
    inputs = model.processor(text=[text], images=ONE, return_tensors="pt")
    run = lambda: plain.generate(**inputs, max_new_tokens=2, do_sample=False, use_cache=False)  # noqa: E731
    calls = recording(plain, monkeypatch, run)
    blocks = deltanet_blocks(model)
    steps = per_block(calls, len(blocks))
    assert {call["kernel"] for call in calls} == {"torch_chunk_gated_delta_rule"}
    assert all(call["state"] is None for call in calls)
    deltanet = model.layers[blocks[0]].linear_attn
    with model.generate(text, images=ONE, max_new_tokens=2, do_sample=False, use_cache=False) as tracer:
        read = nnsight.save([])
        for _step in tracer.iter[:2]:
            read.append({name: getattr(deltanet, f"linear_attention_{name}") for name in VALUES[:-1]})
    for values, recorded in zip(read, steps):
        for name in VALUES[:-1]:
            assert torch.equal(as_received(values, name, recorded[0][name]), recorded[0][name]), name
    with pytest.raises(Unavailable, match=r"linear_attention_state is unavailable: this forward keeps no cache "
                                          r"\(use_cache=False\), so it asks the kernel for no final state"):
        with model.trace(text, images=ONE, use_cache=False):
            deltanet.linear_attention_state


def test_without_the_rule_the_values_say_why(tiny_checkpoint, monkeypatch):

    without_rule(monkeypatch, "qwen3_5.gated-deltanet")
    model = StandardizedTransformer(tiny_checkpoint("qwen3_5"), task="image-text-to-text")
    reason = model.layers[0].support()["linear_attn.linear_attention_queries"]
    assert reason.startswith("no rewrite rule exposes torch_chunk_gated_delta_rule_0 in Qwen3_5GatedDeltaNet.forward")
    with pytest.raises(Unavailable, match=r"layers\[0\]\.linear_attn\.linear_attention_betas is unavailable: no rewrite"):
        model.layers[0].linear_attn.linear_attention_betas


def test_a_config_without_a_cache_says_so_in_support(model, monkeypatch):
    monkeypatch.setattr(model.config.text_config, "use_cache", False)
    reasons = model.support()["linear_attn.linear_attention_state"]
    assert set(reasons) == set(range(len(kinds(model))))
    assert "keeps no cache" in reasons[0] and "not a gated DeltaNet" in reasons[3]


# -- the wrong kind of block --------------------------------------------------------------------------


def test_deltanet_values_exist_only_on_deltanet_blocks(model):
    full = kinds(model).index("full_attention")
    support = model.support()
    for name in VALUES:
        reasons = support[f"linear_attn.linear_attention_{name}"]
        assert set(reasons) == {full}, name
        assert reasons[full] == (
            f"layers[{full}]'s token mixer is softmax attention, self_attn, not a gated DeltaNet, so it has no "
            f"linear_attn values; its interior is layers[{full}].self_attn.attention_queries and the other attention values"
        )
    block = model.layers[deltanet_blocks(model)[0]].support()
    assert all(block[f"linear_attn.linear_attention_{name}"] is None for name in VALUES)
    assert "gated DeltaNet" in block["self_attn.attention_queries"]  # and the softmax values stay unavailable there
    assert model.layers[full].support()["linear_attn.linear_attention_queries"].startswith(f"layers[{full}]'s token mixer")


def test_print_shows_the_deltanet_values_on_the_deltanet_kind_of_block(model):
    shown = repr(model)
    deltanet = shown[shown.index("    [0, 1, 2]:"): shown.index("    [3]:")]
    assert "      linear_attn: Qwen3_5GatedDeltaNet()" in deltanet
    for name, layout in zip(VALUES, ("LinearQueries", "LinearKeys", "LinearValues", "Decays", "Betas",
                                     "LinearHeadOutputs", "RecurrentState")):
        assert f"        linear_attention_{name} -> {layout}: " in deltanet
    assert "linear_attention" not in shown[shown.index("    [3]:"): shown.index("  norm:")]


def test_the_checkpoint_mixes_layer_types_and_its_tokenizer_round_trips(plain, model):
    assert set(plain.config.text_config.layer_types) == {"linear_attention", "full_attention"}
    tokenizer = model.processor.tokenizer
    text = chat_prompt(model.processor, 2, "Compare the two images: zebra, élan, 42?")
    ids = tokenizer(text)["input_ids"]
    assert tokenizer.decode(ids) == text
    tokens = tokenizer.convert_ids_to_tokens(ids)
    assert tokens.count("<|image_pad|>") == 2 and tokens[0] == "<|im_start|>"
    assert "Ġthe" in tokens and "Ġimages" in tokens  # the trained merges survived the rebuild


def test_knockout_and_attention_say_why_a_block_has_no_softmax_attention(model, text):
    images = [noise_image(32, 32, seed=0)]
    with pytest.raises(Unavailable, match=r"layers\[0\]\.self_attn\.attention_scores is unavailable: .*gated DeltaNet"):
        recipes.knock_out_image_attention(model, text, images, layers=[0, 3])
    with pytest.raises(Unavailable, match=r"layers\[1\]\.self_attn\.attention_probabilities is unavailable"):
        recipes.attention_to_image(model, text, images, layer=1)


def test_the_tree_shows_each_kind_of_block_of_a_hybrid_stack(model):
    kinds = ["linear_attention" if model.layers[i].__dict__.get("self_attn") is None else "full_attention"
             for i in range(model.num_layers)]
    assert kinds == list(model.config.text_config.layer_types)
    linear = [i for i, kind in enumerate(kinds) if kind == "linear_attention"]
    full = [i for i, kind in enumerate(kinds) if kind == "full_attention"]
    lines = repr(model).splitlines()
    start = lines.index(f"  layers: {model.num_layers} x Qwen3_5DecoderLayer")
    assert lines[start + 1] == f"    [{', '.join(map(str, linear))}]:"
    second = lines.index(f"    [{', '.join(map(str, full))}]:")
    assert "      self_attn: Qwen3_5Attention()" in lines[second:]
    assert not any(line.startswith("      self_attn:") for line in lines[start + 1 : second])
