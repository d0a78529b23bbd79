"""The rules on tiny random LLaVA and Qwen3-VL checkpoints: faithful outside a trace, served inside one."""

from __future__ import annotations

import sys
import traceback
from collections import Counter
from pathlib import Path

import nnsight
import pytest
import torch
from transformers import AutoModelForImageTextToText, AutoProcessor

from envoys.catalog import rule_named, rules_for
from envoys.testing import chat_prompt, noise_image
from instrument import compile_rule, install, install_all
from instrument.install import installed
from instrument.versions import for_installed

IMAGES = {1: [noise_image(32, 32, seed=0)], 2: [noise_image(32, 32, seed=0), noise_image(48, 64, seed=1)]}


def load(path: Path):
    model = AutoModelForImageTextToText.from_pretrained(path, attn_implementation="eager").eval()
    return model, AutoProcessor.from_pretrained(path)


def inputs_for(processor, images: int):
    prompt = chat_prompt(processor, images, "What is in the picture?")
    return processor(text=[prompt], images=IMAGES[images], return_tensors="pt")


def image_mask(model, inputs) -> torch.Tensor:
    return inputs["input_ids"] == model.config.image_token_id


@pytest.fixture(params=["llava-siglip", "qwen3_vl"])
def family(request, tiny_checkpoint):
    return request.param, tiny_checkpoint(request.param)


def model_type(name: str) -> str:
    return name.partition("-")[0]


def namespace_identities(prefixes=("transformers", "nnsight")) -> dict[tuple[str, ...], int]:
    """The identity of every module global and class attribute of the loaded transformers and nnsight modules."""
    seen: dict[tuple[str, ...], int] = {}
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith(prefixes):
            continue
        for key, value in list(vars(module).items()):
            seen[(name, key)] = id(value)
            if isinstance(value, type) and value.__module__ == name:
                for attribute, member in list(vars(value).items()):
                    seen[(name, key, attribute)] = id(member)
    return seen


@pytest.mark.parametrize("images", [1, 2])
def test_outputs_outside_a_trace_are_bit_identical(family, images):
    name, path = family
    model, processor = load(path)
    inputs = inputs_for(processor, images)
    with torch.no_grad():
        expected = model(**inputs).logits
        installed = install_all(model, rules_for(model_type(name)))
        assert installed[f"{model_type(name)}.image-scatter"] == ("model",)
        assert torch.equal(model(**inputs).logits, expected)


def test_another_instance_keeps_the_class_forward_and_nothing_global_changes(family):
    name, path = family
    model, processor = load(path)
    plain, _ = load(path)
    rules = rules_for(model_type(name))
    for rule in rules:
        compile_rule(rule)  # imports every target first, so the comparison sees installing alone
    before = namespace_identities()
    install_all(model, rules)
    inputs = inputs_for(processor, 1)
    with torch.no_grad():
        model(**inputs), plain(**inputs)
    assert namespace_identities() == before
    # nothing installed on the other instance (transformers 4.57 wraps a block's forward on the instance while it
    # records outputs: that one is its own, not a rewrite)
    assert not any(installed(module) for module in plain.modules())
    rewritten = [m for m in model.modules() if installed(m)]
    assert rewritten and all("forward" in m.__dict__ for m in rewritten)
    assert all(type(m).forward is not m.__dict__["forward"].__func__ for m in rewritten)
    ours = {m.__dict__["forward"].__func__ for m in rewritten}
    assert not any(getattr(m.__dict__["forward"], "__func__", None) in ours for m in plain.modules() if "forward" in m.__dict__)


def test_the_scatter_site_serves_what_the_first_block_receives_and_takes_writes(family):
    name, path = family
    model, processor = load(path)
    install_all(model, rules_for(model_type(name)))
    traced = nnsight.NNsight(model)
    inputs = inputs_for(processor, 2)
    mask = image_mask(model, inputs)
    scatter = traced.model.source.inputs_embeds_masked_scatter_0
    with traced.trace(**inputs):
        features = scatter.inputs[0][1].save()
        first = traced.model.language_model.layers[0].input.save()
        clean = traced.output.logits.save()
    assert features.shape == (int(mask.sum()), model.config.text_config.hidden_size)
    assert torch.equal(first[mask], features)
    assert torch.equal(first[~mask], model.get_input_embeddings()(inputs["input_ids"])[~mask])

    with traced.trace(**inputs):
        (positions, image_features), kwargs = scatter.inputs  # the callee is inputs_embeds' bound method
        scatter.inputs = ((positions, torch.zeros_like(image_features)), kwargs)
        first = traced.model.language_model.layers[0].input.save()
        ablated = traced.output.logits.save()
    assert torch.equal(first[mask], torch.zeros_like(first[mask]))
    assert not torch.equal(ablated, clean)
    with torch.no_grad():
        assert torch.equal(model(**inputs).logits, clean)  # nothing leaked out of the edited trace


