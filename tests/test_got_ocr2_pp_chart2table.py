"""GOT-OCR 2.0 and PP-Chart2Table: what is particular to them, beyond the vision contracts (tests/test_vision_contracts.py).

Both run GOT-OCR 2.0's classes: a SAM-style encoder on a spatial grid
(served flattened, raster order), windowed and global blocks, an inline
attention kernel, a convolutional neck, a convolutional projector. The tiny
``got_ocr2`` checkpoint (envoys/testing/got_ocr2.py) has a 64x64 grid and two
windowed blocks (14x14 windows, the grid padded to 70x70: 5x5 windows); the
``pp_chart2table`` one (envoys/testing/pp_chart2table.py) a 32x32 grid, block 0
windowed (padded to 42x42: 3x3 windows), block 1 global.
"""

from __future__ import annotations

import nnsight
import pytest
import torch
import torch.nn.functional as F

from envoys import StandardizedTransformer
from envoys.testing import chat_prompt, noise_image

IMAGES = [noise_image(32, 32, seed=5), noise_image(64, 48, seed=6)]
WINDOW = 14  # both builders' window side, in patches
GRID = {"got_ocr2": 64, "pp_chart2table": 32}  # patches a side: 128 / 2 and 64 / 2


@pytest.fixture(scope="module", params=["got_ocr2", "pp_chart2table"])
def model(request, tiny_checkpoint):
    return StandardizedTransformer(tiny_checkpoint(request.param), task="image-text-to-text")


@pytest.fixture(scope="module")
def pp(tiny_checkpoint):
    return StandardizedTransformer(tiny_checkpoint("pp_chart2table"), task="image-text-to-text")


def prompt(model, count=2):
    return chat_prompt(model.processor, count, "what is it")


