"""A checkpoint of a family's text model saved alone loads through StandardizedTransformer with every text name,
computes what the plain causal LM computes, and its vision side says why it is absent."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import absent, skip_if_absent
from transformers import AutoModelForCausalLM

from envoys import StandardizedTransformer, Unavailable
from envoys.families import families, family_for
from envoys.testing import NAMES, build_text_checkpoint

TEXT = "What is in the picture ?"


#: The families whose text model transformers can load alone; each has a tiny builder of the same name.
TEXT_FAMILIES = sorted(family.model_type for family in families() if family.text_model_types)


def test_every_such_family_has_a_tiny_checkpoint():
    assert TEXT_FAMILIES and {f for f in TEXT_FAMILIES if absent(f) is None} <= set(NAMES)


@pytest.fixture(scope="module", params=TEXT_FAMILIES)
def text_checkpoint(request, tmp_path_factory):
    """The text model of the family's tiny checkpoint, saved alone."""
    skip_if_absent(request.param)
    return build_text_checkpoint(request.param, tmp_path_factory.mktemp(f"{request.param}-text"))


@pytest.fixture(scope="module")
def model(text_checkpoint):
    return StandardizedTransformer(text_checkpoint, attn_implementation="eager")


def test_it_loads_as_the_causal_lm_with_the_text_names(model, text_checkpoint):
    config = json.loads((text_checkpoint / "config.json").read_text())
    assert model.family.text_only and config["model_type"] in model.family.text_model_types
    assert type(model._module) is AutoModelForCausalLM._model_mapping[type(model.config)]
    assert model.num_layers == model.config.num_hidden_layers and model.hidden_size == config["hidden_size"]
    assert [layer._module for layer in model.layers] == list(model._module.model.layers)
    assert model.embed_tokens._module is model._module.get_input_embeddings()


def test_it_computes_what_the_plain_causal_lm_computes(model, text_checkpoint):
    plain = AutoModelForCausalLM.from_pretrained(text_checkpoint, attn_implementation="eager").eval()
    ids = model.tokenizer(TEXT, return_tensors="pt")
    with model.trace(TEXT):
        embeddings = model.token_embeddings.save()
        first = model.layers[0].layer_input.save()
        normed = model.norm.output.save()
        head_input = model.lm_head.input.save()
        logits = model.logits.save()
    with torch.no_grad():
        expected = plain(**ids).logits
    assert torch.equal(logits, expected)
    # A text model that scales its embeddings before the first block (HyperCLOVAX's MuP embedding_multiplier) does so
    # after the embedding layer, whose output token_embeddings is.
    assert torch.equal(first, embeddings * getattr(model.config, "embedding_multiplier", 1.0))
    assert torch.equal(head_input, normed)  # ``norm`` is the final norm: what the head receives


def test_the_vision_side_says_why_it_is_absent(model):
    for read in (lambda: model.vision.image_features, lambda: model.vision.layers, lambda: model.projector.output):
        with pytest.raises(Unavailable, match=r"the text model of \w+ saved alone: it has no vision tower"):
            read()
    assert model.vision.support() == {}
    assert not [name for name in model.support() if name.startswith("vision.")]
    assert "no vision tower" in repr(model).splitlines()[0]


def test_asking_for_images_is_refused_before_loading(text_checkpoint):
    with pytest.raises(ValueError, match=r"text model saved alone: it has no vision tower, so no image can reach it"):
        StandardizedTransformer(text_checkpoint, task="image-text-to-text")


def test_the_refusal_of_an_unknown_model_type_names_the_text_models():
    with pytest.raises(ValueError, match=r"and their text models saved alone: .*gemma3_text"):
        family_for("no_such_model")


def test_the_text_surface_answers_as_on_the_wrapper(model):
    last = model.num_layers - 1
    with model.trace(TEXT) as tracer:
        ids = model.input_ids.save()
        entering = model.layers_input[last].save()
        model.skip_layer(last)
        final = model.norm.input.save()
        probabilities = model.next_token_probs.save()
        logits = model.logits.save()
        tracer.stop()
    assert torch.equal(ids, model.tokenizer(TEXT, return_tensors="pt")["input_ids"])
    assert torch.equal(final, entering)  # the skipped last block passed its input on
    assert torch.equal(probabilities, logits[:, -1].softmax(-1))
    assert model.num_heads == model.config.get_text_config().num_attention_heads