def recording_site(calls: Counter):
    def site(label, fn, *args, **kwargs):
        calls[label] += 1
        return fn(*args, **kwargs)

    return site


def test_the_deepstack_site_fires_once_per_tap_and_each_occurrence_is_read(tiny_checkpoint):
    model, processor = load(tiny_checkpoint("qwen3_vl"))
    text = model.model.language_model
    taps = len(model.config.vision_config.deepstack_visual_indexes)
    assert 0 < taps < model.config.text_config.num_hidden_layers
    inputs = inputs_for(processor, 2)

    calls: Counter = Counter()
    rule = compile_rule(rule_named("qwen3_vl.deepstack"))
    text.forward = rule.build(recording_site(calls)).__get__(text)
    with torch.no_grad():
        model(**inputs)
    assert calls == {"self__deepstack_process_0": taps}
    del text.forward

    install_all(model, rules_for("qwen3_vl"))
    traced = nnsight.NNsight(model)
    mask = image_mask(model, inputs)
    site = traced.model.language_model.source.self__deepstack_process_0
    layers = traced.model.language_model.layers
    with traced.trace(**inputs) as tracer:
        added, outputs, inputs_next = nnsight.save([]), nnsight.save([]), nnsight.save([])
        for k in range(taps):
            outputs.append(layers[k].output.clone().save())  # a copy: 4.x adds the tap to it in place
            for _ in tracer.iter[k]:  # the site's k-th occurrence; the blocks run once each
                added.append(site.inputs[0][2].save())
            inputs_next.append(layers[k + 1].input.save())
    assert len(added) == taps
    for k in range(taps):
        assert added[k].shape == (int(mask.sum()), model.config.text_config.hidden_size)
        assert torch.equal(inputs_next[k][mask], outputs[k][mask] + added[k])
        assert torch.equal(inputs_next[k][~mask], outputs[k][~mask])
    assert not torch.equal(added[0], added[1])


def test_the_qwen_vit_kernel_site_fires_once_per_image(tiny_checkpoint):
    model, processor = load(tiny_checkpoint("qwen3_vl"))
    inputs = inputs_for(processor, 2)
    attention = model.model.visual.blocks[0].attn
    calls: Counter = Counter()
    rule = compile_rule(rule_named("qwen3_vl.vision-attention"))
    attention.forward = rule.build(recording_site(calls)).__get__(attention)
    with torch.no_grad():
        model(**inputs)
    assert calls == {"torch_split_0": 3, "attention_interface_2": 2, "torch_cat_0": 1}
    del attention.forward

    install_all(model, rules_for("qwen3_vl"))
    # nnsight's own .source numbers the per-image call as the release's forward does (one higher before 5.1)
    served = for_installed(rule_named("qwen3_vl.vision-attention")).serve_as
    per_image_label = next((own for own, label in served.items() if label == "attention_interface_2"), "attention_interface_2")
    traced = nnsight.NNsight(model)
    site = traced.model.visual.blocks[0].attn.source
    grid = inputs["image_grid_thw"]
    patches = [int(t * h * w) for t, h, w in grid]
    with traced.trace(**inputs) as tracer:
        queries = site.torch_split_0.inputs[0][0].save()
        per_image = nnsight.save([])
        for _ in tracer.iter[0:2]:
            per_image.append(getattr(site, per_image_label).output[0].save())
        joined = site.torch_cat_0.output.save()
    heads = model.config.vision_config.num_heads
    assert queries.shape == (1, heads, sum(patches), model.config.vision_config.hidden_size // heads)
    assert [o.shape[1] for o in per_image] == patches
    assert torch.equal(torch.cat(list(per_image), dim=1), joined)


def test_an_exception_in_a_rewritten_forward_names_the_transformers_line(tiny_checkpoint):
    model, _ = load(tiny_checkpoint("llava-siglip"))
    install(model.model, compile_rule(rule_named("llava.image-scatter")))
    with pytest.raises(ValueError, match="exactly one of input_ids or inputs_embeds") as raised:
        model.model()
    frame = traceback.extract_tb(raised.value.__traceback__)[-1]
    source = Path(frame.filename)
    assert source.name == "modeling_llava.py" and source.parent.name == "llava"
    assert source.read_text().splitlines()[frame.lineno - 1].strip() == frame.line
    assert frame.line.startswith('raise ValueError("You must specify exactly one of input_ids or inputs_embeds")')
