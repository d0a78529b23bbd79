"""BLIP-2 and InstructBLIP: what is particular to them, beyond the vision contracts (tests/test_vision_contracts.py).

The root scatters (no inner model): BLIP-2's ``inputs_embeds.to(device).masked_scatter(...)``, nnsight's
``masked_scatter_0``, InstructBLIP's ``inputs_embeds_masked_scatter_0``. The projector is the language projection; it
reads the Q-Former's output at its queries (InstructBLIP's Q-Former also reads the prompt), and the Q-Former
cross-attends ``tower_output``. OPT's blocks (BLIP-2's) run their MLP inline and add learned positions before the
first block. A prompt takes one image; an encoder-decoder text model (Flan-T5) is refused before anything loads.
The tiny checkpoints (envoys/testing/blip_2.py): 32x32 images of 8 px patches, CLS first (17 rows), 4 queries, 4 image
tokens an image, text width 32.
"""

from __future__ import annotations

import json

import pytest
import torch
from rounding import assert_batch_close
from transformers import AutoModelForImageTextToText, Blip2Config, InstructBlipConfig, T5Config

from envoys import StandardizedTransformer, Unavailable
from envoys.census import SCATTERS, SUPPORTED, census, entry
from envoys.testing import chat_prompt, image_prompts, noise_image
from envoys.testing.blip_2 import QUERY_TOKENS
from instrument import installed

FAMILIES = ["blip-2", "instructblip"]
IMAGES = [noise_image(32, 32, seed=3), noise_image(64, 48, seed=4)]
#: The image's call in the root's forward, as nnsight labels it.
SITES = {"blip-2": "masked_scatter_0", "instructblip": "inputs_embeds_masked_scatter_0"}


@pytest.fixture(scope="module", params=FAMILIES)
def model(request, tiny_checkpoint):
    return StandardizedTransformer(tiny_checkpoint(request.param), task="image-text-to-text", device="cpu",
                                   attn_implementation="eager")


def prompts(model, count=2):
    return image_prompts(model.processor, count, "What is in the picture?")


def test_the_root_is_the_host_and_its_scatter_is_labelled_as_nnsight_labels_it(model):
    name = model.config.model_type
    assert model.family.root_scatter == SITES[name]
    assert [site for rule in installed(model._module).values() for site in rule.site_names] == [SITES[name]]


def test_the_projector_reads_the_q_formers_queries_which_cross_attend_the_tower_output(model):
    with model.trace(prompts(model), images=IMAGES) as tracer:
        tower = model.vision.tower_output.save()
        qformer_inputs = model.qformer.inputs.save()
        qformer = model.qformer.output.save()
        received = model.projector.input.save()
        projected = model.projector.output.save()
        features = model.vision.image_features.save()
        tracer.stop()
    _, kwargs = qformer_inputs
    assert torch.equal(kwargs["encoder_hidden_states"], tower)  # every row of it, the CLS included
    assert tower.shape == (2, 17, model.vision.vision_hidden_size)
    queries = qformer.last_hidden_state[:, :QUERY_TOKENS]  # InstructBLIP's instruction rows follow the queries
    assert torch.equal(received, queries) and received.shape == (2, QUERY_TOKENS, model.config.qformer_config.hidden_size)
    if model.config.model_type == "blip-2":  # BLIP-2's Q-Former runs on the queries alone
        assert torch.equal(received, qformer.last_hidden_state)
    assert torch.equal(projected.reshape(-1, model.hidden_size), features)


def test_instructblips_q_former_reads_the_prompt_beside_the_queries(tiny_checkpoint):
    model = StandardizedTransformer(tiny_checkpoint("instructblip"), task="image-text-to-text", device="cpu",
                                    attn_implementation="eager")
    given = model.processor(text=prompts(model, 1), images=IMAGES[:1], return_tensors="pt")
    with model.trace(prompts(model, 1), images=IMAGES[:1]) as tracer:
        qformer = model.qformer.inputs.save()
        qformer_output = model.qformer.output.save()
        tracer.stop()
    _, kwargs = qformer
    assert torch.equal(kwargs["input_ids"], given["qformer_input_ids"])
    assert qformer_output.last_hidden_state.shape[1] == QUERY_TOKENS + given["qformer_input_ids"].shape[1]


