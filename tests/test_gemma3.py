"""StandardizedTransformer on a tiny Gemma 3 checkpoint: SigLIP tower, pooling projector, Gemma 3 text model, exact.

The checkpoint (envoys.testing.gemma3) resizes every image to 32x32, an 8x8 grid
of 4x4 patches, which the projector pools 2x2 to 16 image tokens; its text
model has a sliding layer (window 16) and a global one. Pan-and-scan is off
(the processor's default), so an image is one tower row and 16 tokens
whatever its aspect ratio. Every expected number comes from outside the code
under test: the stock processor's outputs (``input_ids``, ``token_type_ids``),
the configs, the modules' weights, or a recomputation from other values.
The spec's contracts (the scatter and the mask, the tower's stream and block
identity, the pattern, what the projector reads, ablation, sizes, support,
the text-only load, generation, outputs against the plain model) run on this
checkpoint in test_vision_contracts.py; this file holds what is particular to
Gemma 3.
"""

from __future__ import annotations

import nnsight
import pytest
import torch
from family_inputs import prompt
from logit_caps import assert_capped_as_the_wrapper
from tiled_grids import TiledGridSuite, side
from tower_body import tower_body

from envoys import StandardizedTransformer, Unavailable
from envoys.testing import noise_image

ONE = [noise_image(32, 32, seed=0)]
TWO = [noise_image(32, 32, seed=0), noise_image(64, 48, seed=1)]  # two sizes: 32x32, and 64 wide by 48 high


CHECKPOINT = "gemma3"


def inputs(model, images):
    return model.processor(text=[prompt(model, images)], images=images, return_tensors="pt")


def tokens_per_image(model) -> int:
    return model.processor.image_seq_length


