"""Loading StandardizedTransformer, and what it says it cannot serve: support() and Unavailable."""

from __future__ import annotations

import re
import shutil

import huggingface_hub.constants
import pytest
import torch
from swap_rules import without_rule

from envoys import StandardizedTransformer, Unavailable
from envoys.testing import chat_prompt, noise_image
from instrument import Rule, installed

IMAGE = [noise_image(32, 32, seed=0)]


def test_a_local_directory_loads_with_its_processor(tiny_checkpoint):
    model = StandardizedTransformer(tiny_checkpoint("llava-siglip"), task="image-text-to-text")
    assert type(model.processor).__name__ == "LlavaProcessor"
    assert model.tokenizer is model.processor.tokenizer
    assert model.config.model_type == "llava"
    assert model.family.model_type == "llava"


def test_weights_load_with_the_first_local_trace_or_at_once_with_dispatch(tiny_checkpoint):
    """As nnsight's default (dispatch=False): a skeleton on the meta device until a local trace needs the weights."""
    path = tiny_checkpoint("llava-siglip")
    model = StandardizedTransformer(path, task="image-text-to-text", attn_implementation="eager")
    assert {p.device.type for p in model._module.parameters()} == {"meta"} and not model.dispatched
    prompt = chat_prompt(model.processor, 1, "What is in the picture?")
    with model.trace(prompt, images=[noise_image(32, 32, seed=0)]):
        features = model.vision.image_features.save()
    assert model.dispatched and all(p.device.type == "cpu" for p in model._module.parameters())
    assert installed(model.model._module) and model.pipeline.model is model._module
    loaded = StandardizedTransformer(path, task="image-text-to-text", attn_implementation="eager", dispatch=True)
    assert loaded.dispatched and all(p.device.type == "cpu" for p in loaded._module.parameters())
    with loaded.trace(prompt, images=[noise_image(32, 32, seed=0)]):
        expected = loaded.vision.image_features.save()
    assert torch.equal(features, expected)


def test_a_folder_without_weights_builds_a_weightless_client(tiny_checkpoint, tmp_path):
    """Config, processor and tokenizer files alone: sizes, the tree, support() and every name, no weight read."""
    source = tiny_checkpoint("qwen3_vl")
    for file in source.iterdir():
        if not file.name.endswith((".safetensors", ".bin", ".index.json")):
            shutil.copy(file, tmp_path / file.name)
    client = StandardizedTransformer(tmp_path, task="image-text-to-text", attn_implementation="eager")
    full = StandardizedTransformer(source, task="image-text-to-text", attn_implementation="eager", dispatch=True)
    assert (client.num_layers, client.hidden_size, client.vision.num_layers) == (
        full.num_layers, full.hidden_size, full.vision.num_layers)
    assert repr(client) == repr(full) and client.support() == full.support()
    assert client.vision.layers[0].self_attn.path == full.vision.layers[0].self_attn.path


