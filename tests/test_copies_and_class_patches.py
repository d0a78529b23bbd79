"""An instrumented model keeps working when a tool patches a rewritten class, and when it is copied or pickled.

- A tool that replaces a rewritten class's ``forward`` for a while (transformers' exporter does, for the
  Qwen ViT attentions) has its forward run on instrumented instances too; inside a trace that is said.
- ``copy.deepcopy`` of the model (the torch module, or the `StandardizedTransformer`) is rewritten on its
  own: the copy runs and is traced after the original is gone, and a write in its trace reaches it only.
- ``pickle`` and ``torch.save`` of the module round-trip to an instrumented model with identical outputs.
"""

from __future__ import annotations

import copy
import gc
import io
import pickle

import nnsight
import pytest
import torch
from test_compiler import scaled_rule, synthetic  # noqa: F401 (a fixture)
from transformers import AutoModelForImageTextToText, AutoProcessor

from envoys import StandardizedTransformer
from envoys.families import family_for
from envoys.rules import rules_for_model
from envoys.testing import BUILDERS, CONTRACTS, chat_prompt, noise_image
from envoys.testing import qwen as qwen_builders
from instrument import compile_rule, install, install_all, installed
from instrument.dispatch import SitesNotServed
from instrument.install import BODY

IMAGE = noise_image(56, 56, seed=3)


def plain_and_instrumented(path):
    """The checkpoint loaded twice as transformers loads it, the second with its rules installed."""
    plain, instrumented = (AutoModelForImageTextToText.from_pretrained(path, attn_implementation="eager").eval()
                           for _ in range(2))
    install_all(instrumented, rules_for_model(instrumented, family_for(instrumented.config.model_type)))
    return plain, instrumented


def processed(path):
    processor = AutoProcessor.from_pretrained(path)
    return dict(processor(text=[chat_prompt(processor, 1, "What is this?")], images=[IMAGE], return_tensors="pt"))


def logits(model, inputs):
    with torch.no_grad():
        return model(**inputs).logits


def rewritten_paths(model: torch.nn.Module) -> dict[str, tuple[str, ...]]:
    return {path: tuple(installed(module)) for path, module in model.named_modules() if installed(module)}


def test_a_class_patch_runs_in_place_of_the_rewrite_until_it_is_undone(synthetic, monkeypatch):  # noqa: F811
    torch.manual_seed(0)
    module = synthetic.Scaled()
    x = torch.randn(3, 4)
    expected = module(x)
    install(module, compile_rule(scaled_rule()))
    monkeypatch.setattr(synthetic.Scaled, "forward", lambda self, x, **kwargs: torch.full_like(x, 7.0))
    assert torch.equal(module(x), torch.full_like(x, 7.0))
    monkeypatch.undo()
    assert torch.equal(module(x), expected) and "test.scaled" in installed(module)


#: The Qwen builders' checkpoints whose tower attends per image: a tower with windows (Qwen2.5-VL's) is left out, its
#: window index being data-dependent, so that the plain tower does not export either.
EXPORTABLE = [name for name, builder in BUILDERS.items()
              if builder.__module__ == qwen_builders.__name__ and "window_index" in CONTRACTS[name].vision_unavailable]


@pytest.mark.parametrize("name", EXPORTABLE)
def test_transformers_exporter_exports_an_instrumented_qwen_tower(tiny_checkpoint, name):
    """The exporter swaps the ViT attention's forward on the class for one torch.export can trace (the
    per-image loop of the class's own forward, rewritten or not, cannot be: a guard on a data-dependent size);
    the instrumented tower exports as the plain one does, and its program computes what the plain tower does."""
    pytest.importorskip("transformers.exporters.exporter_dynamo", reason="transformers' exporter came in 5.2x")
    from transformers.exporters.utils import apply_patches

    path = tiny_checkpoint(name)
    plain, instrumented = plain_and_instrumented(path)
    inputs = processed(path)
    arguments = (inputs["pixel_values"], inputs["image_grid_thw"])
    assert any(rule.endswith("vision-attention") for rule in installed(instrumented.model.visual.blocks[0].attn))
    with torch.no_grad(), apply_patches("dynamo"):
        programs = [torch.export.export(model.model.visual, arguments, strict=False) for model in (plain, instrumented)]
    with torch.no_grad():
        expected = plain.model.visual(*arguments)
    leaves = torch.utils._pytree.tree_leaves
    for program in programs:
        got = leaves(program.module()(*arguments))
        assert got and all(torch.allclose(g, e, atol=1e-5) for g, e in zip(got, leaves(expected), strict=True))