def patches_per_image(model) -> int:
    vision = model.config.vision_config
    return (vision.image_size // vision.patch_size) ** 2


def allowed_keys(token_type_ids: torch.Tensor, sliding_window: int | None) -> torch.Tensor:
    """Which keys each query may see, [seq, seq] bool, from the processor's token_type_ids: causal, plus
    every token of the query's own image (a run of 1s), within ``sliding_window`` positions on a sliding layer."""
    kinds = token_type_ids[0].tolist()
    image = [-1] * len(kinds)
    count = -1
    for position, kind in enumerate(kinds):
        if kind == 1:
            if position == 0 or kinds[position - 1] != 1:
                count += 1
            image[position] = count
    image_ids = torch.tensor(image)
    query, key = torch.arange(len(kinds))[:, None], torch.arange(len(kinds))[None, :]
    same_image = (image_ids[:, None] == image_ids[None, :]) & (image_ids[:, None] >= 0)
    allowed = (key <= query) | same_image
    if sliding_window is not None:
        allowed &= key > query - sliding_window
    return allowed


# -- loading, names, rules ---------------------------------------------------------------------------


def test_loads_with_its_stock_processor(model):
    assert type(model.processor).__name__ == "Gemma3Processor"
    assert type(model.processor.image_processor).__name__ in ("Gemma3ImageProcessor", "Gemma3ImageProcessorFast")  # fast: some releases default to it
    assert not model.processor.image_processor.do_pan_and_scan  # off, as by default
    assert model.family.model_type == "gemma3"



# -- where the image enters the text model -----------------------------------------------------------


def test_the_features_reach_the_scatter_as_images_tokens_hidden(tiny_checkpoint):
    """Argument 1 of the host's scatter, read through nnsight's own .source (on an instance of its own), is
    [images, tokens, hidden]; image_features is it flat."""
    model = StandardizedTransformer(tiny_checkpoint("gemma3"), task="image-text-to-text", attn_implementation="eager")
    with model.trace(prompt(model, TWO), images=TWO):
        called = model.model.source.inputs_embeds_masked_scatter_0.inputs.save()
        features = model.vision.image_features.save()
    (placeholder, scattered), _ = called
    length = inputs(model, TWO)["input_ids"].shape[1]
    assert placeholder.shape[:2] == (1, length)  # the image-token mask; some releases expand it to the hidden size
    assert placeholder.shape[2] in (1, model.hidden_size)
    assert scattered.shape == (2, tokens_per_image(model), model.hidden_size)
    assert torch.equal(features, scattered.reshape(-1, model.hidden_size))


def test_two_images_are_scattered_in_order(model):
    """Each image's rows of image_features go to its own run of soft tokens, the first image's first."""
    tokens = tokens_per_image(model)
    with model.trace(prompt(model, TWO), images=TWO):
        mask = model.vision.image_token_mask.save()
        projected = model.projector.output.save()
        features = model.vision.image_features.save()
        first = model.layers[0].input.save()
    ids = inputs(model, TWO)["input_ids"][0]
    positions = (ids == model.config.image_token_id).nonzero()[:, 0]
    starts = [int(p) for i, p in enumerate(positions) if i == 0 or positions[i - 1] != p - 1]
    assert len(starts) == 2 and positions.numel() == 2 * tokens  # two runs of soft tokens
    for image, start in enumerate(starts):
        assert torch.equal(first[0, start : start + tokens], projected[image])
        assert torch.equal(features[image * tokens : (image + 1) * tokens], projected[image])
    assert not torch.equal(projected[0], projected[1])
    assert torch.equal(first[mask], features)


def test_the_scatter_is_into_the_scaled_embeddings(model):
    with model.trace(prompt(model, ONE), images=ONE):
        mask = model.vision.image_token_mask.save()
        embedded = model.embed_tokens.output.save()
        first = model.layers[0].input.save()
    ids = inputs(model, ONE)["input_ids"]
    weight = model.embed_tokens._module.weight
    scale = torch.tensor(model.hidden_size**0.5, dtype=weight.dtype)
    assert torch.equal(embedded, weight[ids] * scale)  # Gemma scales its embeddings by sqrt(hidden_size)
    assert torch.equal(first[~mask], embedded[~mask])  # the text rows are the scaled embeddings
    assert not torch.equal(first[mask], embedded[mask])


def test_how_the_projector_pools(model):
    """The projector pools tower_output (what it reads, after post_layernorm) 2x2; recomputed from its weights."""
    with model.trace(prompt(model, TWO), images=TWO):
        tower = model.vision.tower_output.save()
        projected = model.projector.output.save()
    projector = model.projector._module
    side = model.config.vision_config.image_size // model.config.vision_config.patch_size  # patches a side
    per_side = int(model.config.mm_tokens_per_image**0.5)  # tokens a side
    grid = tower.transpose(1, 2).reshape(2, -1, side, side).contiguous()
    pooled = torch.nn.functional.avg_pool2d(grid, side // per_side).flatten(2).transpose(1, 2)
    norm = projector.mm_soft_emb_norm
    normed = pooled * torch.rsqrt(pooled.pow(2).mean(-1, keepdim=True) + norm.eps) * (1.0 + norm.weight)
    assert torch.equal(projected, normed @ projector.mm_input_projection_weight)
    # randomised: the real init leaves both at zero (no image signal; a plain RMS normalisation)
    assert bool((projector.mm_input_projection_weight != 0).all()) and bool((norm.weight != 0).all())


def test_writes_to_image_features_land_at_the_image_tokens_in_order(model):
    text = prompt(model, TWO)
    rows = 2 * tokens_per_image(model)
    written = torch.arange(rows * model.hidden_size, dtype=torch.float32).reshape(rows, -1)
    with model.trace(text, images=TWO):
        mask = model.vision.image_token_mask.save()
        model.vision.image_features = written
        first = model.layers[0].input.save()
    assert torch.equal(first[mask], written)
    with pytest.raises(ValueError, match=rf"vision\.image_features takes a tensor of shape \({rows}, 32\).*got \(3, 32\)"):
        with model.trace(text, images=TWO):
            model.vision.image_features = torch.zeros(3, 32)


# -- the blocks ----------------------------------------------------------------------------------------


def test_block_values_add_up_on_the_sandwich_text_blocks(model):
    with model.trace(prompt(model, TWO), images=TWO):
        text_parts = nnsight.save([])
        for block in model.layers:
            layer_input = block.layer_input
            attended = block.self_attn.output[0].save()  # before post_attention_layernorm
            text_parts.append(nnsight.save([layer_input, block.attention_output, block.mlp_output,
                                            block.layer_output]))
    for layer_input, attention, mlp, output in text_parts:
        assert torch.equal(layer_input + attention + mlp, output)
    last = model.layers[-1]._module
    assert torch.equal(text_parts[-1][1], last.post_attention_layernorm(attended))  # the post-norm's output
    assert not torch.equal(text_parts[-1][1], attended)
    assert torch.equal(text_parts[1][0], text_parts[0][3])


@pytest.mark.parametrize("layer", [0, 1], ids=["sliding", "global"])
def test_text_attention_interior(model, layer):
    """scores.softmax == probabilities and probabilities @ values == head outputs, on a sliding and a global layer."""
    attention = model.layers[layer].self_attn
    with model.trace(prompt(model, ONE), images=ONE):
        queries = attention.attention_queries.save()
        keys = attention.attention_keys.save()
        values = attention.attention_values.save()
        scores = attention.attention_scores.save()
        probabilities = attention.attention_probabilities.save()
        heads = attention.attention_head_outputs.save()
        projected_in = attention.o_proj.input.save()
    text = model.config.text_config
    length = inputs(model, ONE)["input_ids"].shape[1]
    assert queries.shape == (1, text.num_attention_heads, length, text.head_dim)
    assert keys.shape == values.shape == (1, text.num_key_value_heads, length, text.head_dim)
    assert probabilities.shape == scores.shape == (1, text.num_attention_heads, length, length)
    assert torch.equal(scores.softmax(-1), probabilities)
    assert torch.allclose(probabilities.sum(-1), torch.ones(probabilities.shape[:-1]))
    groups = text.num_attention_heads // text.num_key_value_heads
    assert torch.equal(probabilities @ values.repeat_interleave(groups, dim=1), heads.transpose(1, 2))
    assert torch.equal(heads.reshape(1, length, -1), projected_in)


@pytest.mark.parametrize("layer", [0, 1], ids=["sliding", "global"])
def test_text_attention_is_causal_at_text_rows_and_bidirectional_within_an_image(model, layer):
    """The pattern's nonzero entries are exactly the keys the processor's token_type_ids and the layer allow:
    causal at text rows, every token of its own image at an image row, within the window on the sliding layer."""
    text = model.config.text_config
    kind = text.layer_types[layer]
    with model.trace(prompt(model, TWO), images=TWO):
        probabilities = model.layers[layer].self_attn.attention_probabilities.save()
    token_types = inputs(model, TWO)["token_type_ids"]
    allowed = allowed_keys(token_types, text.sliding_window if kind == "sliding_attention" else None)
    for head in range(text.num_attention_heads):
        assert torch.equal(probabilities[0, head] > 0, allowed)
    text_rows = token_types[0] == 0
    above = torch.ones_like(allowed).triu(1)
    assert not (probabilities[0][:, text_rows] * above[text_rows]).any()  # causal at the text rows
    assert (probabilities[0][:, ~text_rows] * above[~text_rows]).any()  # image rows see their image's later tokens
    if kind == "sliding_attention":
        assert probabilities.shape[-1] > text.sliding_window  # the window cuts keys off


def test_tower_attention_interior_and_probabilities_are_writable(model):
    attention = model.vision.layers[0].self_attn
    rows = patches_per_image(model)
    text = prompt(model, ONE)
    with model.trace(text, images=ONE):
        values = attention.attention_values.save()
        scores = attention.attention_scores.save()
        probabilities = attention.attention_probabilities.save()
        heads = attention.attention_head_outputs.save()
        clean = model.vision.layers[0].attention_output.save()
    assert torch.equal(scores.softmax(-1), probabilities)
    assert torch.equal(probabilities @ values, heads.transpose(1, 2))
    assert bool((probabilities > 0).all())  # no mask in the tower
    with model.trace(text, images=ONE):
        attention.attention_probabilities[:] = 1.0 / rows
        edited = model.vision.layers[0].attention_output.save()
    uniform = values.mean(dim=2, keepdim=True).expand_as(values).transpose(1, 2).reshape(1, rows, -1)
    assert not torch.equal(edited, clean)
    assert torch.allclose(edited, attention._module.out_proj(uniform), atol=1e-6)


def test_patch_embeddings_are_the_convolution_before_positions(model):
    vision = model.vision
    with model.trace(prompt(model, TWO), images=TWO):
        patches = vision.patch_embeddings.save()
        first = vision.layers[0].layer_input.save()
    positions = tower_body(vision._module).embeddings.position_embedding.weight
    assert patches.shape == (2, patches_per_image(model), vision.vision_hidden_size)
    assert torch.equal(first, patches + positions)


# -- the processor, what is unavailable ------------------------------------------------------------


def test_the_processor_gives_an_image_the_configs_token_count_at_the_towers_size(model):
    vision = model.config.vision_config
    assert model.processor.image_seq_length == model.config.mm_tokens_per_image == 16
    assert model.processor.image_processor.size == {"height": vision.image_size, "width": vision.image_size}


def test_sdpa_makes_scores_and_probabilities_unavailable_with_the_reason(tiny_checkpoint):
    model = StandardizedTransformer(tiny_checkpoint("gemma3"), task="image-text-to-text", attn_implementation="sdpa")
    support = model.support()
    for name in ("self_attn.attention_scores", "self_attn.attention_probabilities",
                 "vision.self_attn.attention_scores", "vision.self_attn.attention_probabilities"):
        assert set(support[name]) == {0, 1}, name
        assert all("attn_implementation='eager'" in reason for reason in support[name].values())
    for name in ("self_attn.attention_queries", "self_attn.attention_head_outputs", "vision.image_features"):
        assert support[name] is None, name
    with pytest.raises(Unavailable, match=r"layers\[1\]\.self_attn\.attention_probabilities is unavailable: .*'sdpa'"):
        model.layers[1].self_attn.attention_probabilities
    with model.trace(prompt(model, ONE), images=ONE):
        mask = model.vision.image_token_mask.save()
        features = model.vision.image_features.save()
        first = model.layers[0].input.save()
    assert torch.equal(first[mask], features)


def test_text_alone_attends_causally_on_a_text_only_load(tiny_checkpoint):
    """Without a processor no image reaches the model (the contracts check what is then unavailable): every block
    of the text attends causally, the image tokens' bidirectional attention having nothing to apply to."""
    model = StandardizedTransformer(tiny_checkpoint("gemma3"), attn_implementation="eager")
    with model.trace("What is in the picture ?"):
        probabilities = model.layers[1].self_attn.attention_probabilities.save()
    above = torch.ones(probabilities.shape[-2:], dtype=torch.bool).triu(1)
    assert not probabilities[..., above].any()


# -- grids -----------------------------------------------------------------------------------------


def test_grids_refuse_a_batch_with_pan_and_scan_crops(model):
    """With pan-and-scan the processor adds each crop as a tower row of its own: no grid, and the reason."""
    from envoys.image.grids import image_inputs_of

    wide = [noise_image(96, 32, seed=3)]
    cropped = model.processor(text=prompt(model, wide), images=wide, do_pan_and_scan=True,
                              pan_and_scan_min_crop_size=8, return_tensors="pt")
    assert cropped["pixel_values"].shape[0] == 4  # the image and its three crops
    layout = model.family.grid_layout
    inputs = image_inputs_of(cropped, cropped["input_ids"] == model.config.image_token_id, model.config, model.processor)
    for kind in (layout.patch_grid, layout.token_grid):
        with pytest.raises(Unavailable, match="unavailable on a Gemma 3 batch with pan-and-scan crops.*"
                                              r"do_pan_and_scan=False"):
            kind(inputs, 0)
    plain = model.processor(text=prompt(model, wide), images=wide, return_tensors="pt")
    inputs = image_inputs_of(plain, plain["input_ids"] == model.config.image_token_id, model.config, model.processor)
    side = round(patches_per_image(model) ** 0.5)
    assert layout.patch_grid(inputs, 0).shape == (side, side)


# -- the grids (tiled_grids.TiledGridSuite) ----------------------------------------------------------------------


class TestGrids(TiledGridSuite):
    """Gemma 3: one tile per image, whose patches the projector average-pools into each image token."""

    checkpoint = "gemma3"
    images = [(8, 8, 4), (4, 4, 8)]

    def token_sources(self, model, inputs, index):
        n = side(model)
        pool = model._module.model.multi_modal_projector.avg_pool
        one_hot = torch.eye(n * n).reshape(1, n * n, n, n)
        pooled = pool(one_hot).flatten(2).transpose(1, 2)[0]  # [tokens per image, patches]: weight of each patch
        per_image = torch.stack([torch.nonzero(weights).squeeze(1) for weights in pooled])
        return torch.cat([per_image + t * n * n for t in range(index.shape[0])])


def test_project_on_vocab_squashes_the_logits_where_the_model_does(model):
    """Gemma 3's wrapper applies no final_logit_softcapping after its head: the logits are the head's output."""
    assert_capped_as_the_wrapper(model, capped=False)
