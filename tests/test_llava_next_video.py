"""LLaVA-NeXT-Video: what is particular to it, beyond the vision contracts (tests/test_vision_contracts.py).

On images it is LLaVA-NeXT in classes of its own: the same tiles, packing and
newline rows (checked with tests/test_llava_next.py's helpers, which rebuild
them from the stock processor's outputs, the config and the host's
``image_newline``), served by LLaVA-NeXT's envoys and grids. Its stock
processor carries a video processor; a prompt without a video runs the tower
once, on the images' tiles, and never reaches the video pooler. Expected values
come from the processor's outputs, the config, the modules' weights, and the
image path run by hand (``get_image_features``) outside the trace.
"""

from __future__ import annotations

import torch
from test_llava_next import grid_shape, packed, patch_side, processed, prompt, tiles_per_image
from video_edits import assert_a_patch_edit_moves_its_token

from envoys.testing import noise_image

#: 32x32 (a base tile and a 1x2 grid: 36 tokens) and 64 wide x 48 high (a base tile and a 2x2 grid: 70 tokens).
IMAGES = [noise_image(32, 32, seed=5), noise_image(64, 48, seed=6)]


CHECKPOINT = "llava_next_video"


def test_loads_with_its_stock_processor(model):
    processor = model.processor
    assert type(processor).__name__ == "LlavaNextVideoProcessor"
    assert type(processor.image_processor).__name__ in ("LlavaNextImageProcessor", "LlavaNextImageProcessorPil")
    assert type(processor.video_processor).__name__ == "LlavaNextVideoVideoProcessor"
    assert type(model.layers[0].self_attn._module).__name__ == "LlamaAttention"
    assert "one row per tile" in repr(model)


def test_a_video_free_prompt_runs_the_tower_once_on_the_images_tiles_and_not_the_video_pooler(model):
    model.dispatch()  # the weights loaded, so that the hooks go on the modules that run
    inputs = processed(model, IMAGES)
    assert "pixel_values_videos" not in inputs
    counts = tiles_per_image(model, IMAGES)
    assert counts == [1 + rows * columns for rows, columns in (grid_shape(model, s) for s in inputs["image_sizes"])]
    host = model._module.model
    calls = {"tower": 0, "pooler": 0}
    hooks = [host.vision_tower.register_forward_hook(lambda *_: calls.__setitem__("tower", calls["tower"] + 1)),
             host.vision_resampler.register_forward_hook(lambda *_: calls.__setitem__("pooler", calls["pooler"] + 1))]
    try:
        with model.trace(prompt(model, IMAGES), images=IMAGES):
            mask = model.vision.image_token_mask.save()
            pixels = model.vision.input.save()
            stream = model.vision.layers[0].layer_input.save()
    finally:
        for hook in hooks:
            hook.remove()
    assert calls == {"tower": 1, "pooler": 0}
    assert torch.equal(mask, inputs["input_ids"] == model.config.image_token_id)
    assert torch.equal(pixels, torch.cat([image[:count] for image, count in zip(inputs["pixel_values"], counts)]))
    assert stream.shape == (sum(counts), 1 + patch_side(model) ** 2, model.vision.vision_hidden_size)


def test_image_features_are_llava_nexts_packing_with_newline_rows_and_the_image_path(model):
    inputs = processed(model, IMAGES)
    with model.trace(prompt(model, IMAGES), images=IMAGES):
        received = model.projector.input.save()
        projected = model.projector.output.save()
        features = model.vision.image_features.save()
    host = model._module.model
    sizes = inputs["image_sizes"].tolist()
    newline = host.image_newline.detach()
    expected = packed(projected, sizes, [grid_shape(model, size) for size in sizes], patch_side(model), newline)
    assert torch.equal(features, torch.cat(expected))
    # one newline row after each of an image's grid rows: 4 for the 32x32 image's 4x4 grid, 6 for the 6x8 one's
    counts = [len(rows) for rows in expected]
    assert counts == [16 + 4 * 5, 16 + 6 * 9]
    for rows, grid_rows in zip(features.split(counts), (4, 6)):
        assert int((rows == newline).all(-1).sum()) == grid_rows
    # the image path, run by hand on the plain modules: the same tensors
    with torch.no_grad():
        image_path = host.get_image_features(inputs["pixel_values"], inputs["image_sizes"], return_dict=True)
    assert torch.equal(features, torch.cat(image_path.pooler_output))
    assert torch.equal(received, image_path.hidden_states[-2][:, 1:])


def test_the_grids_are_llava_nexts(model):
    with model.trace(prompt(model, IMAGES), images=IMAGES):
        stream = model.vision.layers[0].layer_input.save()
        features = model.vision.image_features.save()
    side = patch_side(model)
    # the 64 wide x 48 high image: tiles 3 + 1 .. 3 + 4 (after the first image's 3 and its base tile) on a 2x2
    # canvas of 8x8 patches, its top and bottom patch rows cropped; CLS first in each tile's row
    grid = model.vision.patch_grid(stream, image=1)
    assert grid.shape == (6, 8, model.vision.vision_hidden_size)
    for r in range(6):
        for c in range(8):
            tile = 3 + 1 + ((r + 1) // side) * 2 + c // side
            assert torch.equal(grid[r, c], stream[tile, 1 + ((r + 1) % side) * side + c % side]), (r, c)
    tokens = model.vision.token_grid(features, image=1)
    assert tokens.shape == (6, 8, model.hidden_size)
    for r in range(6):
        start = 36 + side * side + r * 9  # the first image's 36 tokens, this one's base tile, r rows of 8 + newline
        assert torch.equal(tokens[r], features[start: start + 8]), r


def test_a_patch_edited_in_the_layer_the_projector_reads_moves_the_token_on_its_frames_grid(model):
    """The projector reads block ``vision_feature_layer`` patch by patch (the 2x2 average pool of its resampler after the block)."""
    assert_a_patch_edit_moves_its_token(model, pooled=2)
