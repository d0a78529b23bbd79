"""StandardizedTransformer on a tiny Ovis2 checkpoint: tiles with the thumbnail first, the visual tokenizer (a softmax
over a visual vocabulary, then an embedding table) and the indicator tokens, exact.

Every expected number comes from outside the code under test: the builder's
documented sizes (32 pixel tiles of 4 pixel patches, 8x8 patches a tile; a
2x2 fold, 4x4 tokens a tile; a visual vocabulary of 64 words, the last 5 the
indicator tokens'; a 32x32 image is 1 tile, a 64 wide x 48 high one the
thumbnail and 2x2 tiles), the stock processor's outputs, the modules' own
weights, or a recomputation from other values read in the same trace. The
spec's contracts run on it in test_vision_contracts.py.
"""

from __future__ import annotations

import pytest
import torch
from family_inputs import prompt

from envoys.testing import noise_image

#: The builder's sizes: a tile is 8x8 patches; the tokenizer folds 2x2 of them into one token, 4x4 a tile.
SIDE, STRIDE = 8, 2
TOKENS = (SIDE // STRIDE) ** 2
VISUAL_VOCAB, INDICATORS = 64, 5
#: 32x32 (1 tile) and 64 wide x 48 high (the thumbnail, then a 2x2 grid): tiles 0 | 1 | 2 3 4 5.
TWO = [noise_image(32, 32, seed=0), noise_image(64, 48, seed=1)]
INDICATOR_TOKENS = ("<IMG_START>", "<IMG_GRID>", "<IMG_COL>", "<IMG_ROW>", "<IMG_END>")


CHECKPOINT = "ovis2"


def processed(model, images) -> dict:
    return model.processor(text=[prompt(model, images)], images=images, return_tensors="pt")


def test_the_towers_sizes(model):
    assert (model.vision.image_size, model.vision.patch_size, model.vision.hidden_stride) == (32, 4, STRIDE)


def test_the_towers_rows_are_the_processors_tiles_thumbnail_first(model):
    with model.trace(prompt(model, TWO), images=TWO) as tracer:
        pixels = model.vision.input.save()
        stream = model.vision.layers[0].layer_input.save()
        tracer.stop()
    given = processed(model, TWO)["pixel_values"]
    assert given.shape == (1 + 1 + 2 * 2, 3, 32, 32)
    assert torch.equal(pixels, given)
    assert stream.shape == (6, SIDE * SIDE, model.vision.vision_hidden_size)


def folded_by_hand(value: torch.Tensor) -> torch.Tensor:
    """``[tiles, 64, width]`` -> ``[tiles, 16, 4 * width]``: each 2x2 block of a tile's 8x8 patches joined on the
    feature axis, its top row first, left to right; blocks in raster order."""
    tiles, _, width = value.shape
    blocks = value.reshape(tiles, SIDE // STRIDE, STRIDE, SIDE // STRIDE, STRIDE, width)  # tile, R, dr, C, dc
    return blocks.permute(0, 1, 3, 2, 4, 5).reshape(tiles, TOKENS, STRIDE * STRIDE * width)


def test_the_visual_tokens_are_the_softmax_of_the_heads_logits_over_the_folded_tower_output(model):
    with model.trace(prompt(model, TWO), images=TWO) as tracer:
        output = model.vision.tower_output.save()
        tokens = model.projector.visual_tokens.save()
        received = model.projector.input.save()
        projected = model.projector.output.save()
        features = model.vision.image_features.save()
        tracer.stop()
    tower = model._module.model.vision_tower
    assert tokens.shape == (6, TOKENS, VISUAL_VOCAB - INDICATORS)
    logits = tower.head_norm(tower.head_linear(folded_by_hand(output)))
    assert torch.equal(tokens, torch.softmax(logits, dim=-1))
    torch.testing.assert_close(tokens.sum(-1), torch.ones(6, TOKENS), rtol=0, atol=1e-6)
    # the host pads each row with zeros for the indicator words, and the table weighs its rows by them
    assert torch.equal(received, torch.cat([tokens, torch.zeros(6, TOKENS, INDICATORS)], dim=-1))
    assert torch.equal(projected, received @ model.projector._module.weight)
    assert torch.equal(features, projected.reshape(-1, model.hidden_size))  # tile after tile, raster order


def test_a_visual_word_written_for_every_token_puts_its_embedding_at_every_image_token(model):
    word = 7
    with model.trace(prompt(model, TWO), images=TWO) as tracer:
        mask = model.vision.image_token_mask.save()
        tokens = model.projector.visual_tokens
        one_hot = torch.zeros_like(tokens)
        one_hot[..., word] = 1.0
        model.projector.visual_tokens = one_hot
        features = model.vision.image_features.save()
        first = model.layers[0].input.save()
        tracer.stop()
    row = model.projector._module.weight[word]
    assert torch.equal(features, row.expand(6 * TOKENS, -1))
    assert torch.equal(first[mask], features)


def test_the_indicator_tokens_hold_the_tables_last_rows_and_only_the_image_tokens_the_features(model):
    batch = processed(model, TWO)
    with model.trace(prompt(model, TWO), images=TWO) as tracer:
        mask = model.vision.image_token_mask.save()
        features = model.vision.image_features.save()
        first = model.layers[0].input.save()
        tracer.stop()
    ids = batch["input_ids"][0]
    table = model.projector._module.weight
    tokenizer = model.processor.tokenizer
    for index, token in enumerate(INDICATOR_TOKENS):
        at = ids == tokenizer.convert_tokens_to_ids(token)
        # <IMG_START>, <IMG_GRID> and <IMG_END> once per image; in the 2x2 grid <IMG_COL> once a row, <IMG_ROW> once
        assert int(at.sum()) == (1 if token == "<IMG_ROW>" else 2), token
        assert torch.equal(first[0, at], table[VISUAL_VOCAB - INDICATORS + index].expand(int(at.sum()), -1)), token
    assert torch.equal(first[mask], features)
    assert int(mask.sum()) == TOKENS + 5 * TOKENS


@pytest.mark.parametrize("image,row,column", [(0, 5, 3), (1, 3, 13), (1, 12, 2)])
def test_a_patch_placed_on_the_grid_reaches_the_token_of_its_block_on_the_token_grid(model, image, row, column):
    text = prompt(model, TWO)
    with model.trace(text, images=TWO) as tracer:
        clean = model.vision.image_features.save()
        tracer.stop()
    with model.trace(text, images=TWO) as tracer:
        output = model.vision.tower_output
        grid = model.vision.patch_grid(output, image=image)
        grid[row, column] += 1.0
        model.vision.place_patch_grid(grid, into=output, image=image)
        edited = model.vision.image_features.save()
        tracer.stop()
    before, after = (model.vision.token_grid(features, image=image) for features in (clean, edited))
    assert (before != after).any(-1).nonzero().tolist() == [[row // STRIDE, column // STRIDE]]
    other = 1 - image
    assert torch.equal(model.vision.token_grid(edited, image=other), model.vision.token_grid(clean, image=other))
    thumbnail = slice(TOKENS, 2 * TOKENS)  # image 1's thumbnail: in its span, off its grid
    assert torch.equal(edited[thumbnail], clean[thumbnail])


def test_the_grids_place_the_grid_tiles_after_the_thumbnail(model):
    with model.trace(prompt(model, TWO), images=TWO) as tracer:
        patches = model.vision.patch_embeddings.save()
        features = model.vision.image_features.save()
        tracer.stop()
    grid, tokens = model.vision.patch_grid(patches, image=1), model.vision.token_grid(features, image=1)
    assert grid.shape == (2 * SIDE, 2 * SIDE, model.vision.vision_hidden_size)
    side = SIDE // STRIDE
    assert tokens.shape == (2 * side, 2 * side, model.hidden_size)
    for tile, (r, c) in enumerate([(0, 0), (0, 1), (1, 0), (1, 1)], start=2):  # tiles 2..5, after the thumbnail
        assert torch.equal(grid[r * SIDE:(r + 1) * SIDE, c * SIDE:(c + 1) * SIDE],
                           patches[tile].reshape(SIDE, SIDE, -1)), tile
        assert torch.equal(tokens[r * side:(r + 1) * side, c * side:(c + 1) * side],
                           features[tile * TOKENS:(tile + 1) * TOKENS].reshape(side, side, -1)), tile
    assert torch.equal(model.vision.patch_grid(patches, image=0), patches[0].reshape(SIDE, SIDE, -1))
