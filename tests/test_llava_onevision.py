"""StandardizedTransformer on a tiny LLaVA-OneVision checkpoint: a SigLIP tower on anyres tiles, exact.

Every expected number comes from outside the code under test: the stock
processor's ``pixel_values`` (its tile axis), ``image_sizes`` and
``batch_num_images``, the config's ``image_grid_pinpoints`` and
``vision_aspect_ratio``, the modules' own weights (``image_newline``),
transformers' own anyres functions, or a recomputation from other values read
in the same trace. The spec's contracts run on this checkpoint in
test_vision_contracts.py; this file holds what is particular to
LLaVA-OneVision: LLaVA-NeXT's packing on a SigLIP tower, the interpolation that
shrinks a large image's feature grid, and images that share a prompt, which are
not cut into tiles.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from transformers.image_processing_utils import select_best_resolution

from envoys.testing import chat_prompt, noise_image, noise_video

ONE = [noise_image(32, 32, seed=0)]
#: 32x32 (a 1x1 grid), 64 wide x 48 high (2x2, its padding's rows cropped), 200 wide x 100 high (3x6, shrunk).
THREE = [noise_image(32, 32, seed=0), noise_image(64, 48, seed=1), noise_image(200, 100, seed=2)]
SIDE = 4  # a 32 pixel tile of 8 pixel patches


CHECKPOINT = "llava_onevision"


def prompt(model, count) -> str:
    return chat_prompt(model.processor, count, "What colour is this?")


def processed(model, images, count=None) -> dict[str, torch.Tensor]:
    text = prompt(model, count if count is not None else len(images))
    return model.processor(text=[text], images=images, return_tensors="pt")


def grid_shape(model, image_size) -> tuple[int, int]:
    """``(rows, columns)`` of grid tiles: the best pinpoint resolution for the image's (height, width), in tiles."""
    tile = model.config.vision_config.image_size
    height, width = select_best_resolution(tuple(image_size), model.config.image_grid_pinpoints)
    return height // tile, width // tile