def test_a_name_neither_here_nor_on_the_hub_says_both(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # the hub's answer at once, no network
    with pytest.raises(OSError, match=r"'checkpoints/nope' is not a folder here \(.*checkpoints/nope does not exist\) "
                                      r"and the hub did not give a checkpoint of that id"):
        StandardizedTransformer("checkpoints/nope", task="image-text-to-text")


def test_the_model_key_is_nnsight_s_for_the_same_checkpoint(tiny_checkpoint, monkeypatch):
    """remote=True names the deployment nnsight's TransformersModel names: its class and the checkpoint and task.
    The hub canonicalises the id (here, with no network, the id is its own canonical form)."""
    from nnsight import TransformersModel
    from nnsight.modeling import huggingface

    path = str(tiny_checkpoint("llava-siglip"))
    monkeypatch.setitem(huggingface._ID_CACHE, path, path)
    client = StandardizedTransformer(path, task="image-text-to-text")
    assert client.to_model_key() == TransformersModel(path, task="image-text-to-text", dispatch=True).to_model_key()
    assert client.to_model_key().startswith("nnsight.modeling.transformers.TransformersModel:")


def test_an_unsupported_model_type_lists_the_supported_ones(tmp_path):
    from transformers import ShieldGemma2Config

    ShieldGemma2Config().save_pretrained(tmp_path)  # a config alone: the refusal comes before any weights
    with pytest.raises(ValueError, match=r"model_type 'shieldgemma2' is not supported; supported model_types: .*llava"):
        StandardizedTransformer(tmp_path, task="image-text-to-text")


def test_an_unknown_task_is_refused(tiny_checkpoint):
    with pytest.raises(ValueError, match="task must be 'image-text-to-text'"):
        StandardizedTransformer(tiny_checkpoint("llava-siglip"), task="image-classification")


def test_without_a_task_no_image_can_reach_the_model(tiny_checkpoint):
    model = StandardizedTransformer(tiny_checkpoint("llava-siglip"))
    assert model.processor is None and model.tokenizer is not None
    assert model.vision.support() == {}
    assert not [name for name in model.support() if name.startswith("vision.")]
    assert model.support()["layer_output"] is None
    for read in (lambda: model.vision.image_features, lambda: model.vision.layers[0].layer_output,
                 lambda: model.vision.layers[0].self_attn.attention_probabilities):
        with pytest.raises(Unavailable, match="load it with StandardizedTransformer\\(name, task='image-text-to-text'\\)"):
            read()
    with model.trace("hello there"):  # the text model still works
        logits = model.logits.save()
    assert logits.shape[:2] == (1, 2)


def test_unavailable_is_raised_before_anything_runs(tiny_checkpoint):
    model = StandardizedTransformer(tiny_checkpoint("llava-clip"), task="image-text-to-text", attn_implementation="sdpa")
    reason = "exist only inside eager attention, and this model runs 'sdpa': load it with attn_implementation='eager'"
    with pytest.raises(Unavailable, match=r"vision\.layers\[0\]\.self_attn\.attention_probabilities is unavailable: the scores"):
        model.vision.layers[0].self_attn.attention_probabilities  # outside a trace: the reason, not nnsight's error
    assert reason in model.vision.support()["self_attn.attention_probabilities"][0]
    assert set(model.vision.support()["self_attn.attention_scores"]) == set(range(model.vision.num_layers))
    assert reason in model.support()["self_attn.attention_probabilities"][1]
    assert model.support()["self_attn.attention_queries"] is None  # the kernel call is served under sdpa too
    prompt = chat_prompt(model.processor, 1, "hi")
    with model.trace(prompt, images=IMAGE):
        queries = model.layers[0].self_attn.attention_queries.save()
        heads = model.layers[0].self_attn.attention_head_outputs.save()
    assert queries.shape[:2] == (1, model.config.text_config.num_attention_heads)
    assert heads.shape[2] == model.config.text_config.num_attention_heads


def test_a_rule_that_does_not_match_is_a_reason_not_a_crash(tiny_checkpoint, monkeypatch):
    drifted = Rule(
        "llava.image-scatter",
        "transformers.models.llava.modeling_llava:LlavaModel.forward",
        {"inputs_embeds.masked_scatter": ("inputs_embeds_masked_scatter_7",)},
    )
    without_rule(monkeypatch, "llava.image-scatter", drifted)
    model = StandardizedTransformer(tiny_checkpoint("llava-siglip"), task="image-text-to-text")
    reason = model.vision.support()["image_features"]
    assert "rule 'llava.image-scatter'" in reason and "inputs_embeds_masked_scatter_7" in reason
    assert "found ['inputs_embeds_masked_scatter_0']" in reason
    with pytest.raises(Unavailable, match="vision.image_features is unavailable: rule 'llava.image-scatter'"):
        model.vision.image_features
    assert model.vision.support()["tower_output"] is None  # the rest still works
    prompt = chat_prompt(model.processor, 1, "hi")
    with model.trace(prompt, images=IMAGE):
        output = model.vision.tower_output.save()
    assert output.shape[0] == 1


def test_a_model_built_without_the_library_is_untouched(tiny_checkpoint):
    from transformers import AutoModelForImageTextToText

    path = tiny_checkpoint("llava-siglip")
    plain = AutoModelForImageTextToText.from_pretrained(path, attn_implementation="eager")
    model = StandardizedTransformer(path, task="image-text-to-text", attn_implementation="eager", dispatch=True)
    assert all("forward" not in m.__dict__ for m in plain.modules())
    assert "_supports_mm_encoder_outputs" not in plain.__dict__
    inputs = model.processor(text=[chat_prompt(model.processor, 1, "hi")], images=IMAGE, return_tensors="pt")
    with torch.no_grad():
        assert torch.equal(plain(**inputs).logits, model._module(**inputs).logits)


def test_an_attention_no_rule_covers_says_so(tiny_checkpoint, monkeypatch):
    without_rule(monkeypatch, "qwen2.Qwen2Attention")
    model = StandardizedTransformer(tiny_checkpoint("llava-siglip"), task="image-text-to-text")
    reasons = model.support()["self_attn.attention_queries"]
    assert set(reasons) == set(range(model.num_layers))
    assert reasons[0].startswith("no rewrite rule exposes attention_interface_1 in Qwen2Attention.forward")
    assert model.support()["vision.self_attn.attention_queries"] is None  # the tower's attention keeps its rule
    with pytest.raises(Unavailable, match=r"layers\[1\]\.self_attn\.attention_probabilities is unavailable: no rewrite rule"):
        model.layers[1].self_attn.attention_probabilities


def test_values_still_work_after_a_user_opens_nnsights_source(tiny_checkpoint):
    model = StandardizedTransformer(tiny_checkpoint("llava-siglip"), task="image-text-to-text", attn_implementation="eager")
    prompt = chat_prompt(model.processor, 1, "hi")
    attention = model.layers[0].self_attn
    with model.trace(prompt, images=IMAGE):
        features = model.vision.image_features.save()
        probabilities = attention.attention_probabilities.save()
    listing = str(model.model.source) + str(attention.source)  # nnsight now runs its own instrumented bodies
    assert "inputs_embeds_masked_scatter_0" in listing
    # nnsight's label for the kernel call (attention_interface_1; _2 before transformers 5.1, which assigns the
    # kernel twice first), off its own listing
    kernel_call = re.search(r"(attention_interface_\d+)\s+->\s+\d+\s+attn_output, attn_weights = attention_interface\(",
                            listing).group(1)
    with model.trace(prompt, images=IMAGE):
        again = model.vision.image_features.save()
        queries = attention.attention_queries.save()
        scores = attention.attention_scores.save()
        through_source = getattr(attention.source, kernel_call).source.nn_functional_softmax_0.output.clone().save()
        attention.attention_probabilities[:] = 0
        edited = attention.attention_head_outputs.save()
    assert torch.equal(again, features)
    assert torch.equal(scores.softmax(-1), probabilities)
    assert torch.equal(through_source, probabilities)
    assert queries.shape[-2] == probabilities.shape[-1]
    assert torch.equal(edited, torch.zeros_like(edited))
