"""StandardizedTransformer on a tiny LLaVA-NeXT checkpoint: a CLIP tower on tiles, exact.

Every expected number comes from outside the code under test: the stock
processor's ``pixel_values`` (its tile axis) and ``image_sizes``, the config's
``image_grid_pinpoints``, the modules' own weights (``image_newline``), or a
recomputation from other values read in the same trace. The spec's contracts
(the scatter and the mask, the tiles as the stream's rows with CLS first and
every block's identity, the pattern, what the projector reads, ablation,
sizes, support, the text-only load, generation, outputs against the plain
model) run on this checkpoint in test_vision_contracts.py; this file holds
what is particular to LLaVA-NeXT.
"""

from __future__ import annotations

import nnsight
import pytest
import torch
from swap_rules import without_rule
from tiled_grids import Placed, TiledGridSuite, side
from tower_body import tower_body
from transformers.image_processing_utils import select_best_resolution

from envoys import StandardizedTransformer, Unavailable
from envoys.testing import chat_prompt, noise_image

ONE = [noise_image(32, 32, seed=0)]
TWO = [noise_image(32, 32, seed=0), noise_image(48, 64, seed=1)]  # 32x32, and 48 wide by 64 high: 3 and 5 tiles


CHECKPOINT = "llava_next"


def prompt(model, images) -> str:
    return chat_prompt(model.processor, len(images), "What colour is this?")


def processed(model, images) -> dict[str, torch.Tensor]:
    return model.processor(text=[prompt(model, images)], images=images, return_tensors="pt")


def tiles_per_image(model, images) -> list[int]:
    """Each image's real tiles: the processor pads the tile axis of pixel_values with all-zero tiles."""
    pixels = processed(model, images)["pixel_values"]
    return [int(image.flatten(1).ne(0).any(1).sum()) for image in pixels]


def patch_side(model) -> int:
    """A tile's side in patches, off the stock processor's tile size and patch size."""
    return model.processor.image_processor.crop_size["height"] // model.processor.patch_size


def grid_shape(model, image_size) -> tuple[int, int]:
    """``(rows, columns)`` of grid tiles: the best pinpoint resolution for the image's (height, width), in tiles."""
    tile = model.processor.image_processor.crop_size["height"]
    height, width = select_best_resolution(tuple(image_size), model.config.image_grid_pinpoints)
    return height // tile, width // tile


def packed(projected, image_sizes, grid_shapes, side, newline) -> list[torch.Tensor]:
    """What LLaVA-NeXT scatters for each image, rebuilt from the projector's output, one tile per row.

    Base tile first; then the grid tiles laid out as one feature grid, the
    padding's rows or columns cropped (the image's aspect ratio against the
    grid's), one newline row after each row, raster order.
    """
    images, start = [], 0
    for (height, width), (rows, columns) in zip(image_sizes, grid_shapes):
        tiles = projected[start : start + 1 + rows * columns]
        start += 1 + rows * columns
        grid = tiles[1:].reshape(rows, columns, side, side, -1).permute(0, 2, 1, 3, 4)
        grid = grid.reshape(rows * side, columns * side, -1)
        grid_height, grid_width = grid.shape[:2]
        if width / height > grid_width / grid_height:  # wider than the grid: padding above and below
            crop = (grid_height - int(round(height * grid_width / width, 7))) // 2
            grid = grid[crop : grid_height - crop]
        else:  # padding left and right
            crop = (grid_width - int(round(width * grid_height / height, 7))) // 2
            grid = grid[:, crop : grid_width - crop]
        with_newlines = torch.cat([grid, newline.expand(grid.shape[0], 1, -1)], dim=1)
        images.append(torch.cat([tiles[0], with_newlines.reshape(-1, grid.shape[-1])]))
    return images


# -- loading and names -----------------------------------------------------------------------------


def test_loads_with_its_stock_processor(model):
    assert type(model.processor).__name__ == "LlavaNextProcessor"
    assert type(model.processor.image_processor).__name__ in ("LlavaNextImageProcessor", "LlavaNextImageProcessorFast")
    assert model.family.model_type == "llava_next"
    assert type(model.layers[0].self_attn._module).__name__ == "MistralAttention"



# -- the scatter and the tower on tiles ------------------------------------------------------------


