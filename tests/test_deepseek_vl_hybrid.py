"""DeepSeek-VL-Hybrid: its two towers, beyond the vision contracts (tests/test_vision_contracts.py, on ``model.vision``).

The SigLIP low-res tower is ``model.vision``; the SAM high-res tower is
``model.high_res_vision`` (`envoys.towers.sam`, GOT-OCR 2.0's envoys), whose blocks serve
the stream values of a pre-norm block on the patch grid flattened in raster
order, and the attention's interior at its modules and its softmax. The
aligner reads both. The tiny checkpoint (envoys/testing/deepseek_vl_hybrid.py):
SAM on 64x64 images of 8 px patches (an 8x8 grid), 2 blocks of width 32, 2
heads, MLP 64 wide, block 0 global, block 1 in 3x3 windows (the grid padded
to 9x9); the SigLIP side's 4x4 grid, 16 image tokens an image, text width 32.
Reads follow the forward: the SigLIP tower runs before the SAM tower.
"""

from __future__ import annotations

import nnsight
import pytest
import torch

from envoys import StandardizedTransformer, Unavailable
from envoys.testing import chat_prompt, noise_image

IMAGES = [noise_image(32, 32, seed=3), noise_image(64, 48, seed=4)]
GRID = 8  # the SAM tower's patches a side
PATCHES = GRID * GRID
WIDTH = 32
WINDOW = 3
WINDOWED, GLOBAL = 1, 0  # the blocks


CHECKPOINT = "deepseek_vl_hybrid"


def prompt(model, count=2):
    return chat_prompt(model.processor, count, "What is in the picture?")


def on_grid(patches: torch.Tensor) -> torch.Tensor:
    """``[images, patches, width]`` back on SAM's ``[images, rows, columns, width]`` grid."""
    return patches.reshape(patches.shape[0], GRID, GRID, -1)


def test_the_sam_towers_block_0_is_global_and_block_1_windowed(model):
    sam = model.high_res_vision._module.vision_encoder
    assert [layer.window_size for layer in sam.layers] == [0, WINDOW]  # the builder's: block 0 global


def test_the_high_res_towers_sizes(model):
    tower = model.high_res_vision
    assert (tower.num_layers, tower.vision_hidden_size, tower.num_heads, tower.head_dim) == (2, WIDTH, 2, 16)
    assert (tower.intermediate_size, tower.patch_size, tower.image_size) == (64, 8, 64)
    assert (tower.window_size, tower.global_attn_indexes) == (WINDOW, (GLOBAL,))


def test_the_high_res_stream_and_every_block_adds_up(model):
    with model.trace(prompt(model), images=IMAGES) as tracer:
        pixels = model.inputs[1]["high_res_pixel_values"].save()
        patches = model.high_res_vision.patch_embeddings.save()
        blocks = nnsight.save([])
        for block in model.high_res_vision.layers:
            blocks.append(nnsight.save([block.layer_input, block.attention_output, block.mlp_output,
                                        block.layer_output]))
        tower = model.high_res_vision.tower_output.save()
        neck = model.high_res_vision.neck.inputs.save()
        tracer.stop()
    sam = model._module.model.high_res_vision_model.vision_encoder
    with torch.no_grad():
        convolved = sam.patch_embed.projection(pixels).permute(0, 2, 3, 1).flatten(1, 2)
    assert pixels.shape == (2, 3, 64, 64)
    assert torch.equal(patches, convolved)
    assert torch.equal(on_grid(blocks[0][0]), on_grid(patches) + sam.pos_embed)
    for index, (layer_input, attention, mlp, output) in enumerate(blocks):
        assert layer_input.shape == attention.shape == mlp.shape == output.shape == (2, PATCHES, WIDTH), index
        assert torch.equal(layer_input + attention + mlp, output), index
        if index:
            assert torch.equal(layer_input, blocks[index - 1][3]), index
    assert torch.equal(tower, blocks[-1][3])
    assert torch.equal(on_grid(tower), neck[0][0])