def test_an_edit_of_one_query_changes_its_image_token_alone(model):
    query = 2
    with model.trace(prompts(model, 1), images=IMAGES[:1]) as tracer:
        clean = model.layers[0].input.save()
        tracer.stop()
    with model.trace(prompts(model, 1), images=IMAGES[:1]) as tracer:
        mask = model.vision.image_token_mask.save()
        model.projector.input[0, query] = 0
        edited = model.layers[0].input.save()
        tracer.stop()
    changed = (edited != clean).any(-1)
    assert torch.equal(changed, mask & (mask.cumsum(-1) == query + 1))  # the image token of that query, only


def test_opts_blocks_say_why_mlp_output_is_unavailable_and_fc2_is_what_they_add(tiny_checkpoint):
    model = StandardizedTransformer(tiny_checkpoint("blip-2"), task="image-text-to-text", device="cpu",
                                    attn_implementation="eager")
    with pytest.raises(Unavailable, match=r"layers\[0\]\.mlp_output is unavailable: OPT's block has no MLP module"):
        model.layers[0].mlp_output
    with model.trace(prompts(model, 1), images=IMAGES[:1]) as tracer:
        entering = model.layers[0].layer_input.save()
        normed = model.layers[0].input_layernorm.output.save()
        received = model.layers[0].self_attn.inputs.save()
        attention = model.layers[0].attention_output.save()
        added = model.layers[0].fc2.output.save()
        leaving = model.layers[0].layer_output.save()
        tracer.stop()
    assert torch.equal(received[1]["hidden_states"], normed)  # self_attn_layer_norm is the input_layernorm
    assert added.shape == (leaving.shape[0] * leaving.shape[1], model.hidden_size)
    assert torch.equal(leaving, (entering + attention) + added.view(leaving.shape))


@pytest.mark.batch_shapes
def test_a_prompt_takes_one_image_and_more_are_refused_before_the_model_runs(model):
    one = chat_prompt(model.processor, 1, "What is in the picture?")
    with pytest.raises(ValueError, match=r"2 images for 1 prompt\(s\): an? .* prompt takes 1 image"):
        with model.trace(one, images=IMAGES):
            model.logits.save()
    if model.config.model_type == "blip-2":  # transformers alone scatters the first image's rows and drops the other
        plain = AutoModelForImageTextToText.from_pretrained(model._module.name_or_path).eval()
        inputs = model.processor(text=[one], images=IMAGES, return_tensors="pt")
        alone = model.processor(text=[one], images=IMAGES[:1], return_tensors="pt")
        with torch.no_grad():  # the tower ran two images, then one
            assert_batch_close(plain(**inputs).logits, plain(**alone).logits)


@pytest.mark.parametrize("config_class", [Blip2Config, InstructBlipConfig])
def test_a_checkpoint_on_an_encoder_decoder_text_model_is_refused_before_it_loads(config_class, tmp_path):
    t5 = T5Config(vocab_size=64, d_model=32, d_kv=16, d_ff=64, num_layers=1, num_heads=2)
    config_class(text_config=t5.to_dict()).save_pretrained(tmp_path)  # a config and no weights: nothing could load
    assert json.loads((tmp_path / "config.json").read_text())["text_config"]["model_type"] == "t5"
    with pytest.raises(ValueError, match=r"cannot be served: its text model is t5, an encoder-decoder"):
        StandardizedTransformer(tmp_path, task="image-text-to-text")


def test_the_patch_grid_drops_the_cls_and_the_queries_are_on_no_grid(model):
    with model.trace(prompts(model), images=IMAGES) as tracer:
        tower = model.vision.tower_output.save()
        features = model.vision.image_features.save()
        tracer.stop()
    side = model.vision.image_size // model.vision.patch_size
    for image in range(2):
        grid = model.vision.patch_grid(tower, image=image)
        assert torch.equal(grid, tower[image, 1:].reshape(side, side, -1))
    with pytest.raises(Unavailable, match=f"the Q-Former's {QUERY_TOKENS} learned queries"):
        model.vision.token_grid(features, image=0)


def test_the_census_names_the_scatter_on_a_computed_tensor_as_nnsight_does():
    """BLIP-2's scatter is on a tensor its forward computes first: its census line without its family module names
    the call as nnsight's ``.source`` does (no model_type left unserved scatters so)."""
    assert {line.model_type: line.status for line in census()}["blip-2"] == SUPPORTED
    unserved = entry("blip-2", "Blip2ForConditionalGeneration", (), {})
    assert unserved.status == SCATTERS and unserved.reason.startswith("Blip2Model.forward calls masked_scatter (1)")