def windows(grid: torch.Tensor, side: int) -> torch.Tensor:
    """``[images, height, width, width]`` cut into ``side`` x ``side`` windows, by hand: the grid padded with zeros
    at its bottom and right to a multiple of ``side``, windows in raster order, image after image."""
    images, height, width, channels = grid.shape
    rows, columns = -(-height // side), -(-width // side)
    padded = grid.new_zeros(images, rows * side, columns * side, channels)
    padded[:, :height, :width] = grid
    return torch.stack([padded[i, r * side:(r + 1) * side, c * side:(c + 1) * side]
                        for i in range(images) for r in range(rows) for c in range(columns)])


def test_the_neck_and_the_projector_chain_the_last_block_to_image_features(model):
    side = GRID[model.config.model_type]
    with model.trace(prompt(model), images=IMAGES) as tracer:
        last = model.vision.layers[-1].layer_output.save()
        tower = model.vision.tower_output.save()
        received = model.projector.input.save()
        projected = model.projector.output.save()
        features = model.vision.image_features.save()
        tracer.stop()
    assert torch.equal(tower, last)  # no final norm: the neck is after tower_output
    neck = model.vision.neck._module
    # the neck: a 1x1 convolution, a channels-first layer norm, a 3x3 convolution, a layer norm, on the grid
    grid = last.unflatten(1, (side, side)).permute(0, 3, 1, 2)
    norm1, norm2 = neck.layer_norm1, neck.layer_norm2

    def channel_norm(x, norm):
        return F.layer_norm(x.permute(0, 2, 3, 1), norm.normalized_shape, norm.weight, norm.bias, norm.eps).permute(0, 3, 1, 2)

    expected = channel_norm(F.conv2d(channel_norm(F.conv2d(grid, neck.conv1.weight), norm1), neck.conv2.weight,
                                     padding=1), norm2)
    channels = model.vision.output_channels
    assert received.shape == (2, channels, side, side) and channels != model.vision.vision_hidden_size
    assert torch.equal(received, expected)
    projector = model.projector._module
    folded = F.conv2d(F.conv2d(received, projector.conv_upsampler1.weight, stride=2, padding=1),
                      projector.conv_upsampler2.weight, stride=2, padding=1)
    assert folded.shape == (2, model.hidden_size, side // 4, side // 4)
    tokens = folded.flatten(2).transpose(1, 2)  # raster order over the folded grid, image after image
    assert torch.equal(projected, F.linear(tokens, projector.multimodal_projector.weight,
                                           projector.multimodal_projector.bias))
    assert torch.equal(features, projected.reshape(-1, model.hidden_size))


def test_a_windowed_blocks_interior_is_per_window_and_its_attention_output_back_on_the_grid(model):
    side = GRID[model.config.model_type]
    per_side = -(-side // WINDOW)
    block = model.vision.layers[0]
    assert block.windowed and block.window_size == WINDOW
    with model.trace(prompt(model), images=IMAGES) as tracer:
        normed = block.input_layernorm.output.save()  # layer_norm1
        entering = block.self_attn.inputs.save()
        queries = block.self_attn.attention_queries.save()
        values = block.self_attn.attention_values.save()
        probabilities = block.self_attn.attention_probabilities.save()
        heads = block.self_attn.attention_head_outputs.save()
        own = block.self_attn.output[0].save()
        added = block.attention_output.save()
        tracer.stop()
    rows, heads_count = 2 * per_side**2, model.vision.num_heads
    cut = windows(normed, WINDOW)
    assert torch.equal(entering[1]["hidden_states"], cut)  # the attention runs on the windows, padding zeros
    assert queries.shape == values.shape == (rows, heads_count, WINDOW**2, model.vision.head_dim)
    qkv = block.self_attn.qkv._module(cut).reshape(rows, WINDOW**2, 3, heads_count, -1)
    for head in range(heads_count):
        assert torch.equal(queries[:, head], qkv[:, :, 0, head])
        assert torch.equal(values[:, head], qkv[:, :, 2, head])
    assert probabilities.shape == (rows, heads_count, WINDOW**2, WINDOW**2)
    joined = (probabilities.flatten(0, 1) @ values.flatten(0, 1)).unflatten(0, (rows, heads_count))
    assert torch.equal(heads, joined.transpose(1, 2))
    # what the block adds is the attention's output put back on the grid, the padding cropped
    assert own.shape == (rows, WINDOW, WINDOW, model.vision.vision_hidden_size)
    grid = torch.stack([torch.cat([torch.cat(list(own[i * per_side**2 + r * per_side:][:per_side]), dim=1)
                                   for r in range(per_side)], dim=0) for i in range(2)])
    assert torch.equal(added, grid[:, :side, :side].flatten(1, 2))


def test_an_edit_of_one_patch_reaches_its_window_alone_on_a_windowed_block_and_every_patch_on_a_global_one(pp):
    side, patch = GRID["pp_chart2table"], 20 * GRID["pp_chart2table"] + 5  # row 20, column 5: window (1, 0)
    assert [block.windowed for block in pp.vision.layers] == [True, False]
    text = prompt(pp, 1)
    with pp.trace(text, images=IMAGES[:1]) as tracer:
        clean = nnsight.save([])
        for block in pp.vision.layers:
            clean.append(block.attention_output.save())
        tracer.stop()
    for index in (0, 1):
        with pp.trace(text, images=IMAGES[:1]) as tracer:
            # not a constant: the block's layer norm would take it out again
            pp.vision.layers[index].layer_input[0, patch] += torch.linspace(-1.0, 1.0, 32)
            edited = pp.vision.layers[index].attention_output.save()
            tracer.stop()
        changed = (edited != clean[index]).any(-1)[0].reshape(side, side)
        if index == 0:
            inside = torch.zeros(side, side, dtype=torch.bool)
            inside[WINDOW:2 * WINDOW, 0:WINDOW] = True
            assert bool(changed[inside].all()) and not bool(changed[~inside].any())
        else:
            assert bool(changed.all())


def test_the_global_blocks_pattern_is_over_every_patch_of_its_image(pp):
    with pp.trace(prompt(pp), images=IMAGES) as tracer:
        scores = pp.vision.layers[1].self_attn.attention_scores.save()
        probabilities = pp.vision.layers[1].self_attn.attention_probabilities.save()
        tracer.stop()
    patches = GRID["pp_chart2table"] ** 2
    assert probabilities.shape == scores.shape == (2, pp.vision.num_heads, patches, patches)
    assert torch.equal(probabilities, torch.softmax(scores, dim=-1))


@pytest.mark.parametrize("index", [0, 1], ids=["windowed", "global"])
def test_zero_queries_written_make_the_pattern_uniform(pp, index):
    """The queries enter both the query-key products and the relative position terms: zeroed, every score is 0."""
    attention = pp.vision.layers[index].self_attn
    with pp.trace(prompt(pp, 1), images=IMAGES[:1]) as tracer:
        if index == 0:
            attention.attention_queries[:] = 0  # in place, through the view of the qkv linear's output
        else:
            attention.attention_queries = torch.zeros_like(attention.attention_queries)  # assigned
        keys = attention.attention_keys.save()
        probabilities = attention.attention_probabilities.save()
        tracer.stop()
    assert bool(keys.abs().sum() > 0)  # the keys are the qkv output's other part, untouched
    positions = probabilities.shape[-1]
    assert torch.equal(probabilities, torch.full_like(probabilities, 1 / positions))


def test_a_zeroed_attention_output_leaves_the_stream_plus_the_mlp_on_a_windowed_block(model):
    block = model.vision.layers[0]
    with model.trace(prompt(model, 1), images=IMAGES[:1]) as tracer:
        clean = block.mlp_output.save()
        tracer.stop()
    with model.trace(prompt(model, 1), images=IMAGES[:1]) as tracer:
        entering = block.layer_input.save()
        block.attention_output[:] = 0
        mlp = block.mlp_output.save()
        leaving = block.layer_output.save()
        tracer.stop()
    assert torch.equal(entering + mlp, leaving)
    assert not torch.equal(mlp, clean)


def test_pp_chart2table_prompts_hold_every_image_token(pp):
    text = prompt(pp, 2)
    assert text.count("<imgpad>") == 2 * 64 and text.count("<img>") == 2
    inputs = pp.processor(text=[text], images=IMAGES, return_tensors="pt")
    assert int((inputs["input_ids"] == pp.config.image_token_id).sum()) == 2 * 64
    with pytest.raises(ValueError, match="Both `images` and `text` must be provided"):
        pp.processor(text=[text])


def test_the_grids_are_the_patch_grid_and_the_folded_grid_image_after_image(pp):
    side = GRID["pp_chart2table"]
    with pp.trace(prompt(pp), images=IMAGES) as tracer:
        stream = pp.vision.layers[0].layer_input.save()
        projected = pp.projector.output.save()
        features = pp.vision.image_features.save()
        tracer.stop()
    for image in (0, 1):
        # the stream row of image ``image`` is its side x side grid, raster order (the tower's own grid, by hand)
        assert torch.equal(pp.vision.patch_grid(stream, image=image), stream[image].reshape(side, side, -1))
        # its tokens are the projector's output for it, on the folded grid (a quarter of the side), raster order
        folded = projected[image].reshape(side // 4, side // 4, -1)
        assert torch.equal(pp.vision.token_grid(features, image=image), folded)