def test_a_trace_says_when_a_patched_class_keeps_its_sites_from_firing(tiny_checkpoint):
    pytest.importorskip("transformers.exporters.exporter_dynamo", reason="transformers' exporter came in 5.2x")
    from transformers.exporters.utils import apply_patches

    model = StandardizedTransformer(tiny_checkpoint("qwen3_vl"), task="image-text-to-text", attn_implementation="eager", dispatch=True)
    with apply_patches("dynamo"), pytest.warns(SitesNotServed, match=r"VisionAttention\.forward is no longer"):
        with model.trace(chat_prompt(model.processor, 1, "What is this?"), images=[IMAGE]):
            model.logits.save()


def test_a_deep_copy_of_the_module_is_rewritten_on_its_own(tiny_checkpoint):
    path = tiny_checkpoint("qwen3_vl")
    plain, instrumented = plain_and_instrumented(path)
    inputs = processed(path)
    clone = copy.deepcopy(instrumented)
    assert rewritten_paths(clone) == rewritten_paths(instrumented) != {}
    for original, copied in zip(instrumented.modules(), clone.modules(), strict=True):
        if installed(original):
            assert copied.__dict__[BODY] is not original.__dict__[BODY]
    del instrumented
    gc.collect()
    assert torch.equal(logits(clone, inputs), logits(plain, inputs))


def read_in_order(model, prompt):
    """The mask, a tower block's output, the image features and the logits, in the forward's order."""
    with model.trace(prompt, images=[IMAGE]):
        values = nnsight.save([model.vision.image_token_mask, model.vision.layers[0].layer_output,
                               model.vision.image_features, model.logits])
    return values


def test_a_deep_copy_of_a_standardized_transformer_is_traced_on_its_own(tiny_checkpoint):
    model = StandardizedTransformer(tiny_checkpoint("qwen2_5_vl"), task="image-text-to-text",
                                    attn_implementation="eager")
    prompt = chat_prompt(model.processor, 1, "What is this?")
    clean = read_in_order(model, prompt)
    clone = copy.deepcopy(model)
    assert clone._module is not model._module
    with clone.trace(prompt, images=[IMAGE]):
        clone.vision.image_features[:] = 0
        ablated = clone.logits.save()
    assert not torch.equal(ablated, clean[-1])
    assert all(torch.equal(a, b) for a, b in zip(read_in_order(model, prompt), clean, strict=True))
    del model
    gc.collect()
    assert all(torch.equal(a, b) for a, b in zip(read_in_order(clone, prompt), clean, strict=True))


def round_trip(module: torch.nn.Module, how: str) -> torch.nn.Module:
    if how == "pickle":
        return pickle.loads(pickle.dumps(module))
    buffer = io.BytesIO()
    torch.save(module, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)


@pytest.mark.parametrize("how", ["pickle", "torch.save"])
@pytest.mark.parametrize("wrapped", [False, True], ids=["installed", "standardized"])
def test_a_pickled_model_loads_instrumented_with_identical_outputs(tiny_checkpoint, how, wrapped):
    path = tiny_checkpoint("qwen3_vl")
    plain, instrumented = plain_and_instrumented(path)
    if wrapped:  # the module a StandardizedTransformer wraps: nnsight's controllers on it too
        instrumented = StandardizedTransformer(path, task="image-text-to-text", attn_implementation="eager", dispatch=True)._module
    inputs = processed(path)
    loaded = round_trip(instrumented, how)
    assert rewritten_paths(loaded) == rewritten_paths(instrumented) != {}
    for module in loaded.modules():
        if installed(module) and "__nnsight__" not in module.__dict__:
            assert module.__dict__["forward"].__func__ is module.__dict__[BODY]
    assert torch.equal(logits(loaded, inputs), logits(plain, inputs))