@pytest.mark.parametrize("images", [ONE, TWO], ids=["one-image", "two-images"])
def test_the_tower_runs_on_each_images_base_tile_then_its_grid_tiles(model, images):
    with model.trace(prompt(model, images), images=images):
        pixels = model.vision.input.save()  # what the tower runs on: every real tile of the call
        text_pattern = model.layers[0].self_attn.attention_probabilities.save()
    inputs = processed(model, images)
    counts = tiles_per_image(model, images)
    assert counts == [1 + rows * columns for rows, columns in (grid_shape(model, s) for s in inputs["image_sizes"])]
    real = torch.cat([image[:count] for image, count in zip(inputs["pixel_values"], counts)])
    assert torch.equal(pixels, real)  # each image's base tile, then its grid tiles; images in order
    length = inputs["input_ids"].shape[1]
    assert text_pattern.shape == (1, model.config.text_config.num_attention_heads, length, length)
    assert torch.allclose(text_pattern.sum(-1), torch.ones(text_pattern.shape[:-1]))


def test_image_features_are_the_unpadded_tiles_with_newline_rows(model):
    """The particular fact: image_features is the projector's output rearranged per image, unpadded, with
    ``image_newline`` rows added, so it has other rows than the projector's output and is no reshape of it."""
    with model.trace(prompt(model, TWO), images=TWO):
        projected = model.projector.output.save()
        features = model.vision.image_features.save()
    inputs = processed(model, TWO)
    sizes = inputs["image_sizes"].tolist()
    grids = [grid_shape(model, size) for size in sizes]
    side, newline = patch_side(model), model._module.model.image_newline.detach()
    assert features.shape[0] != projected.shape[0] * projected.shape[1]  # not a reshape of the projector's output
    assert features.shape[0] > projected.shape[1] * len(TWO)  # more rows than the base tiles give
    assert torch.equal(features, torch.cat(packed(projected, sizes, grids, side, newline)))

    # image by image, with each image's token count from the processor on that image alone
    counts = [int((processed(model, [image])["input_ids"] == model.config.image_token_id).sum()) for image in TWO]
    assert sum(counts) == features.shape[0]
    first_tiles = [0, 1 + grids[0][0] * grids[0][1]]
    for rows, first_tile, (grid_rows, grid_columns) in zip(features.split(counts), first_tiles, grids):
        assert torch.equal(rows[: side * side], projected[first_tile])  # the base tile first, whole
        grid = rows[side * side :]
        newlines = (grid == newline).all(-1).nonzero().flatten()
        kept_rows, kept_columns = len(newlines), int(newlines[0])
        assert newlines.tolist() == [kept_columns + k * (kept_columns + 1) for k in range(kept_rows)]
        assert kept_rows * (kept_columns + 1) == len(grid)  # a newline row ends every row of the grid
        assert kept_rows * kept_columns < grid_rows * grid_columns * side * side  # the padding was cropped

    # the host's own helper agrees
    host = model._module.model
    tiles = [1 + rows * columns for rows, columns in grids]
    own, lengths = host.pack_image_features(projected.split(tiles), inputs["image_sizes"], "default", host.image_newline)
    assert torch.equal(torch.cat(own).detach(), features) and lengths.tolist() == counts


def test_patch_embeddings_come_before_positions_and_cls_is_first(model):
    vision = model.vision
    embeddings = tower_body(vision._module).embeddings
    with model.trace(prompt(model, TWO), images=TWO):
        patches = vision.patch_embeddings.save()
        entering = tower_body(vision).pre_layrnorm.input.save()
    positions = embeddings.position_embedding.weight
    assert torch.equal(entering[:, 1:], patches + positions[1:])
    cls = (embeddings.class_embedding + positions[0]).expand(entering.shape[0], -1)
    assert torch.equal(entering[:, 0], cls)  # the same CLS on every tile, first


def test_block_values_add_up_on_text_blocks(model):
    text_block = model.layers[1]
    with model.trace(prompt(model, TWO), images=TWO):
        text = nnsight.save([text_block.layer_input, text_block.attention_output,
                             text_block.mlp_output, text_block.layer_output])
    layer_input, attention, mlp, output = text
    assert torch.equal(layer_input + attention + mlp, output)


def test_the_attention_interior_is_per_tile(model):
    attention = model.vision.layers[0].self_attn
    with model.trace(prompt(model, TWO), images=TWO):
        values = attention.attention_values.save()
        probabilities = attention.attention_probabilities.save()
        heads = attention.attention_head_outputs.save()
        projected_in = attention.o_proj.input.save()
    tiles, rows = sum(tiles_per_image(model, TWO)), 1 + patch_side(model) ** 2
    assert values.shape == (tiles, model.vision.num_heads, rows, model.vision.head_dim)
    assert torch.equal(probabilities @ values, heads.transpose(1, 2))
    assert torch.equal(heads.reshape(tiles, rows, -1), projected_in)


# -- writes -------------------------------------------------------------------------------------------