def test_a_windowed_blocks_attention_output_is_on_the_grid_one_window_per_patch(model):
    """An edit of block 1's input at patch (4, 4) changes block 1's attention_output in the 3x3 window that holds
    it (rows and columns 3 to 5) and nowhere else: the served value puts each window where its patches are."""
    text = prompt(model)
    with model.trace(text, images=IMAGES) as tracer:
        clean = model.high_res_vision.layers[WINDOWED].attention_output.save()
        tracer.stop()
    with model.trace(text, images=IMAGES) as tracer:
        model.high_res_vision.layers[WINDOWED].layer_input[1, 4 * GRID + 4] += 1.0
        edited = model.high_res_vision.layers[WINDOWED].attention_output.save()
        tracer.stop()
    changed = on_grid((edited != clean).any(dim=-1, keepdim=True))[..., 0]
    window = torch.zeros(2, GRID, GRID, dtype=torch.bool)
    window[1, 3:6, 3:6] = True
    assert torch.equal(changed, window)


def test_an_edit_of_a_windowed_blocks_attention_output_reaches_its_patch_alone(model):
    """Written back into the attention's windows, an edit of one patch's attention_output changes the block's
    output at that patch alone (the MLP works patch by patch), by exactly what the edit removed."""
    text, patch = prompt(model), 5 * GRID + 7
    with model.trace(text, images=IMAGES) as tracer:
        block = model.high_res_vision.layers[WINDOWED]
        clean_attention = block.attention_output.save()
        clean = block.layer_output.save()
        tracer.stop()
    with model.trace(text, images=IMAGES) as tracer:
        block = model.high_res_vision.layers[WINDOWED]
        layer_input = block.layer_input.save()
        block.attention_output[0, patch] = 0.0
        mlp = block.mlp_output.save()
        edited = block.layer_output.save()
        tracer.stop()
    changed = (edited != clean).any(dim=-1)
    assert changed.nonzero().tolist() == [[0, patch]]
    assert torch.equal(edited[0, patch], layer_input[0, patch] + mlp[0, patch])
    assert not torch.equal(clean_attention[0, patch], torch.zeros(WIDTH))


@pytest.mark.parametrize("replaced", [False, True], ids=["clean", "global-block-replaced"])
def test_the_aligner_reads_the_siglip_output_and_the_high_res_features_made_from_two_sam_states(model, replaced):
    """The aligner's second argument is, by hand: the SAM neck's output brought to the SigLIP grid
    (high_res_vision_proj), plus the global block's output through the host's own neck, brought alike, times
    high_res_vision_alpha; flattened to [images, 16, 4 * output_channels]. The host takes the global block's
    output from the tower's hidden_states, and a replaced layer_output is what it takes."""
    with model.trace(prompt(model), images=IMAGES) as tracer:
        low_res = model.vision.tower_output.save()
        if replaced:
            model.high_res_vision.layers[GLOBAL].layer_output = torch.randn(2, PATCHES, WIDTH)
        global_block = model.high_res_vision.layers[GLOBAL].layer_output.save()
        neck = model.high_res_vision.neck.output.save()
        received = model.projector.inputs.save()
        tracer.stop()
    host = model._module.model
    with torch.no_grad():
        made = (host.high_res_vision_proj(neck)
                + host.high_res_vision_proj(host.high_res_vision_neck(on_grid(global_block))) * host.high_res_vision_alpha)
    (first, second), _ = received
    assert torch.equal(first, low_res)
    assert second.shape == (2, 16, 4 * 8)
    assert torch.equal(second, made.permute(0, 2, 3, 1).reshape(2, 16, -1))


@pytest.mark.parametrize("edit", ["tower_output", "global block"])
def test_an_edit_of_the_high_res_tower_reaches_image_features_through_the_aligners_second_argument(model, edit):
    text = prompt(model)
    with model.trace(text, images=IMAGES) as tracer:
        clean_inputs = model.projector.inputs.save()
        clean = model.vision.image_features.save()
        tracer.stop()
    with model.trace(text, images=IMAGES) as tracer:
        if edit == "tower_output":
            model.high_res_vision.tower_output[:] = 0.0
        else:
            model.high_res_vision.layers[GLOBAL].layer_output[:] = 0.0
        edited_inputs = model.projector.inputs.save()
        edited = model.vision.image_features.save()
        tracer.stop()
    assert torch.equal(edited_inputs[0][0], clean_inputs[0][0])  # the SigLIP side untouched
    assert not torch.equal(edited_inputs[0][1], clean_inputs[0][1])
    assert not torch.equal(edited, clean)


