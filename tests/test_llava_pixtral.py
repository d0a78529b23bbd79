"""StandardizedTransformer on a tiny Llava-Pixtral checkpoint (model_type llava, a Pixtral tower): exact.

Every expected number comes from outside the code under test: the stock
processor's ``pixel_values`` and ``image_sizes``, the config's patch size, the
modules' own weights, or a recomputation from other values read in the same
trace. Images (`pixtral_inputs`): 32x32 (4x4 patches of 8 px) and 48 high x 64
wide (6x8 patches); there is no merge, so each patch is one image token.

The spec's contracts (the scatter and the mask, the packed stream and every
block's identity, the block-diagonal pattern, what the projector reads,
ablation, sizes, support, the text-only load, generation, outputs against the
plain model) run on this checkpoint in test_vision_contracts.py; this file
holds what is particular to a Pixtral tower under LLaVA, and declares on it the
suites of the Pixtral tower and of its grids (pixtral_inputs.py, packed_grids.py).
"""

from __future__ import annotations

import pytest
import torch
from packed_grids import PixtralGridSuite
from pixtral_inputs import ONE, TWO, PixtralTowerSuite, bounds, patch_counts, processed, prompt
from transformers import CLIPVisionConfig, LlavaConfig, PixtralVisionConfig

from envoys import Unavailable
from envoys.families import llava
from envoys.towers.pixtral import PIXTRAL_RENAME

#: The Pixtral tower's native names under the standard ones, as the specification gives them.
PIXTRAL_NAMES = {
    "transformer.layers": "layers", "patch_conv": "patch_embed", "attention": "self_attn", "feed_forward": "mlp",
    "attention_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
}


CHECKPOINT = "llava-pixtral"


# -- loading and names ---------------------------------------------------------------------------------


def test_loads_with_its_stock_processor_and_the_pixtral_tower_and_envoys(model):
    assert type(model._module).__name__ == "LlavaForConditionalGeneration"
    assert type(model._module.model.vision_tower).__name__ == "PixtralVisionModel"
    assert type(model.processor).__name__ == "PixtralProcessor"
    assert type(model.processor.image_processor).__name__ in ("PixtralImageProcessor", "PixtralImageProcessorFast")  # some releases default to fast
    assert model.family.model_type == "llava"
    assert type(model.vision).__name__ == "PixtralVision"
    assert type(model.vision.layers[0].self_attn).__name__ == "PixtralVisionAttention"
    assert type(model.layers[0].self_attn._module).__name__ == "MistralAttention"


def test_the_pixtral_names_apply_only_to_a_checkpoint_with_a_pixtral_tower():
    def config(vision):
        return LlavaConfig(vision_config=vision)

    pixtral = llava.FAMILY.rename_for(config(PixtralVisionConfig()))
    clip = llava.FAMILY.rename_for(config(CLIPVisionConfig()))
    assert {key: pixtral[key] for key in PIXTRAL_NAMES} == PIXTRAL_NAMES
    assert "post_layernorm" not in pixtral
    assert not set(PIXTRAL_NAMES) & set(clip)
    assert llava.FAMILY.rename_for(config({"model_type": "siglip_vision_model"}))["post_layernorm"] == "norm"
    assert {key: PIXTRAL_RENAME[key] for key in PIXTRAL_NAMES} == PIXTRAL_NAMES  # the tower's one spelling, whatever the host
    names = {cls.__name__: envoy.__name__ for cls, envoy in llava.ENVOYS.items()}
    assert {name: names[name] for name in ("PixtralVisionModel", "PixtralAttentionLayer", "PixtralAttention",
                                           "PixtralMLP", "SiglipVisionModel", "CLIPVisionModel")} == {
        "PixtralVisionModel": "PixtralVision", "PixtralAttentionLayer": "PackedVisionLayer",
        "PixtralAttention": "PixtralVisionAttention", "PixtralMLP": "PackedVisionMlp",
        "SiglipVisionModel": "Vision", "CLIPVisionModel": "Vision",
    }



# -- the packed row --------------------------------------------------------------------------------------


@pytest.mark.parametrize("images", [ONE, TWO], ids=["one-image", "two-images"])
def test_the_attention_interior_is_whole_over_the_packed_row(model, images):
    attention = model.vision.layers[0].self_attn
    with model.trace(prompt(model, images), images=images):
        queries = attention.attention_queries.save()
        heads = attention.attention_head_outputs.save()
    total = sum(patch_counts(model, images))
    head_count, head_dim = attention._module.num_heads, attention._module.head_dim
    assert queries.shape == (1, head_count, total, head_dim)
    assert heads.shape == (1, total, head_count, head_dim)


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


def test_the_projector_is_two_linears_around_a_gelu_on_the_packed_row(model):
    projector = model._module.model.multi_modal_projector
    with model.trace(prompt(model, TWO), images=TWO):
        last = model.vision.layers[-1].layer_output.save()
        projected = model.projector.output.save()
    assert torch.equal(projected, projector.linear_2(projector.act(projector.linear_1(last))))


# -- sizes and support ---------------------------------------------------------------------------------------


def test_sizes_the_tower_takes_any_resolution(model):
    vision = model.vision
    assert model.processor.image_processor.patch_size["height"] == vision.patch_size == model.processor.patch_size  # no merge
    reason = (r"PixtralVisionModel takes images of any resolution.*longest side the processor keeps.*image_sizes.*"
              r"\(height // patch_size\) \* \(width // patch_size\)")
    with pytest.raises(Unavailable, match=reason):
        vision.image_size


def test_the_towers_support_has_exactly_the_standard_rows(model):
    assert set(model.vision.support()) == {
        "image_token_mask", "image_features", "patch_embeddings", "tower_output", "layer_input", "attention_output",
        "mlp_output", "layer_output", "self_attn.attention_output", "self_attn.attention_queries",
        "self_attn.attention_keys", "self_attn.attention_values", "self_attn.attention_scores",
        "self_attn.attention_probabilities", "self_attn.attention_head_outputs", "mlp.mlp_output",
    }


# -- the suites of the Pixtral tower (pixtral_inputs.py) and of its grids (packed_grids.py) ----------------------


class TestPixtralTower(PixtralTowerSuite):
    """Llava-Pixtral: LLaVA's projector reads the hidden state at vision_feature_layer, not the tower's output."""

    checkpoint = "llava-pixtral"


class TestGrids(PixtralGridSuite):
    """Llava-Pixtral: no merge, so each image token is the projection of one patch."""

    checkpoint = "llava-pixtral"
