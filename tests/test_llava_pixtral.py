"""StandardizedTransformer on a tiny Llava-Pixtral checkpoint (model_type llava, a Pixtral tower): exact.

Every expected number comes from outside the code under test: the stock
processor's ``pixel_values`` and ``image_sizes``, the config's patch size, the
modules' own weights, or a recomputation from other values read in the same
trace. Images (`pixtral_inputs`): 32x32 (4x4 patches of 8 px) and 48 high x 64
wide (6x8 patches); there is no merge, so each patch is one image token.
"""

from __future__ import annotations

import re

import nnsight
import pytest
import torch
from pixtral_inputs import ONE, TWO, bounds, patch_counts, processed, prompt
from transformers import AutoModelForImageTextToText, CLIPVisionConfig, LlavaConfig, PixtralVisionConfig

from envoys import StandardizedTransformer, Unavailable
from instrument.show import main as show

#: The Pixtral tower's native names under the standard ones, as the specification gives them.
PIXTRAL_NAMES = {
    "transformer.layers": "layers", "patch_conv": "patch_embed", "attention": "self_attn", "feed_forward": "mlp",
    "attention_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
}


@pytest.fixture(scope="module")
def model(tiny_checkpoint):
    return StandardizedTransformer(
        tiny_checkpoint("llava-pixtral"), task="image-text-to-text", device="cpu", attn_implementation="eager"
    )


@pytest.fixture(scope="module")
def plain(model):
    """The same checkpoint loaded by transformers alone."""
    return AutoModelForImageTextToText.from_pretrained(model._module.name_or_path, attn_implementation="eager").eval()


# -- loading and names ---------------------------------------------------------------------------------


def test_loads_with_its_stock_processor_and_the_standard_names_reach_the_native_modules(model):
    native = model._module.model
    tower, block = native.vision_tower, native.vision_tower.transformer.layers[0]
    assert type(model._module).__name__ == "LlavaForConditionalGeneration"
    assert type(tower).__name__ == "PixtralVisionModel"
    assert type(model.processor).__name__ == "PixtralProcessor"
    assert type(model.processor.image_processor).__name__ in ("PixtralImageProcessor", "PixtralImageProcessorFast")  # some releases default to fast
    assert model.family.model_type == "llava"
    assert model.vision._module is tower and model.projector._module is native.multi_modal_projector
    assert model.vision.patch_embed._module is tower.patch_conv
    assert [layer._module for layer in model.vision.layers] == list(tower.transformer.layers)
    first = model.vision.layers[0]
    assert first.self_attn._module is block.attention and first.mlp._module is block.feed_forward
    assert first.input_layernorm._module is block.attention_norm
    assert first.post_attention_layernorm._module is block.ffn_norm
    assert first.self_attn.o_proj._module is block.attention.o_proj
    assert type(model.vision).__name__ == "PixtralVision"
    assert type(first.self_attn).__name__ == "PixtralVisionAttention"
    text = native.language_model
    assert [layer._module for layer in model.layers] == list(text.layers)
    assert model.embed_tokens._module is text.embed_tokens and model.norm._module is text.norm
    assert type(model.layers[0].self_attn._module).__name__ == "MistralAttention"


def test_the_pixtral_names_apply_only_to_a_checkpoint_with_a_pixtral_tower():
    from envoys.families import llava, mistral3

    def config(vision):
        return LlavaConfig(vision_config=vision)

    pixtral = llava.FAMILY.rename_for(config(PixtralVisionConfig()))
    clip = llava.FAMILY.rename_for(config(CLIPVisionConfig()))
    assert {key: pixtral[key] for key in PIXTRAL_NAMES} == PIXTRAL_NAMES
    assert "post_layernorm" not in pixtral
    assert not set(PIXTRAL_NAMES) & set(clip)
    assert llava.FAMILY.rename_for(config({"model_type": "siglip_vision_model"}))["post_layernorm"] == "norm"
    assert {key: mistral3.RENAME[key] for key in PIXTRAL_NAMES} == PIXTRAL_NAMES  # one spelling for both families
    names = {cls.__name__: envoy.__name__ for cls, envoy in llava.ENVOYS.items()}
    assert {name: names[name] for name in ("PixtralVisionModel", "PixtralAttentionLayer", "PixtralAttention",
                                           "PixtralMLP", "SiglipVisionModel", "CLIPVisionModel")} == {
        "PixtralVisionModel": "PixtralVision", "PixtralAttentionLayer": "VisionLayer",
        "PixtralAttention": "PixtralVisionAttention", "PixtralMLP": "VisionMlp",
        "SiglipVisionModel": "Vision", "CLIPVisionModel": "Vision",
    }


def test_outputs_outside_a_trace_are_the_plain_models(model, plain):
    inputs = processed(model, TWO)
    with torch.no_grad():
        assert torch.equal(model._module(**inputs).logits, plain(**inputs).logits)


