"""StandardizedTransformer on a tiny Aria checkpoint: padded square images, a cross-attention projector, MoE text blocks.

What is particular to Aria (the spec's contracts run on it in
test_vision_contracts.py): the projector turns every image into the query
count its config maps the image's patch count to, attending to the real
patches only; the tower masks the padded patches as keys; each text block's
MLP is a sparse mixture of experts whose output, the routed experts' plus the
shared experts', is ``mlp_output``. Expected numbers come from the stock
processor's outputs (``pixel_values``, ``pixel_mask``, the prompt's image
tokens), the config and the modules' own attributes, never from the code
under test.
"""

from __future__ import annotations

import nnsight
import pytest
import torch
from family_inputs import prompt

from envoys import Unavailable
from envoys.testing import noise_image

#: 32x32 (its whole 7x7 grid real) and 64 wide x 48 high (980 x 735 on the 980 square: 6 of 7 patch rows real).
IMAGES = [noise_image(32, 32, seed=0), noise_image(64, 48, seed=1)]


CHECKPOINT = "aria"


def processed(model, images) -> dict:
    return model.processor(text=[prompt(model, images)], images=images, return_tensors="pt")


def real_patches(model, images) -> torch.Tensor:
    """Which patches of each image's row are real, ``[images, patches]`` bool: those holding any real pixel of the
    processor's ``pixel_mask``."""
    pixels = processed(model, images)["pixel_mask"]
    side = model.config.vision_config.patch_size
    return pixels.unfold(1, side, side).unfold(2, side, side).flatten(-2).any(-1).flatten(1)


def test_the_text_blocks_mlp_is_the_moe_layer(model):
    assert type(model.layers[0].mlp._module).__name__ == "AriaTextMoELayer"


def test_the_projector_gives_its_query_count_for_the_patch_count(model):
    inputs = processed(model, IMAGES)
    side = inputs["pixel_values"].shape[-1] // model.config.vision_config.patch_size
    queries = model.config.projector_patch_to_query_dict[side * side]
    assert (side * side, queries) == (49, 4)  # the builder's documented 7x7 grid and 4 queries
    assert real_patches(model, IMAGES).sum(1).tolist() == [49, 42]  # two images of different real sizes
    with model.trace(prompt(model, IMAGES), images=IMAGES) as tracer:
        mask = model.vision.image_token_mask.save()
        received = model.projector.input.save()
        projected = model.projector.output.save()
        features = model.vision.image_features.save()
        tracer.stop()
    assert model.vision.queries == queries
    assert received.shape == (2, side * side, model.vision.vision_hidden_size)
    assert projected.shape == (2, queries, model.hidden_size)
    assert int(mask.sum()) == 2 * queries == int((inputs["input_ids"] == model.config.image_token_id).sum())
    assert torch.equal(features, projected.reshape(2 * queries, model.hidden_size))


def test_padded_patches_are_masked_keys_in_the_tower_and_the_projector(model):
    real = real_patches(model, IMAGES)
    padded, kept = int(torch.nonzero(~real[1])[0]), int(torch.nonzero(real[1])[0])
    text = prompt(model, IMAGES)
    with model.trace(text, images=IMAGES) as tracer:
        patterns = nnsight.save([block.self_attn.attention_probabilities for block in model.vision.layers])
        clean = model.projector.output.save()
        tracer.stop()
    for index, pattern in enumerate(patterns):
        keys = real[:, None, None, :].expand_as(pattern)
        assert bool((pattern[keys] > 0).all()), index
        assert torch.equal(pattern[~keys], torch.zeros_like(pattern[~keys])), index
    with model.trace(text, images=IMAGES) as tracer:
        model.projector.input[1, padded] = 100.0
        on_padding = model.projector.output.save()
        tracer.stop()
    with model.trace(text, images=IMAGES) as tracer:
        model.projector.input[1, kept] = 100.0
        on_real = model.projector.output.save()
        tracer.stop()
    assert torch.equal(on_padding, clean)
    assert torch.equal(on_real[0], clean[0]) and not torch.equal(on_real[1], clean[1])


def test_the_moe_block_adds_its_experts_and_shared_experts(model):
    """``mlp_output`` is the sparse block's output: the routed experts' sum plus the shared experts', and the block
    identity holds with it; each token is routed to ``moe_topk`` of ``moe_num_experts`` experts."""
    text_config = model.config.get_text_config()
    with model.trace(prompt(model, IMAGES), images=IMAGES) as tracer:
        reads = nnsight.save([])
        for block in model.layers:
            reads.append(nnsight.save([block.layer_input, block.attention_output, block.mlp.router.output,
                                       block.mlp.experts.output, block.mlp.shared_experts.output, block.mlp_output,
                                       block.layer_output]))
        tracer.stop()
    for index, (layer_input, attention, routed, experts, shared, mlp, output) in enumerate(reads):
        logits, weights, chosen = routed
        tokens = layer_input.shape[0] * layer_input.shape[1]
        assert logits.shape == (tokens, text_config.moe_num_experts), index
        assert chosen.shape == weights.shape == (tokens, text_config.moe_topk), index
        torch.testing.assert_close(weights.sum(-1), torch.ones(tokens), rtol=0, atol=1e-6)
        assert torch.equal(mlp, experts.view(mlp.shape) + shared), index
        assert torch.equal(layer_input + attention + mlp, output), index


def test_an_ablated_shared_expert_leaves_the_routed_experts_as_the_mlp_output(model):
    with model.trace(prompt(model, IMAGES), images=IMAGES) as tracer:
        block = model.layers[0]
        experts = block.mlp.experts.output.save()
        block.mlp.shared_experts.output[:] = 0
        mlp = block.mlp_output.save()
        tracer.stop()
    assert torch.equal(mlp, experts.view(mlp.shape))


def test_the_patch_grid_is_each_images_real_patches_and_the_queries_have_none(model):
    real = real_patches(model, IMAGES)
    with model.trace(prompt(model, IMAGES), images=IMAGES) as tracer:
        mask = model.vision.image_token_mask.save()
        patches = model.vision.patch_embeddings.save()
        first = model.layers[0].input.save()
        tracer.stop()
    width = patches.shape[-1]
    for image, shape in enumerate([(7, 7), (6, 7)]):  # 980 x 980, and 980 wide x 735 high: 6 of 7 patch rows
        assert torch.equal(model.vision.patch_grid(patches, image=image), patches[image][real[image]].view(*shape, width))
    with pytest.raises(Unavailable, match="the image tokens have no grid: they are the projector's learned queries"):
        model.vision.token_grid(first[mask], image=0)
