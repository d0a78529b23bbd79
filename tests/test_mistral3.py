"""StandardizedTransformer on a tiny Mistral 3 checkpoint (the Pixtral tower): the packed row, exact.

Every expected number comes from outside the code under test: the stock
processor's ``pixel_values`` and ``image_sizes``, the config's patch and merge
sizes, the modules' own weights, or a recomputation from other values read in
the same trace. Images (`pixtral_inputs`): 32x32 (8x8 patches of 4 px, 4x4
image tokens) and 48 high x 64 wide (12x16 patches, 6x8 tokens), so two images
differ in both sides and the convolution's padded grid is the second image's.
The spec's contracts (the scatter and the mask, the packed stream and every
block's identity, the block-diagonal pattern, what the projector reads and
gives, ablation, sizes, support, the text-only load, generation, outputs
against the plain model) run on this checkpoint in test_vision_contracts.py;
this file holds what is particular to Mistral 3, and declares on it the suites
of the Pixtral tower and of its grids (pixtral_inputs.py, packed_grids.py).
"""

from __future__ import annotations

import nnsight
import pytest
import torch
from packed_grids import PixtralGridSuite
from pixtral_inputs import ONE, TWO, PixtralTowerSuite, bounds, image_sizes, patch_counts, patch_grids, prompt

from envoys import StandardizedTransformer, Unavailable

CHECKPOINT = "mistral3"