def test_show_lists_the_pixtral_attention_among_llavas_forwards(capsys):
    assert show(["llava"]) == 0
    out = capsys.readouterr().out
    rules = [line.split(":")[0] for line in out.splitlines() if line.startswith("# rule ")]
    assert rules[0] == "# rule llava.image-scatter"
    pixtral = {"# rule mistral.MistralAttention", "# rule pixtral.eager-attention", "# rule pixtral.PixtralAttention"}
    assert pixtral <= set(rules)
    for site in ("inputs_embeds_masked_scatter_0", "attention_interface_1", "nn_functional_softmax_0"):
        assert re.search(rf"^{site} +-> ", out, re.MULTILINE), site


# -- the packed row --------------------------------------------------------------------------------------


@pytest.mark.parametrize("images", [ONE, TWO], ids=["one-image", "two-images"])
def test_the_scatter_equality_and_the_packed_shapes(model, images):
    attention = model.vision.layers[0].self_attn
    with model.trace(prompt(model, images), images=images):
        mask = model.vision.image_token_mask.save()
        patches = model.vision.patch_embeddings.save()
        block_input = model.vision.layers[0].layer_input.save()
        queries = attention.attention_queries.save()
        probabilities = attention.attention_probabilities.save()
        heads = attention.attention_head_outputs.save()
        last = model.vision.layers[-1].layer_output.save()
        tower = model.vision.tower_output.save()
        received = model.projector.input.save()
        features = model.vision.image_features.save()
        first = model.layers[0].input.save()
    total = sum(patch_counts(model, images))
    ids = processed(model, images)["input_ids"]
    width = model._module.model.vision_tower.patch_conv.out_channels
    head_count, head_dim = attention._module.num_heads, attention._module.head_dim
    assert patches.shape == block_input.shape == last.shape == tower.shape == received.shape == (1, total, width)
    assert queries.shape == (1, head_count, total, head_dim)
    assert probabilities.shape == (1, head_count, total, total)
    assert heads.shape == (1, total, head_count, head_dim)
    assert torch.equal(mask, ids == model.config.image_token_id)
    assert int(mask.sum()) == total == features.shape[0]  # one image token per patch: no merge
    assert features.shape == (total, model.hidden_size)
    assert torch.equal(first[mask], features)


def test_the_tower_gets_the_processors_image_sizes(model):
    inputs = processed(model, TWO)
    with model.trace(prompt(model, TWO), images=TWO):
        received = model.vision.inputs.save()
    args, kwargs = received
    assert torch.equal(args[0], inputs["pixel_values"])
    assert torch.equal(kwargs["image_sizes"], inputs["image_sizes"])


def test_writing_patch_embeddings_reaches_the_first_block(model):
    text = prompt(model, TWO)
    vision = model.vision
    total = sum(patch_counts(model, TWO))
    with model.trace(text, images=TWO):
        clean = vision.layers[0].layer_input.save()
    with model.trace(text, images=TWO):
        vision.patch_embeddings = torch.zeros(1, total, vision.vision_hidden_size)
        assigned = vision.layers[0].layer_input.save()
    assert torch.equal(assigned, torch.zeros_like(clean)) and not torch.equal(clean, assigned)
    refused = rf"patch_embeddings takes a tensor of shape \(1, {total}, 32\).*got \(2, 32, 32\)"
    with pytest.raises(ValueError, match=refused):
        with model.trace(text, images=TWO):
            vision.patch_embeddings = torch.zeros(2, 32, 32)


def test_attention_is_one_call_under_a_block_diagonal_mask(model):
    attention = model.vision.layers[1].self_attn
    with model.trace(prompt(model, TWO), images=TWO):
        queries = attention.attention_queries.save()
        keys = attention.attention_keys.save()
        values = attention.attention_values.save()
        scores = attention.attention_scores.save()
        probabilities = attention.attention_probabilities.save()
        heads = attention.attention_head_outputs.save()
        projected_in = attention.o_proj.input.save()
    spans = bounds(patch_counts(model, TWO))
    total = spans[-1][1]
    assert probabilities.shape == (1, attention._module.num_heads, total, total)
    for i, (a, b) in enumerate(spans):
        for j, (c, d) in enumerate(spans):
            block = probabilities[..., a:b, c:d]
            if i == j:
                assert bool((block > 0).all())
                assert torch.allclose(block.sum(-1), torch.ones(block.shape[:-1]))
            else:
                assert torch.equal(block, torch.zeros_like(block))  # exactly zero between images
    assert torch.allclose(probabilities.sum(-1), torch.ones(probabilities.shape[:-1]))
    assert torch.equal(scores.softmax(-1), probabilities)
    expected_scores = queries @ keys.transpose(-1, -2) * attention._module.scaling
    for a, b in spans:
        assert torch.equal(scores[..., a:b, a:b], expected_scores[..., a:b, a:b])
    assert torch.equal(probabilities @ values, heads.transpose(1, 2))
    assert torch.equal(heads.reshape(1, total, -1), projected_in)