def test_a_write_of_the_wrong_shape_is_refused(model):
    tokens = int((processed(model, ONE)["input_ids"] == model.config.image_token_id).sum())
    with pytest.raises(ValueError, match=rf"vision\.image_features takes a tensor of shape \({tokens}, 32\).*got \(16, 32\)"):
        with model.trace(prompt(model, ONE), images=ONE):
            model.vision.image_features = torch.zeros(16, 32)  # the base tile's count: not what is scattered


# -- sizes and what is unavailable -----------------------------------------------------------------


def test_the_tile_sizes(model):
    vision, image_processor = model.vision, model.processor.image_processor
    assert vision.patch_size == model.processor.patch_size
    assert vision.image_size == image_processor.crop_size["height"] == processed(model, ONE)["pixel_values"].shape[-1]
    assert vision.image_grid_pinpoints == [list(p) for p in image_processor.image_grid_pinpoints]


def test_what_is_unavailable_says_why(tiny_checkpoint, monkeypatch):
    path = tiny_checkpoint("llava_next")
    sdpa = StandardizedTransformer(path, task="image-text-to-text", attn_implementation="sdpa")
    reason = "exist only inside eager attention, and this model runs 'sdpa': load it with attn_implementation='eager'"
    for rows in (sdpa.vision.support()["self_attn.attention_probabilities"], sdpa.support()["self_attn.attention_scores"]):
        assert all(reason in why for why in rows.values())
    with pytest.raises(Unavailable, match=r"vision\.layers\[0\]\.self_attn\.attention_probabilities is unavailable"):
        sdpa.vision.layers[0].self_attn.attention_probabilities

    without_rule(monkeypatch, "llava_next.image-scatter")
    unscattered = StandardizedTransformer(path, task="image-text-to-text")
    assert unscattered.vision.support()["image_features"].startswith(
        "no rewrite rule exposes inputs_embeds_masked_scatter_0 in LlavaNextModel.forward"
    )
    assert unscattered.vision.support()["layer_output"] is None


def test_the_docstrings_say_what_the_rows_are(model):
    doc = type(model.vision).image_features.__doc__
    for words in ("base tile", "image_newline", "cropped", "neither ``projector.output`` nor a reshape"):
        assert words in doc, words
    assert "one row per tile" in repr(model)


# -- the grids (tiled_grids.TiledGridSuite) ----------------------------------------------------------------------


def unpadded(height, width, grid_h, grid_w):
    """The rows or columns of the stitched grid (in patches) that hold the image, not the padding the processor
    centred it in (the host's unpad rule, from the original size)."""
    if width / height > grid_w / grid_h:
        new_h = int(round(height * (grid_w / width), 7))
        pad = (grid_h - new_h) // 2
        return pad, grid_h - pad, 0, grid_w
    new_w = int(round(width * (grid_h / height), 7))
    pad = (grid_w - new_w) // 2
    return 0, grid_h, pad, grid_w - pad


class TestGrids(TiledGridSuite):
    """LLaVA-NeXT: a base tile, then grid tiles by the pinpoints cropped to the image; CLIP's CLS first; pack_image_features."""

    checkpoint = "llava_next"
    images = [(4, 4, 8), (6, 8, 8)]
    cls_rows = "first"

    def placed(self, model, inputs):
        config, out, tile = model.config, [], 0
        for height, width in inputs["image_sizes"].tolist():
            canvas_h, canvas_w = select_best_resolution((height, width), config.image_grid_pinpoints)
            rows, columns = canvas_h // config.vision_config.image_size, canvas_w // config.vision_config.image_size
            grid = [[tile + 1 + r * columns + c for c in range(columns)] for r in range(rows)]
            out.append(Placed(grid, unpadded(height, width, rows * side(model), columns * side(model))))
            tile += 1 + rows * columns
        return out

    def tower_pixels(self, model, inputs):
        pixels = inputs["pixel_values"].to(torch.float32)
        return torch.cat([pixels[i][: 1 + len(p.tiles) * len(p.tiles[0])] for i, p in enumerate(self.placed(model, inputs))])

    def token_sources(self, model, inputs, index):
        per_image, start = [], 0
        for image in self.placed(model, inputs):
            count = 1 + len(image.tiles) * len(image.tiles[0])
            per_image.append(index[start:start + count])
            start += count
        packed, _ = model._module.model.pack_image_features(per_image, inputs["image_sizes"], "default",
                                                             image_newline=torch.tensor([-1.0]))
        return torch.cat(packed).long()

    def first_stream(self, model):
        return tower_body(model.vision).pre_layrnorm.input