def token_counts(model, images) -> list[int]:
    merge = model.config.spatial_merge_size
    return [(rows // merge) * (columns // merge) for rows, columns in patch_grids(model, images)]


# -- loading and names ---------------------------------------------------------------------------------


def test_loads_with_its_stock_processor(model):
    assert type(model.processor).__name__ == "PixtralProcessor"
    assert type(model.processor.image_processor).__name__ in ("PixtralImageProcessor", "PixtralImageProcessorFast")  # some releases default to fast
    assert model.family.model_type == "mistral3"
    assert type(model.layers[0].self_attn._module).__name__ == "MistralAttention"


def test_the_family_names_are_the_specs():
    from envoys.families import mistral3

    assert mistral3.RENAME == {
        "model.language_model.embed_tokens": "embed_tokens", "model.language_model.layers": "layers",
        "model.language_model.norm": "norm", "model.vision_tower": "vision", "model.multi_modal_projector": "projector",
        "transformer.layers": "layers", "patch_conv": "patch_embed", "attention": "self_attn", "feed_forward": "mlp",
        "attention_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    }
    assert {cls.__name__: envoy.__name__ for cls, envoy in mistral3.ENVOYS.items()} == {
        "PixtralVisionModel": "PixtralVision",
        "PixtralAttentionLayer": "PackedVisionLayer", "PixtralAttention": "PixtralVisionAttention", "PixtralMLP": "PackedVisionMlp",
    }
    assert mistral3.FAMILY.root_scatter is None



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


def test_writing_patch_embeddings_reaches_the_first_block(model):
    text = prompt(model, TWO)
    vision = model.vision
    with model.trace(text, images=TWO):
        clean = vision.layers[0].layer_input.save()
    with model.trace(text, images=TWO):
        vision.patch_embeddings = torch.zeros(1, sum(patch_counts(model, TWO)), vision.vision_hidden_size)
        assigned = vision.layers[0].layer_input.save()
    with model.trace(text, images=TWO):
        vision.patch_embeddings[:] = 0
        in_place = vision.layers[0].layer_input.save()
    assert torch.equal(assigned, torch.zeros_like(clean)) and torch.equal(in_place, assigned)
    assert not torch.equal(clean, assigned)
    with pytest.raises(ValueError, match=r"patch_embeddings takes a tensor of shape \(1, 256, 32\).*got \(2, 128, 32\)"):
        with model.trace(text, images=TWO):
            vision.patch_embeddings = torch.zeros(2, 128, 32)


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
    a, b = spans[0]
    assert torch.equal(scores[..., a:b, a:b], expected_scores[..., a:b, a:b])
    assert torch.equal(probabilities @ values, heads.transpose(1, 2))
    assert torch.equal(heads.reshape(1, total, -1), projected_in)
    assert not torch.equal(queries, keys)


def test_uniform_probabilities_within_each_image_average_its_values(model):
    attention = model.vision.layers[0].self_attn
    spans = bounds(patch_counts(model, TWO))
    text = prompt(model, TWO)
    with model.trace(text, images=TWO):
        values = attention.attention_values.save()
        clean = model.vision.layers[0].attention_output.save()
    uniform = torch.zeros(1, attention._module.num_heads, spans[-1][1], spans[-1][1])
    for a, b in spans:
        uniform[..., a:b, a:b] = 1.0 / (b - a)
    with model.trace(text, images=TWO):
        attention.attention_probabilities = uniform
        edited = model.vision.layers[0].attention_output.save()
    means = torch.cat([values[:, :, a:b].mean(dim=2, keepdim=True).expand(-1, -1, b - a, -1) for a, b in spans], dim=2)
    expected = attention._module.o_proj(means.transpose(1, 2).reshape(1, spans[-1][1], -1))
    assert not torch.equal(edited, clean)
    assert torch.allclose(edited, expected, atol=1e-6)


# -- the projector -----------------------------------------------------------------------------------------


def test_the_projector_gets_the_image_sizes_and_merges_each_2x2_square(model):
    with model.trace(prompt(model, TWO), images=TWO):
        received = model.projector.inputs.save()
        normed = model.projector.norm.output.save()
        merged_in = model.projector.patch_merger.merging_layer.input.save()
    args, _ = received
    assert args[1].tolist() == [list(size) for size in image_sizes(model, TWO)]
    # the merger folds each 2x2 square of patches into one row, in raster order over the merged grid
    merge, width = model.config.spatial_merge_size, model.vision.vision_hidden_size
    squares = []
    for (a, b), (rows, columns) in zip(bounds(patch_counts(model, TWO)), patch_grids(model, TWO)):
        image = normed[a:b].reshape(rows // merge, merge, columns // merge, merge, width)
        squares.append(image.permute(0, 2, 4, 1, 3).reshape(-1, width * merge * merge))
    assert torch.equal(merged_in, torch.cat(squares))
    assert merged_in.shape[0] == sum(token_counts(model, TWO))


# -- the text side ---------------------------------------------------------------------------------


def test_text_attention_is_causal_and_rows_sum_to_one(model):
    with model.trace(prompt(model, ONE), images=ONE):
        probabilities = model.layers[0].self_attn.attention_probabilities.save()
        parts = nnsight.save([model.layers[1].layer_input, model.layers[1].attention_output,
                              model.layers[1].mlp_output, model.layers[1].layer_output])
    above = torch.ones(probabilities.shape[-2:], dtype=torch.bool).triu(1)
    assert torch.equal(probabilities[..., above], torch.zeros_like(probabilities[..., above]))
    assert torch.allclose(probabilities.sum(-1), torch.ones(probabilities.shape[:-1]))
    assert probabilities.shape[1] == model.config.text_config.num_attention_heads
    layer_input, attention, mlp, output = parts
    assert torch.equal(layer_input + attention + mlp, output)


# -- sizes and support ---------------------------------------------------------------------------------------


def test_sizes_the_tower_takes_any_resolution(model):
    vision = model.vision
    assert vision.patch_size == model.processor.patch_size
    assert model.processor.image_processor.patch_size["height"] == vision.patch_size * model.config.spatial_merge_size
    with pytest.raises(Unavailable, match=r"PixtralVisionModel takes images of any resolution.*longest side the "
                                          r"processor keeps.*image_sizes.*\(height // patch_size\) \* \(width // patch_size\)"):
        vision.image_size


def test_sdpa_serves_the_interior_but_not_the_pattern(tiny_checkpoint):
    model = StandardizedTransformer(tiny_checkpoint("mistral3"), task="image-text-to-text", attn_implementation="sdpa")
    reason = "exist only inside eager attention, and this model runs 'sdpa': load it with attn_implementation='eager'"
    rows = model.vision.support()
    assert set(rows["self_attn.attention_probabilities"]) == set(range(model.vision.num_layers))
    assert reason in rows["self_attn.attention_probabilities"][0]
    assert rows["self_attn.attention_queries"] is None and rows["patch_embeddings"] is None
    with pytest.raises(Unavailable, match=r"vision\.layers\[0\]\.self_attn\.attention_probabilities is unavailable"):
        model.vision.layers[0].self_attn.attention_probabilities
    with model.trace(prompt(model, TWO), images=TWO):
        mask = model.vision.image_token_mask.save()
        heads = model.vision.layers[0].self_attn.attention_head_outputs.save()
        features = model.vision.image_features.save()
        first = model.layers[0].input.save()
    assert heads.shape[1] == sum(patch_counts(model, TWO))
    assert torch.equal(first[mask], features)


# -- the suites of the Pixtral tower (pixtral_inputs.py) and of its grids (packed_grids.py) ----------------------


class TestPixtralTower(PixtralTowerSuite):
    """Mistral 3: the projector reads the last block's hidden state, not the tower's output."""

    checkpoint = "mistral3"


class TestGrids(PixtralGridSuite):
    """Mistral 3: the patch merger makes each image token of a 2 x 2 square of normed patches, unfolded."""

    checkpoint = "mistral3"
