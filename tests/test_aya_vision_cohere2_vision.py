"""StandardizedTransformer on tiny Aya Vision and Cohere 2 Vision checkpoints: tiles, the pixel shuffle, parallel
Cohere 2 blocks, exact.

Both families cut an image into tiles on a canvas picked for its aspect
ratio (a thumbnail after the grid tiles when there are several), run a
SigLIP tower over every tile and pixel-shuffle each tile in the projector's
own forward, folding each 2x2 block of patches into one image token; their
text model is Cohere 2, whose blocks are parallel (the attention and the MLP
read the same normed input). Aya Vision's projector reads the last block's
output before the tower's norm and layer-norms each folded block; Cohere 2
Vision's reads the tower's output after the norm. Every expected number comes
from outside the code under test: the builders' documented sizes and canvases
(32 pixel tiles of 4 pixel patches, 8x8 patches and 4x4 tokens a tile; a 32x32
image is 1 tile, a 64 wide x 48 high one 2x2 tiles and a thumbnail, a 64 wide
x 32 high one 2x1 and a thumbnail), the stock processor's outputs, the
modules' own weights, or a recomputation from other values read in the same
trace. The spec's contracts run on both checkpoints in
test_vision_contracts.py; this file holds what is particular to them.
"""

from __future__ import annotations

import nnsight
import pytest
import torch
import torch.nn.functional as F
from family_inputs import prompt

from envoys import StandardizedTransformer, Unavailable
from envoys.testing import noise_image, patch_coloured_image

