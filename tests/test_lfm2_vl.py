"""LFM2-VL: what is particular to it, beyond the vision contracts (tests/test_vision_contracts.py).

The tower's rows are padded to the processor's fixed count (80 on the tiny
checkpoint) with the padded keys masked; the projector gathers each 2x2 block
of a row's real patches into a token slot, every row given 80 / 4 = 20 slots,
and the host drops the padding slots; the text model mixes convolution and
attention blocks. Expected numbers come from the builder's documentation
(envoys/testing/lfm2_vl.py), the stock processor's outputs (``spatial_shapes``,
``pixel_attention_mask``, ``pixel_values``) and the modules' own weights.
"""

from __future__ import annotations

import pytest

pytest.importorskip("transformers.models.lfm2_vl", reason="target absent: this transformers release has no lfm2_vl")
import nnsight
import numpy as np
import torch
from family_inputs import prompt

from envoys import Unavailable
from envoys.testing import noise_image, patch_coloured_image

ONE = [noise_image(32, 32, seed=0)]
TWO = [noise_image(32, 32, seed=0), noise_image(64, 48, seed=1)]  # 32x32, and 64 wide by 48 high
#: The builder's rows: 32x32 is one 8x8 row; 64x48 is 2x2 tiles of 8x8 and a thumbnail 6 patches high, 10 wide.
GRIDS = [(8, 8)] + [(8, 8)] * 4 + [(6, 10)]
ROWS, FACTOR, PATCH = 80, 2, 4
SLOTS = ROWS // FACTOR**2


CHECKPOINT = "lfm2_vl"


def processed(model, images) -> dict:
    return model.processor(text=[prompt(model, images)], images=images, return_tensors="pt")


def real_rows() -> torch.Tensor:
    """``[rows, 80]`` bool: each row's real patches (its grid's, first) for the two images, as the builder says."""
    return torch.stack([torch.arange(ROWS) < h * w for h, w in GRIDS])