# -- the projector -----------------------------------------------------------------------------------------


def test_what_the_projector_receives(model):
    projector = model._module.model.multi_modal_projector
    with model.trace(prompt(model, TWO), images=TWO):
        last = model.vision.layers[-1].layer_output.save()
        tower = model.vision.tower_output.save()
        received = model.projector.input.save()
        projected = model.projector.output.save()
        features = model.vision.image_features.save()
    assert torch.equal(tower, last)  # no final norm
    # the last block (vision_feature_layer -1), every patch (strategy "full"), leading 1 kept
    assert torch.equal(received, last)
    assert torch.equal(projected, projector.linear_2(projector.act(projector.linear_1(last))))
    # the host splits the row per image by image_sizes and concatenates it back: one feature per patch, in order
    assert torch.equal(features, projected[0])


# -- ablation, generation ------------------------------------------------------------------------------------


def test_generation_runs_the_tower_once_on_step_zero(model):
    text = prompt(model, ONE)
    steps = 3
    with model.generate(text, images=ONE, max_new_tokens=steps, min_new_tokens=steps, do_sample=False) as tracer:
        masks, features = nnsight.save([]), nnsight.save([])
        for step in tracer.iter[:]:
            masks.append(model.vision.image_token_mask.save())
            if step == 0:
                features.append(model.vision.image_features.save())
    prompt_length = processed(model, ONE)["input_ids"].shape[1]
    total = sum(patch_counts(model, ONE))
    assert [tuple(m.shape) for m in masks] == [(1, prompt_length)] + [(1, 1)] * (steps - 1)
    assert int(masks[0].sum()) == total and not any(m.any() for m in masks[1:])
    assert features[0].shape == (total, model.hidden_size)


@pytest.mark.parametrize("images", [ONE, TWO], ids=["one-image", "two-images"])
def test_generation_output_is_the_plain_models(model, plain, images):
    inputs = processed(model, images)
    expected = plain.generate(**inputs, max_new_tokens=4, min_new_tokens=4, do_sample=False)
    with model.generate(prompt(model, images), images=images, max_new_tokens=4, min_new_tokens=4,
                        do_sample=False) as tracer:
        ids = tracer.result.save()
    assert torch.equal(ids, expected)


# -- sizes and support ---------------------------------------------------------------------------------------


def test_sizes(model):
    tower = model._module.model.vision_tower
    block = tower.transformer.layers[0]
    vision = model.vision
    assert vision.num_layers == len(tower.transformer.layers)
    assert vision.vision_hidden_size == tower.patch_conv.out_channels
    assert (vision.num_heads, vision.head_dim) == (block.attention.num_heads, block.attention.head_dim)
    assert vision.intermediate_size == block.feed_forward.gate_proj.out_features
    assert vision.patch_size == tower.patch_conv.kernel_size[0] == model.processor.patch_size
    assert model.processor.image_processor.patch_size["height"] == vision.patch_size  # no merge
    reason = (r"PixtralVisionModel takes images of any resolution.*longest side the processor keeps.*image_sizes.*"
              r"\(height // patch_size\) \* \(width // patch_size\)")
    with pytest.raises(Unavailable, match=reason):
        vision.image_size
    text = model._module.model.language_model
    assert (model.num_layers, model.hidden_size) == (len(text.layers), text.embed_tokens.embedding_dim)


def test_support_rows(model):
    support = model.support()
    for name in ("logits", "layer_input", "attention_output", "mlp_output", "layer_output",
                 "self_attn.attention_queries", "self_attn.attention_probabilities", "self_attn.attention_head_outputs",
                 "vision.image_token_mask", "vision.image_features", "vision.patch_embeddings", "vision.tower_output",
                 "vision.layer_input", "vision.attention_output", "vision.mlp_output", "vision.layer_output",
                 "vision.self_attn.attention_queries", "vision.self_attn.attention_keys",
                 "vision.self_attn.attention_values", "vision.self_attn.attention_scores",
                 "vision.self_attn.attention_probabilities", "vision.self_attn.attention_head_outputs"):
        assert support[name] is None, name
    tower = model.vision.support()
    assert set(tower) == {
        "image_token_mask", "image_features", "patch_embeddings", "tower_output", "layer_input", "attention_output",
        "mlp_output", "layer_output", "self_attn.attention_output", "self_attn.attention_queries",
        "self_attn.attention_keys", "self_attn.attention_values", "self_attn.attention_scores",
        "self_attn.attention_probabilities", "self_attn.attention_head_outputs", "mlp.mlp_output",
    }
    assert all(reason is None for reason in tower.values())  # every value the tower has; image_size is a size
    block_values = {k for k in tower if k.startswith(("layer_", "attention_", "mlp_", "self_attn.", "mlp."))}
    assert set(model.vision.support(layer=0)) == block_values