def unpadded_and_shrunk(model, grid: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """The host's feature grid of one image, ``[channels, rows, columns]`` stitched from its grid tiles: the padding's
    rows or columns cropped (the image's aspect ratio against the grid's), then, past about 1.1 x 9 tiles' worth of
    patches, shrunk by bilinear interpolation (``vision_aspect_ratio`` "anyres_max_9")."""
    _, grid_h, grid_w = grid.shape
    if width / height > grid_w / grid_h:  # wider than the grid: padding above and below
        crop = (grid_h - int(round(height * grid_w / width, 7))) // 2
        grid = grid[:, crop: grid_h - crop]
    else:
        crop = (grid_w - int(round(width * grid_h / height, 7))) // 2
        grid = grid[:, :, crop: grid_w - crop]
    assert model.config.vision_aspect_ratio == "anyres_max_9"
    _, rows, columns = grid.shape
    ratio = math.sqrt(rows * columns / (9 * SIDE**2))
    if ratio > 1.1:
        grid = F.interpolate(grid[None], [int(rows // ratio), int(columns // ratio)], mode="bilinear")[0]
    return grid


def packed(model, projected, image_sizes, newline) -> list[torch.Tensor]:
    """What LLaVA-OneVision scatters for each image cut into tiles, rebuilt from the projector's output (a tile per
    row): the base tile, then the feature grid in raster order with one newline row after each of its rows."""
    images, start = [], 0
    for height, width in image_sizes:
        rows, columns = grid_shape(model, (height, width))
        tiles = projected[start: start + 1 + rows * columns]
        start += 1 + rows * columns
        stitched = tiles[1:].reshape(rows, columns, SIDE, SIDE, -1).permute(4, 0, 2, 1, 3).contiguous()
        grid = unpadded_and_shrunk(model, stitched.flatten(1, 2).flatten(2, 3), height, width)
        with_newlines = torch.cat([grid, newline[:, None, None].expand(-1, grid.shape[1], 1)], dim=-1)
        images.append(torch.cat([tiles[0], with_newlines.flatten(1, 2).transpose(0, 1)]))
    return images


# -- loading and names -----------------------------------------------------------------------------


def test_loads_with_its_stock_processor(model):
    processor = model.processor
    assert type(processor).__name__ == "LlavaOnevisionProcessor"
    assert type(processor.image_processor).__name__ in ("LlavaOnevisionImageProcessor", "LlavaOnevisionImageProcessorPil")
    assert type(processor.video_processor).__name__ == "LlavaOnevisionVideoProcessor"
    assert type(model.layers[0].self_attn._module).__name__ == "Qwen2Attention"
    assert "one row per tile" in repr(model)


# -- the tower on tiles ------------------------------------------------------------------------------


def test_the_tower_runs_on_each_images_base_tile_then_its_grid_tiles(model):
    inputs = processed(model, THREE)
    with model.trace(prompt(model, 3), images=THREE) as tracer:
        pixels = model.vision.input.save()
        stream = model.vision.layers[0].layer_input.save()
        tracer.stop()
    counts = [int(image.flatten(1).ne(0).any(1).sum()) for image in inputs["pixel_values"]]  # the rest is padding
    assert counts == [1 + rows * columns for rows, columns in (grid_shape(model, s) for s in inputs["image_sizes"])]
    assert counts == [2, 5, 19]
    assert torch.equal(pixels, torch.cat([image[:count] for image, count in zip(inputs["pixel_values"], counts)]))
    assert stream.shape == (sum(counts), SIDE * SIDE, model.vision.vision_hidden_size)  # no CLS


def test_image_features_are_the_unpadded_tiles_shrunk_where_large_with_newline_rows(model):
    inputs = processed(model, THREE)
    with model.trace(prompt(model, 3), images=THREE) as tracer:
        projected = model.projector.output.save()
        features = model.vision.image_features.save()
        tracer.stop()
    newline = model._module.model.image_newline.detach()
    counts = [int((processed(model, [image])["input_ids"] == model.config.image_token_id).sum()) for image in THREE]
    assert counts == [36, 70, 152] and sum(counts) == features.shape[0]
    expected = packed(model, projected, inputs["image_sizes"].tolist(), newline)
    assert [len(rows) for rows in expected] == counts
    assert torch.equal(features, torch.cat(expected))
    # the large image's 12x24 feature grid is shrunk to 8x16: no row of it is a projected patch any more
    large = features.split(counts)[2][SIDE * SIDE:]
    assert (large == newline).all(-1).nonzero().flatten().tolist() == [16 + k * 17 for k in range(8)]
    grid_rows = large.reshape(8, 17, -1)[:, :16].reshape(-1, large.shape[-1])
    tiles = projected[2 + 5 + 1:].reshape(-1, projected.shape[-1])
    assert not (grid_rows[:, None] == tiles[None]).all(-1).any()


def test_images_sharing_a_prompt_are_one_tile_each_and_one_newline(model):
    nested = [THREE[:2]]  # one prompt with two images: not cut into tiles
    inputs = processed(model, nested, count=2)
    assert inputs["batch_num_images"].tolist() == [2]
    with model.trace(prompt(model, 2), images=nested) as tracer:
        mask = model.vision.image_token_mask.save()
        pixels = model.vision.input.save()
        stream = model.vision.layers[0].layer_input.save()
        projected = model.projector.output.save()
        features = model.vision.image_features.save()
        tracer.stop()
    assert int(mask.sum()) == 2 * (SIDE * SIDE + 1)
    assert torch.equal(pixels, inputs["pixel_values"][:, 0])  # each image's first tile: the image padded square
    newline = model._module.model.image_newline.detach()[None]
    assert torch.equal(features, torch.cat([projected[0], newline, projected[1], newline]))
    # the grids: each image is its one tile
    for image in (0, 1):
        assert torch.equal(model.vision.patch_grid(stream, image=image), stream[image].reshape(SIDE, SIDE, -1))
        assert torch.equal(model.vision.token_grid(features, image=image), projected[image].reshape(SIDE, SIDE, -1))


# -- the grids on tiles -----------------------------------------------------------------------------


def test_the_grids_place_the_unpadded_tiles_and_the_tokens_of_the_feature_grid(model):
    with model.trace(prompt(model, 3), images=THREE) as tracer:
        stream = model.vision.layers[0].layer_input.save()
        features = model.vision.image_features.save()
        tracer.stop()
    # the 64 wide x 48 high image: tiles 3..6 on a 2x2 canvas of 8x8 patches, its top and bottom patch rows cropped
    grid = model.vision.patch_grid(stream, image=1)
    assert grid.shape == (6, 8, model.vision.vision_hidden_size)
    for r in range(6):
        for c in range(8):
            tile = 2 + 1 + ((r + 1) // SIDE) * 2 + c // SIDE
            assert torch.equal(grid[r, c], stream[tile, ((r + 1) % SIDE) * SIDE + c % SIDE]), (r, c)
    # its tokens: after the first image's 36 and its base tile's 16, 6 rows of 8 tokens and a newline
    tokens = model.vision.token_grid(features, image=1)
    assert tokens.shape == (6, 8, model.hidden_size)
    for r in range(6):
        assert torch.equal(tokens[r], features[36 + 16 + r * 9: 36 + 16 + r * 9 + 8]), r
    # the large image: its patches on the 12x24 unpadded grid of 3x6 tiles, its tokens on the shrunk 8x16 grid
    assert model.vision.patch_grid(stream, image=2).shape == (12, 24, model.vision.vision_hidden_size)
    large = model.vision.token_grid(features, image=2)
    assert large.shape == (8, 16, model.hidden_size)
    assert torch.equal(large, features[36 + 70 + 16:].reshape(8, 17, -1)[:, :16])


# -- a video, at nnsight's own site ------------------------------------------------------------------


@pytest.mark.parametrize("images", [[], ONE], ids=["video", "image-video"])
def test_a_video_is_scattered_at_its_video_tokens(model, images):
    """The host's second scatter (``_1``) writes the video's features at ``video_token_index``: each frame one tile,
    its 4x4 features pooled to 2x2, then one ``image_newline``; what the first text block receives there."""
    video = [noise_video(4, 32, 32)]
    text = chat_prompt(model.processor, len(images), "What happens?", videos=1)
    media = {"videos": video, **({"images": images} if images else {})}
    with model.trace(text, **media):
        scattered = model.model.source.inputs_embeds_masked_scatter_1.inputs.save()
        layer_input = model.layers[0].input.save()
    ids = model.processor(text=[text], return_tensors="pt", **media)["input_ids"]
    mask = ids == model.config.video_token_index
    pooled = math.ceil(SIDE / 2) ** 2  # the host's 2x2 bilinear pooling of a tile's feature grid
    assert int(mask.sum()) == len(video[0]) * pooled + 1
    assert torch.equal(layer_input[mask], scattered[0][1].reshape(-1, model.hidden_size))
    newline = model._module.model.image_newline
    assert torch.equal(layer_input[mask][-1], newline.to(layer_input.dtype))