def fold(tower: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """By hand: each row's 2x2 blocks of real patches, raster order, as ``[slots, 4 * width]`` (each block's patches
    (0, 0), (0, 1), (1, 0), (1, 1) joined), every row's 20 slots in turn; a padding slot holds row 0's first patch
    four times. And ``[slots]`` bool: which slots are a real block."""
    folded, real = [], []
    for row, (h, w) in enumerate(GRIDS):
        grid = tower[row, : h * w].reshape(h, w, -1)
        blocks = grid.reshape(h // 2, 2, w // 2, 2, -1).permute(0, 2, 1, 3, 4).reshape((h // 2) * (w // 2), -1)
        pad = tower[0, 0].repeat(4)[None].expand(SLOTS - len(blocks), -1)
        folded.append(torch.cat([blocks, pad]))
        real.append(torch.arange(SLOTS) < len(blocks))
    return torch.cat(folded), torch.cat(real)


# -- the padded rows -------------------------------------------------------------------------------


def test_patch_mask_is_the_processors_pixel_attention_mask(model):
    inputs = processed(model, TWO)
    assert inputs["spatial_shapes"].tolist() == [list(grid) for grid in GRIDS]
    with model.trace(prompt(model, TWO), images=TWO):
        patch_mask = model.vision.patch_mask.save()
        patches = model.vision.patch_embeddings.save()
    assert torch.equal(patch_mask, inputs["pixel_attention_mask"].bool())
    assert torch.equal(patch_mask, real_rows())
    with torch.no_grad():
        assert torch.equal(patches, model.vision.patch_embed._module(inputs["pixel_values"]))


def test_patch_mask_is_read_only(model):
    with pytest.raises(AttributeError, match="vision.patch_mask is read-only"):
        with model.trace(prompt(model, ONE), images=ONE):
            model.vision.patch_mask = torch.ones(1, ROWS, dtype=torch.bool)


def test_the_pattern_is_zero_on_padded_keys_and_sums_to_one_over_real_ones(model):
    attention = [layer.self_attn for layer in model.vision.layers]
    with model.trace(prompt(model, TWO), images=TWO):
        values = attention[0].attention_values.save()
        scores = attention[0].attention_scores.save()
        patterns = nnsight.save([attention[0].attention_probabilities])
        heads = attention[0].attention_head_outputs.save()
        patterns.append(attention[1].attention_probabilities.save())
    assert torch.equal(scores.softmax(-1), patterns[0])
    assert torch.equal(patterns[0] @ values, heads.transpose(1, 2))
    real = real_rows()
    for pattern in patterns:
        for row, keep in enumerate(real):
            rows = pattern[row]  # [heads, queries, keys], padded queries included
            assert torch.equal(rows[..., ~keep], torch.zeros_like(rows[..., ~keep]))
            assert bool((rows[..., keep] > 0).all())
            torch.testing.assert_close(rows[..., keep].sum(-1), torch.ones(rows.shape[:2]), rtol=0, atol=1e-6)


def test_padded_rows_never_reach_the_text_model(model):
    text = prompt(model, TWO)
    real = real_rows()
    with model.trace(text, images=TWO):
        clean_tower = model.vision.tower_output.save()
        clean_features = model.vision.image_features.save()
        clean = model.logits.save()
    with model.trace(text, images=TWO):
        patches = model.vision.patch_embeddings
        noise = torch.randn(patches.shape, generator=torch.Generator().manual_seed(0)) * 100
        model.vision.patch_embeddings = torch.where(real[..., None], patches, noise)
        tower = model.vision.tower_output.save()
        features = model.vision.image_features.save()
        logits = model.logits.save()
    assert not torch.equal(tower[~real], clean_tower[~real])  # the padded rows did change
    assert torch.equal(tower[real], clean_tower[real])
    assert torch.equal(features, clean_features) and torch.equal(logits, clean)


# -- the 2x2 gather and the padding slots ------------------------------------------------------------


def test_the_projector_reads_each_rows_2x2_blocks_and_keeps_padding_slots_the_scatter_drops(model):
    with model.trace(prompt(model, TWO), images=TWO):
        tower = model.vision.tower_output.save()
        received = model.projector.input.save()
        projected = model.projector.output.save()
        features = model.vision.image_features.save()
    width = model.vision.vision_hidden_size
    folded, real = fold(tower)
    assert received.shape == (1, FACTOR, len(GRIDS) * SLOTS * FACTOR, width)
    # projector.input holds slot s's patch (dy, dx) at [0, dy, s * 2 + dx]
    by_slot = received[0].reshape(FACTOR, len(GRIDS) * SLOTS, FACTOR, width).permute(1, 0, 2, 3).flatten(1)
    assert torch.equal(by_slot, folded)
    projector = model.projector._module
    with torch.no_grad():
        expected = projector.linear_2(projector.act(projector.linear_1(projector.layer_norm(folded))))
    assert projected.shape == (1, 1, len(GRIDS) * SLOTS, model.hidden_size)
    assert torch.equal(projected[0, 0], expected)
    assert int(real.sum()) == 16 + 79 and int((~real).sum()) == 6 * SLOTS - 95
    assert torch.equal(features, projected[0, 0][real])


def test_an_edit_of_one_patch_reaches_the_token_of_its_block_alone(model):
    text = prompt(model, TWO)
    row, (y, x) = 5, (3, 7)  # the thumbnail's patch at row 3, column 7: its block (1, 3), the thumbnail's token 1 * 5 + 3
    with model.trace(text, images=TWO):
        clean = model.vision.image_features.save()
    with model.trace(text, images=TWO):
        model.vision.tower_output[row, y * 10 + x] = 3.0
        edited = model.vision.image_features.save()
    token = 16 + 4 * 16 + (y // 2) * 5 + x // 2
    changed = (edited != clean).any(-1)
    assert changed.nonzero().flatten().tolist() == [token]


def test_no_slot_reads_a_padded_row_of_the_tower(model):
    text = prompt(model, TWO)
    real = real_rows()
    with model.trace(text, images=TWO):
        clean = model.projector.output.save()
    with model.trace(text, images=TWO):
        tower = model.vision.tower_output
        model.vision.tower_output = torch.where(real[..., None], tower, torch.full_like(tower, 7.0))
        edited = model.projector.output.save()
    assert torch.equal(edited, clean)


# -- LFM2's convolution and attention blocks ----------------------------------------------------------


def test_every_block_adds_its_mixer_and_its_mlp(model):
    """A convolution block adds ``conv.output``, an attention block ``attention_output``; both then their MLP."""
    assert model.config.text_config.layer_types == ["conv", "full_attention"]
    with model.trace(prompt(model, ONE), images=ONE):
        conv_block = nnsight.save([model.layers[0].layer_input, model.layers[0].conv.output,
                                   model.layers[0].mlp_output, model.layers[0].layer_output])
        attention_block = nnsight.save([model.layers[1].layer_input, model.layers[1].attention_output,
                                        model.layers[1].mlp_output, model.layers[1].layer_output])
    for layer_input, mixed, mlp, output in (conv_block, attention_block):
        assert torch.equal(layer_input + mixed + mlp, output)
        assert not torch.equal(mixed, torch.zeros_like(mixed)) and not torch.equal(mlp, torch.zeros_like(mlp))
    assert torch.equal(attention_block[0], conv_block[3])


def test_a_convolution_block_says_it_has_no_attention_values(model):
    reason = (r"layers\[0\]'s token mixer is a gated short convolution, conv, not softmax attention, so it has no "
              r"self_attn values; what it adds to the stream is layers\[0\]\.conv\.output")
    with pytest.raises(Unavailable, match=rf"layers\[0\]\.attention_output is unavailable: {reason}"):
        model.layers[0].attention_output
    rows = model.layers[0].support()
    attention_rows = [name for name in rows if name.startswith("self_attn.")]
    assert "self_attn.attention_probabilities" in attention_rows
    for name in ["attention_output", *attention_rows]:
        assert rows[name] is not None and "gated short convolution, conv" in rows[name], name
    assert rows["mlp_output"] is None and rows["layer_output"] is None
    assert all(reason is None for reason in model.layers[1].support().values())
    assert set(model.support()["self_attn.attention_probabilities"]) == {0}


def test_the_attention_blocks_pattern_is_causal(model):
    with model.trace(prompt(model, ONE), images=ONE):
        pattern = model.layers[1].self_attn.attention_probabilities.save()
    upper = torch.triu(torch.ones(pattern.shape[-2:], dtype=torch.bool), diagonal=1)
    assert torch.equal(pattern[..., upper], torch.zeros_like(pattern[..., upper]))
    torch.testing.assert_close(pattern.sum(-1), torch.ones(pattern.shape[:-1]), rtol=0, atol=1e-6)


def test_the_final_norm_is_embedding_norm_and_feeds_the_head(model):
    with model.trace(prompt(model, ONE), images=ONE):
        last = model.layers[-1].layer_output.save()
        normed = model.norm.output.save()
        logits = model.logits.save()
    with torch.no_grad():
        assert torch.equal(normed, model._module.model.language_model.embedding_norm(last))
        assert torch.equal(logits, model._module.lm_head(normed))


# -- the grids -------------------------------------------------------------------------------------


def test_the_patch_grid_puts_each_tiles_patches_where_they_are_in_the_image(model):
    """A 64x64 image of 16x16 patches is cut, unresized, into 2x2 tiles of 32 pixels (and a thumbnail); its patch
    grid of the processor's own flat patches is the image's patches, normalised ((x / 255 - 0.5) / 0.5)."""
    images = [noise_image(32, 32, seed=0), patch_coloured_image(16, 16, PATCH)]
    inputs = processed(model, images)
    assert inputs["spatial_shapes"].tolist() == [[8, 8]] * 6  # one row, then 2x2 tiles and an 8x8 thumbnail
    with model.trace(prompt(model, images), images=images) as tracer:
        model.vision.image_token_mask.save()
        tracer.stop()
    for image, picture in enumerate(images):
        pixels = (torch.tensor(np.asarray(picture), dtype=torch.float32) / 255 - 0.5) / 0.5
        height, width = pixels.shape[0] // PATCH, pixels.shape[1] // PATCH
        patches = pixels.reshape(height, PATCH, width, PATCH, 3).permute(0, 2, 1, 3, 4).reshape(height, width, -1)
        grid = model.vision.patch_grid(inputs["pixel_values"], image=image)
        torch.testing.assert_close(grid, patches, rtol=0, atol=1e-6)


def test_the_token_grid_stitches_the_tiles_tokens_and_an_edited_patch_reaches_its_cell_alone(model):
    text = prompt(model, TWO)
    with model.trace(text, images=TWO):
        clean = model.vision.image_features.save()
    tokens = model.vision.token_grid(torch.arange(95)[:, None], image=1)[..., 0]
    # 2x2 tiles of 4x4 tokens after the first image's 16, tile after tile in raster order (the thumbnail off the grid)
    r, c = torch.meshgrid(torch.arange(8), torch.arange(8), indexing="ij")
    assert torch.equal(tokens, 16 + ((r // 4) * 2 + c // 4) * 16 + (r % 4) * 4 + c % 4)
    rows = model.vision.patch_grid(torch.arange(6 * ROWS).reshape(6, ROWS, 1), image=1)[..., 0]
    assert rows.shape == (16, 16)
    y, x = 9, 5
    row, patch = divmod(int(rows[y, x]), ROWS)
    with model.trace(text, images=TWO):
        model.vision.tower_output[row, patch] = 3.0
        edited = model.vision.image_features.save()
    changed = (edited != clean).any(-1)
    assert changed.nonzero().flatten().tolist() == [int(tokens[y // 2, x // 2])]