@pytest.mark.parametrize("index", [GLOBAL, WINDOWED], ids=["global", "windowed"])
def test_the_sam_attention_interior_is_the_softmax_of_the_scores_per_row_of_the_attentions_batch(model, index):
    """The scores are the scaled query-key products plus the relative position terms (the module's own
    ``get_decomposed_rel_pos``); the probabilities are their softmax, each row summing to 1, and what the module
    returns as its weights (the softmax site's output); the head outputs are the probabilities times the values.
    The rows are the attention's batch: an image on the global block, a 3x3 window of the 9x9 padded grid (9 an
    image) on the windowed one."""
    block = model.high_res_vision.layers[index]
    rows, side = (2, GRID) if index == GLOBAL else (2 * 9, WINDOW)
    with model.trace(prompt(model), images=IMAGES) as tracer:
        queries = block.self_attn.attention_queries.save()
        keys = block.self_attn.attention_keys.save()
        values = block.self_attn.attention_values.save()
        scores = block.self_attn.attention_scores.save()
        probabilities = block.self_attn.attention_probabilities.save()
        heads = block.self_attn.attention_head_outputs.save()
        weights = block.self_attn.output[1].save()
        tracer.stop()
    assert queries.shape == keys.shape == values.shape == (rows, 2, side * side, 16)
    assert scores.shape == probabilities.shape == (rows, 2, side * side, side * side)
    attention = block.self_attn._module
    flat_queries = queries.flatten(0, 1)
    with torch.no_grad():
        relative = attention.get_decomposed_rel_pos(flat_queries, attention.rel_pos_h, attention.rel_pos_w,
                                                    (side, side), (side, side))
    products = (flat_queries * attention.scale) @ keys.flatten(0, 1).transpose(-2, -1)
    assert torch.equal(scores.flatten(0, 1), products + relative.reshape(products.shape))
    assert torch.equal(probabilities, torch.softmax(scores, dim=-1))
    assert torch.allclose(probabilities.sum(dim=-1), torch.ones(rows, 2, side * side))
    assert torch.equal(probabilities.flatten(0, 1), weights)
    joined = (probabilities.flatten(0, 1) @ values.flatten(0, 1)).unflatten(0, (rows, 2))
    assert heads.shape == (rows, side * side, 2, 16)
    assert torch.equal(heads, joined.transpose(1, 2))


@pytest.mark.parametrize("index", [GLOBAL, WINDOWED], ids=["global", "windowed"])
def test_zero_queries_written_make_the_sam_pattern_uniform(model, index):
    """The queries enter both the query-key products and the relative position terms: zeroed, every score is 0."""
    attention = model.high_res_vision.layers[index].self_attn
    with model.trace(prompt(model), images=IMAGES) as tracer:
        attention.attention_queries = torch.zeros_like(attention.attention_queries)
        probabilities = attention.attention_probabilities.save()
        tracer.stop()
    assert torch.equal(probabilities, torch.full_like(probabilities, 1 / probabilities.shape[-1]))


def test_the_sam_tower_supports_every_value_on_every_block(model):
    support = model.high_res_vision.support()
    for value in ("patch_embeddings", "tower_output", "layer_input", "attention_output", "mlp_output", "layer_output",
                  "mlp.mlp_output"):
        assert support[value] is None, value
    interior = [name for name in support if name.startswith("self_attn.")]
    assert sorted(interior) == sorted(f"self_attn.attention_{name}" for name in (
        "output", "queries", "keys", "values", "scores", "probabilities", "head_outputs"))
    assert all(support[name] is None for name in interior)
    assert not [name for name in model.support() if name.startswith("high_res_vision")]  # the SAM tower's own


def test_a_text_only_load_has_no_high_res_values(tiny_checkpoint):
    model = StandardizedTransformer(tiny_checkpoint("deepseek_vl_hybrid"), attn_implementation="eager")
    assert model.high_res_vision.support() == {}
    with pytest.raises(Unavailable, match=r"task='image-text-to-text'"):
        model.high_res_vision.layers[0].layer_output


def test_under_sdpa_the_sam_pattern_is_unavailable_and_the_rest_served(tiny_checkpoint):
    """SAM's SDPA attention (``SamVisionSdpaAttention``) has a forward of its own, with no softmax."""
    model = StandardizedTransformer(tiny_checkpoint("deepseek_vl_hybrid"), task="image-text-to-text", device="cpu",
                                    attn_implementation="sdpa")
    support = model.high_res_vision.support()
    for name in ("self_attn.attention_scores", "self_attn.attention_probabilities"):
        assert set(support[name]) == {0, 1} and all("SamVisionSdpaAttention.forward" in why
                                                    for why in support[name].values()), name
    for name in ("self_attn.attention_queries", "self_attn.attention_head_outputs", "attention_output"):
        assert support[name] is None, name