FAMILIES = ["aya_vision", "cohere2_vision"]
#: The builders' sizes: a tile is 8x8 patches; the pixel shuffle folds 2x2 of them into one token, 4x4 a tile.
SIDE, FACTOR = 8, 2
TOKENS = (SIDE // FACTOR) ** 2
#: 32x32 (1 tile) and 64 wide x 48 high (a 2x2 canvas, then the thumbnail): tiles 0 | 1 2 3 4 | 5.
TWO = [noise_image(32, 32, seed=0), noise_image(64, 48, seed=1)]
#: Patch-coloured: 32x32 (1 tile) and 64 wide x 32 high (a 2x1 canvas, as large as the image, then the thumbnail).
COLOURED = [patch_coloured_image(8, 8, 4), patch_coloured_image(8, 16, 4)]
PROCESSORS = {"aya_vision": ("AyaVisionProcessor", "GotOcr2ImageProcessor"),
              "cohere2_vision": ("Cohere2VisionProcessor", "Cohere2VisionImageProcessor")}


@pytest.fixture(scope="module", params=FAMILIES)
def model(request, tiny_checkpoint):
    return StandardizedTransformer(
        tiny_checkpoint(request.param), task="image-text-to-text", device="cpu", attn_implementation="eager"
    )


def processed(model, images) -> dict:
    return model.processor(text=[prompt(model, images)], images=images, return_tensors="pt")


def projector_source(model):
    """The tower value the projector reads: Aya Vision's last block's output (``vision_feature_layer`` -1, before the
    norm), Cohere 2 Vision's ``last_hidden_state`` (after it)."""
    if model.family.model_type == "aya_vision":
        return model.vision.layers[-1].layer_output
    return model.vision.tower_output


# -- loading and names ------------------------------------------------------------------------------------------------


def test_loads_with_its_stock_processor_and_its_text_blocks_have_one_norm(model):
    assert (type(model.processor).__name__, type(model.processor.image_processor).__name__) == PROCESSORS[
        model.family.model_type]
    for native in model._module.model.language_model.layers:
        # one norm feeds both sublayers: the MLP's pre-norm name answers with it (the row's native names)
        assert type(native).__name__ == "Cohere2DecoderLayer" and not hasattr(native, "post_attention_layernorm")


def test_the_towers_rows_are_the_processors_tiles_in_order(model):
    with model.trace(prompt(model, TWO), images=TWO) as tracer:
        pixels = model.vision.input.save()
        stream = model.vision.layers[0].layer_input.save()
        tracer.stop()
    given = processed(model, TWO)["pixel_values"]
    assert given.shape == (1 + 2 * 2 + 1, 3, 32, 32)
    assert torch.equal(pixels, given)
    assert stream.shape == (6, SIDE * SIDE, model.vision.vision_hidden_size)


# -- the pixel shuffle --------------------------------------------------------------------------------------------


def shuffled_by_hand(value: torch.Tensor) -> torch.Tensor:
    """``[tiles, 64, width]`` -> ``[tiles, 4, 4, 4 * width]``: each 2x2 block of a tile's 8x8 patches joined on the
    feature axis, its top row first, left to right."""
    tiles, _, width = value.shape
    blocks = value.reshape(tiles, SIDE // FACTOR, FACTOR, SIDE // FACTOR, FACTOR, width)  # tile, R, dr, C, dc
    return blocks.permute(0, 1, 3, 2, 4, 5).reshape(tiles, SIDE // FACTOR, SIDE // FACTOR, FACTOR * FACTOR * width)


def test_the_projector_shuffles_what_it_reads_in_its_own_forward(model):
    with model.trace(prompt(model, TWO), images=TWO) as tracer:
        source = projector_source(model).save()
        received = model.projector.input.save()
        projected = model.projector.output.save()
        features = model.vision.image_features.save()
        tracer.stop()
    assert torch.equal(received, source)
    assert received.shape == (6, SIDE * SIDE, model.vision.vision_hidden_size)
    assert projected.shape == (6, SIDE // FACTOR, SIDE // FACTOR, model.hidden_size)
    projector = model.projector._module
    folded = shuffled_by_hand(received)
    if model.family.model_type == "aya_vision":
        folded = projector.layernorm(folded)
    x, gate = projector.linear_1(folded).chunk(2, dim=-1)
    torch.testing.assert_close(projector.linear_2(F.silu(gate) * x), projected, rtol=0, atol=1e-6)
    assert torch.equal(features, projected.reshape(-1, model.hidden_size))  # tile after tile, raster order


@pytest.mark.parametrize("tile,row,column", [(0, 0, 0), (0, 5, 6), (3, 7, 1), (5, 2, 7)])
def test_an_edit_of_one_patch_reaches_exactly_the_token_its_block_folds_into(model, tile, row, column):
    text = prompt(model, TWO)
    with model.trace(text, images=TWO) as tracer:
        clean = model.vision.image_features.save()
        tracer.stop()
    with model.trace(text, images=TWO) as tracer:
        mask = model.vision.image_token_mask.save()
        source = projector_source(model)
        source[tile, row * SIDE + column] += 1.0
        edited = model.vision.image_features.save()
        first = model.layers[0].input.save()
        tracer.stop()
    changed = (edited != clean).any(-1).nonzero().flatten().tolist()
    assert changed == [tile * TOKENS + (row // FACTOR) * (SIDE // FACTOR) + column // FACTOR]
    assert torch.equal(first[mask], edited)


# -- the grids, on the canvas of each image -----------------------------------------------------------------------


def test_the_grids_place_each_tile_on_its_canvas_and_each_token_on_its_block(model):
    with model.trace(prompt(model, COLOURED), images=COLOURED) as tracer:
        patches = model.vision.patch_embeddings.save()
        features = model.vision.image_features.save()
        tracer.stop()
    # the 64 wide x 32 high image: tiles 1 (left) and 2 (right) of a 2x1 canvas, then its thumbnail (tile 3)
    grid, tokens = model.vision.patch_grid(patches, image=1), model.vision.token_grid(features, image=1)
    assert grid.shape == (SIDE, 2 * SIDE, model.vision.vision_hidden_size)
    assert tokens.shape == (SIDE // FACTOR, 2 * SIDE // FACTOR, model.hidden_size)
    for r in range(SIDE):
        for c in range(2 * SIDE):
            assert torch.equal(grid[r, c], patches[1 + c // SIDE, (r % SIDE) * SIDE + c % SIDE]), (r, c)
    side = SIDE // FACTOR
    for r in range(side):
        for c in range(2 * side):
            tile = 1 + c // side
            assert torch.equal(tokens[r, c], features[tile * TOKENS + r * side + c % side]), (r, c)
    # the 32x32 image is one tile, on its own grid
    assert torch.equal(model.vision.patch_grid(patches, image=0), patches[0].reshape(SIDE, SIDE, -1))
    assert torch.equal(model.vision.token_grid(features, image=0), features[:TOKENS].reshape(side, side, -1))

    # the canvas is the processor's: its left tile holds the image's left half, its right tile the right half
    pixels = processed(model, COLOURED)["pixel_values"]
    image_processor = model.processor.image_processor
    whole = torch.tensor(list(COLOURED[1].getdata()), dtype=torch.float32).reshape(32, 64, 3).permute(2, 0, 1)
    mean, std = (torch.tensor(v).reshape(3, 1, 1) for v in (image_processor.image_mean, image_processor.image_std))
    normalised = (whole / 255 - mean) / std
    torch.testing.assert_close(pixels[1], normalised[:, :, :32], rtol=0, atol=1e-5)
    torch.testing.assert_close(pixels[2], normalised[:, :, 32:], rtol=0, atol=1e-5)


def test_a_patch_placed_on_the_grid_reaches_the_token_of_its_block_on_the_token_grid(model):
    text = prompt(model, COLOURED)
    with model.trace(text, images=COLOURED) as tracer:
        clean = model.vision.image_features.save()
        tracer.stop()
    with model.trace(text, images=COLOURED) as tracer:
        source = projector_source(model)
        grid = model.vision.patch_grid(source, image=1)
        grid[3, 13] += 1.0  # in the right tile
        model.vision.place_patch_grid(grid, into=source, image=1)
        edited = model.vision.image_features.save()
        tracer.stop()
    before, after = (model.vision.token_grid(features, image=1) for features in (clean, edited))
    changed = (before != after).any(-1).nonzero().tolist()
    assert changed == [[3 // FACTOR, 13 // FACTOR]]
    assert torch.equal(model.vision.token_grid(edited, image=0), model.vision.token_grid(clean, image=0))
    # the thumbnail's tokens (in the image's span, off the grid) are untouched
    thumbnail = slice(3 * TOKENS, 4 * TOKENS)
    assert torch.equal(edited[thumbnail], clean[thumbnail])


def test_the_grids_say_why_they_need_the_images_and_not_their_pixels(model):
    with model.trace(**processed(model, TWO)) as tracer:
        patches = model.vision.patch_embeddings.save()
        tracer.stop()
    for image in (0, 1):  # image 1's canvas depends on its size, which pixels do not say
        with pytest.raises(Unavailable, match=r"this processor returns no image sizes.*pass the images to the trace "
                                              r"as images= \(not as pixel_values\)"):
            model.vision.patch_grid(patches, image=image)
    with model.trace(**processed(model, TWO[:1])) as tracer:  # one tile: no canvas to place it on
        patches = model.vision.patch_embeddings.save()
        tracer.stop()
    assert torch.equal(model.vision.patch_grid(patches, image=0), patches[0].reshape(SIDE, SIDE, -1))


# -- the parallel Cohere 2 text blocks ------------------------------------------------------------------------------


def test_every_text_block_adds_its_attention_and_mlp_to_its_input_and_both_read_one_norm(model):
    with model.trace(prompt(model, TWO), images=TWO) as tracer:
        blocks = nnsight.save([])
        for block in model.layers:
            blocks.append(nnsight.save([
                block.layer_input, block.input_layernorm.output, block.post_attention_layernorm.output,
                block.self_attn.inputs, block.attention_output, block.mlp.input, block.mlp_output, block.layer_output,
            ]))
        tracer.stop()
    assert len(blocks) == model.num_layers == 2
    for index, (layer_input, normed, pre_mlp, attention_in, attention, mlp_in, mlp, output) in enumerate(blocks):
        assert torch.equal(layer_input + attention + mlp, output), index
        args, kwargs = attention_in
        assert torch.equal(kwargs.get("hidden_states", args[0] if args else None), normed), index
        assert torch.equal(mlp_in, normed) and torch.equal(pre_mlp, normed), index
        assert not torch.equal(normed, layer_input), index


def test_an_ablated_attention_leaves_the_mlp_of_its_block_unchanged(model):
    text = prompt(model, TWO)
    with model.trace(text, images=TWO) as tracer:
        clean = model.layers[0].mlp_output.save()
        tracer.stop()
    with model.trace(text, images=TWO) as tracer:
        layer_input = model.layers[0].layer_input.save()
        model.layers[0].attention_output[:] = 0
        mlp = model.layers[0].mlp_output.save()
        output = model.layers[0].layer_output.save()
        tracer.stop()
    assert torch.equal(mlp, clean)  # the MLP reads the normed input, not the stream after the attention
    assert torch.equal(output, layer_input + 0 + mlp)


def test_sliding_layers_see_a_window_with_rotary_embeddings_and_global_layers_all_without(model):
    text_config = model.config.text_config
    assert text_config.layer_types == ["sliding_attention", "full_attention"] and text_config.sliding_window == 16
    with model.trace(prompt(model, TWO), images=TWO) as tracer:
        reads = nnsight.save([])
        for block in model.layers:
            attention = block.self_attn
            reads.append(nnsight.save([attention.q_proj.output, attention.attention_queries,
                                       attention.attention_probabilities]))
        tracer.stop()
    length = reads[0][2].shape[-1]
    assert length > 2 * text_config.sliding_window
    query, key = torch.arange(length)[:, None], torch.arange(length)[None, :]
    causal = key <= query
    window = causal & (query - key < text_config.sliding_window)
    heads, head_dim = model.num_heads, model.head_dim
    for index, (projected, queries, probabilities) in enumerate(reads):
        sees = window if index == 0 else causal
        assert bool((probabilities[..., sees] > 0).all()), index
        assert torch.equal(probabilities[..., ~sees], torch.zeros_like(probabilities[..., ~sees])), index
        unrotated = projected.view(1, length, heads, head_dim).transpose(1, 2)
        assert torch.equal(queries, unrotated) == (index == 1), index  # rotary embeddings on the sliding layer only


# -- sizes -----------------------------------------------------------------------------------------------------------


def test_the_tile_sizes(model):
    vision, inputs = model.vision, processed(model, TWO[:1])
    assert vision.image_size == inputs["pixel_values"].shape[-1] == 32
    assert vision.downsample_factor == model.config.downsample_factor == FACTOR
    assert vision.tokens_per_tile == int((inputs["input_ids"] == model.config.image_token_id).sum()) == TOKENS
