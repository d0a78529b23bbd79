"""The grids of the packed and padded towers: the Qwen ViT, Pixtral, Gemma 4 and RADIO (`envoys.image.grids`).

Each case runs two images of different sizes, each patch of its own colour
(every colour of the batch different), so a row of the processor's
``pixel_values`` says by its colour which patch of which image it is. The
patch embeddings are recomputed by hand from ``pixel_values`` with the
tower's weights; the token grids are checked against the merge each host
does (the Qwen merger, Mistral 3's patch merger, Gemma 4's pooler, the
RADIO host's pixel shuffle), recomputed from the patch values, and against
``image_grid_thw`` / ``image_sizes`` / ``image_grid_hw`` and the config.
Where a recomputation is not bit for bit the model's (a matrix product over
other rows), each expected row is found as the nearest of the model's rows,
checked to be close and used once, and the grid is then compared exactly.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from envoys import StandardizedTransformer
from envoys.image.grids import GridError
from envoys.testing import chat_prompt
from envoys.testing.images import patch_colours


def coloured_images(shapes: list[tuple[int, int]], patch: int) -> tuple[list[Image.Image], torch.Tensor]:
    """Images of ``rows x columns`` patches of ``patch`` pixels, every patch of the batch one colour of its own, and
    the palette (``[colours, 3]`` uint8); image ``i``'s patch (r, c) is colour ``first_i + r * columns + c``.

    The colours are `patch_colours`' (as `patch_coloured_image`'s) but run on from one image to the next, so that
    packed images differ too, and leave out black, which is what a zero padding patch looks like.
    """
    counts = [rows * columns for rows, columns in shapes]
    palette = patch_colours(1 + sum(counts))[1:]
    images, first = [], 0
    for (rows, columns), count in zip(shapes, counts):
        colours = palette[first:first + count].reshape(rows, columns, 1, 1, 3)
        pixels = np.broadcast_to(colours, (rows, columns, patch, patch, 3)).transpose(0, 2, 1, 3, 4)
        images.append(Image.fromarray(np.ascontiguousarray(pixels.reshape(rows * patch, columns * patch, 3))))
        first += count
    return images, torch.from_numpy(palette.copy())


#: Per checkpoint: each image's (rows, columns) in pixels, chosen so that the processor keeps the size.
SIZES = {
    "qwen2_vl": [(32, 32), (48, 64)],
    "qwen2_5_vl": [(32, 32), (48, 64)],
    "qwen3_vl": [(32, 32), (48, 64)],
    "qwen3_5": [(32, 32), (48, 64)],
    "qwen3_5_moe": [(32, 32), (48, 64)],
    "mistral3": [(32, 32), (48, 64)],
    "llava-pixtral": [(32, 32), (48, 64)],
    "lighton_ocr": [(32, 32), (48, 64)],
    "mistral_large4": [(32, 32), (48, 64)],
    "gemma4": [(64, 64), (56, 72)],
    "nemotron_h_omni": [(32, 32), (48, 64)],
}
QWEN = ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5", "qwen3_5_moe"]


class Case:
    """One checkpoint's model, its two patch-coloured images, and the processor's outputs for them."""

    def __init__(self, name: str, model: StandardizedTransformer):
        self.name, self.model = name, model
        self.patch = model.config.vision_config.patch_size
        self.shapes = [(height // self.patch, width // self.patch) for height, width in SIZES[name]]
        firsts = [0, self.shapes[0][0] * self.shapes[0][1]]
        self.images, self.rgb = coloured_images(self.shapes, self.patch)
        #: the colour index of each patch of each image, [rows, columns]
        self.colours = [first + torch.arange(r * c).reshape(r, c) for (r, c), first in zip(self.shapes, firsts)]
        self.prompt = chat_prompt(model.processor, 2, "What is in the picture?")
        self.inputs = model.processor(text=[self.prompt], images=self.images, return_tensors="pt")

    def trace(self):
        return self.model.trace(self.prompt, images=self.images)

    def palette(self) -> torch.Tensor:
        """``[colours, 3]``: the batch's colours as the processor writes them into pixel_values (rescaled, normalised)."""
        processor = self.model.processor.image_processor
        values = self.rgb.double()
        if processor.do_rescale:
            values = values * processor.rescale_factor
        if processor.do_normalize:
            values = (values - torch.tensor(processor.image_mean)) / torch.tensor(processor.image_std)
        return values

    def patch_rows(self, pixel_rows: torch.Tensor) -> list[torch.Tensor]:
        """Which row of ``pixel_rows`` (flat patches, one per row) is each patch of each image, by its colour.

        One long ``[rows, columns]`` per image. A row of no palette colour
        (padding) is no patch; every patch is found exactly once.
        """
        colours = torch.stack([row_colour(row) for row in pixel_rows.double()])
        distance, nearest = torch.cdist(colours, self.palette()).min(dim=1)
        found = distance < 1e-4
        assert bool((pixel_rows[~found] == 0).all()), "a row of no palette colour that is not a zero padding patch"
        where = torch.full((self.rgb.shape[0],), -1, dtype=torch.long)
        where[nearest[found]] = found.nonzero().squeeze(1)
        assert int(found.sum()) == sum(c.numel() for c in self.colours)
        return [where[colours_] for colours_ in self.colours]


def row_colour(row: torch.Tensor) -> torch.Tensor:
    """The colour of a flat patch of one colour, channel-major ``(3, ...)`` or channel-last ``(..., 3)``."""
    for channels in (row.reshape(3, -1), row.reshape(-1, 3).T):
        if bool((channels == channels[:, :1]).all()):
            return channels[:, 0]
    raise AssertionError("a patch of more than one colour: the processor resized the image")


def nearest(rows: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
    """For each expected row (``[..., width]``), the index of the nearest of ``rows`` (``[n, width]``), each close and
    each used once."""
    flat = expected.reshape(-1, expected.shape[-1])
    distance, index = torch.cdist(flat.detach().double(), rows.detach().double()).min(dim=1)
    scale = flat.abs().max().item()
    assert float(distance.max()) < 1e-4 * scale, f"no row close to an expected one: {float(distance.max())}"
    assert index.unique().numel() == index.numel()
    return index.reshape(expected.shape[:-1])


@pytest.fixture(scope="module")
def load(tiny_checkpoint):
    """Each checkpoint's model, loaded once for this module (eager, float32, with its processor)."""
    loaded: dict[str, Case] = {}

    def get(name: str) -> Case:
        if name not in loaded:
            loaded[name] = Case(name, StandardizedTransformer(
                tiny_checkpoint(name), task="image-text-to-text", device="cpu", attn_implementation="eager"))
        return loaded[name]

    return get


@pytest.fixture(scope="module", params=QWEN)
def qwen(request, load) -> Case:
    return load(request.param)


# -- the Qwen ViT ----------------------------------------------------------------------------------


def qwen_patch_embeddings(case: Case) -> torch.Tensor:
    """The patch embeddings by hand, ``[patches, hidden]``: the tower's 3D convolution on the processor's patches."""
    conv = case.model._module.model.visual.patch_embed.proj
    vision = case.model.config.vision_config
    shape = (vision.in_channels, vision.temporal_patch_size, case.patch, case.patch)
    pixels = case.inputs["pixel_values"].view(-1, *shape)
    return F.conv3d(pixels, conv.weight, conv.bias, stride=conv.stride).view(pixels.shape[0], -1)


def test_qwen_grids_are_the_processors_geometry(qwen):
    merge = qwen.model.config.vision_config.spatial_merge_size
    grid_thw = qwen.inputs["image_grid_thw"]
    with qwen.trace():
        embeddings = qwen.model.vision.patch_embeddings.save()
        features = qwen.model.vision.image_features.save()
    assert grid_thw.tolist() == [[1, *shape] for shape in qwen.shapes]
    for image, (_t, h, w) in enumerate(grid_thw.tolist()):
        assert qwen.model.vision.patch_grid(embeddings, image=image, of="patch_embeddings").shape == (h, w, 32)
        assert qwen.model.vision.token_grid(features, image=image).shape[:2] == (h // merge, w // merge)


def test_qwen_patch_grid_puts_each_patch_embedding_where_its_patch_is(qwen):
    by_hand = qwen_patch_embeddings(qwen)
    rows = qwen.patch_rows(qwen.inputs["pixel_values"])
    with qwen.trace():
        embeddings = qwen.model.vision.patch_embeddings.save()
    assert torch.equal(embeddings[0], by_hand)
    for image, where in enumerate(rows):
        grid = qwen.model.vision.patch_grid(embeddings, image=image, of="patch_embeddings")
        assert torch.equal(grid, by_hand[where])


@pytest.mark.parametrize("name", ["qwen2_vl", "qwen2_5_vl"])
def test_qwen_patch_grid_undoes_the_window_order_of_the_blocks(load, name):
    """The first block's input is the patch embeddings (no position embedding is added on Qwen2-VL and Qwen2.5-VL),
    permuted into windows on Qwen2.5-VL, so its grid is the patch embeddings' grid."""
    qwen = load(name)
    by_hand = qwen_patch_embeddings(qwen)
    rows = qwen.patch_rows(qwen.inputs["pixel_values"])
    with qwen.trace():
        entering = qwen.model.vision.layers[0].layer_input.save()
        tower = qwen.model.vision.tower_output.save()
    if qwen.name == "qwen2_5_vl":  # several windows per image: the rows really are permuted
        assert not torch.equal(entering[0], by_hand)
    for image, where in enumerate(rows):
        assert torch.equal(qwen.model.vision.patch_grid(entering, image=image), by_hand[where])
        assert qwen.model.vision.patch_grid(tower, image=image).shape == (*where.shape, tower.shape[-1])


@pytest.mark.parametrize("name", ["qwen3_vl", "qwen3_5", "qwen3_5_moe"])
def test_qwen3_stream_grid_holds_each_patch_with_its_position(load, name):
    """Qwen3-VL and Qwen3.5 (and Qwen3.5-MoE, its copy) add a learned position embedding to the patch embeddings
    before the first block. The first image is as many patches a side as the position table (4 x 4), so the
    embedding added at patch (r, c) is the table's row r * 4 + c: the first block's input, less the patch embedding
    of the patch the grid puts there, is that row."""
    case = load(name)
    table = case.model._module.model.visual.pos_embed.weight.detach()
    side = math.isqrt(table.shape[0])
    assert case.shapes[0] == (side, side)
    by_hand = qwen_patch_embeddings(case)
    where = case.patch_rows(case.inputs["pixel_values"])[0]
    with case.trace():
        entering = case.model.vision.layers[0].layer_input.save()
    added = case.model.vision.patch_grid(entering, image=0) - by_hand[where]
    assert torch.equal(nearest(table, added), torch.arange(side * side).reshape(side, side))


def test_qwen_window_order_is_the_towers(load):
    """Qwen2.5-VL's window order, as the grids undo it, is the tower's own ``window_index``: the blocks' rows are the
    patch embeddings' merge units taken in that order."""
    case = load("qwen2_5_vl")
    merge = case.model.config.vision_config.spatial_merge_size
    with case.trace():  # its own trace: some releases compute the index before the patch embedding, some after
        window_index = case.model.vision.window_index.save()
    with case.trace():
        embeddings = case.model.vision.patch_embeddings.save()
        entering = case.model.vision.layers[0].layer_input.save()
    units = embeddings[0].reshape(-1, merge * merge, embeddings.shape[-1])
    assert torch.equal(entering[0], units[window_index].reshape(entering.shape[1:]))
    for image in range(2):
        assert torch.equal(case.model.vision.patch_grid(entering, image=image),
                           case.model.vision.patch_grid(embeddings, image=image, of="patch_embeddings"))
        assert not torch.equal(case.model.vision.patch_grid(entering, image=image, of="patch_embeddings"),
                               case.model.vision.patch_grid(embeddings, image=image, of="patch_embeddings"))


def test_qwen_token_grid_puts_each_image_token_where_its_merge_block_is(qwen):
    """Image token (a, b) is the merger of the merge block of patches (2a..2a+1, 2b..2b+1), its patches in raster
    order; the merger's output in window order (Qwen2.5-VL) gives the same grid with ``of="projector_output"``."""
    merge = qwen.model.config.vision_config.spatial_merge_size
    with qwen.trace():
        merging = qwen.model.projector.input.save()
        merged = qwen.model.projector.output.save()
        features = qwen.model.vision.image_features.save()
    merger = qwen.model.projector._module
    for image in range(2):
        patches = qwen.model.vision.patch_grid(merging[None], image=image)
        h, w, width = patches.shape
        blocks = patches.reshape(h // merge, merge, w // merge, merge, width).permute(0, 2, 1, 3, 4)
        with torch.no_grad():
            by_hand = merger(blocks.reshape(-1, width)).reshape(h // merge, w // merge, -1)
        grid = qwen.model.vision.token_grid(features, image=image)
        assert torch.equal(grid, features[nearest(features, by_hand)])
        assert torch.equal(qwen.model.vision.token_grid(merged, image=image, of="projector_output"), grid)


def test_qwen_grids_round_trip(qwen):
    with qwen.trace():
        entering = qwen.model.vision.layers[0].layer_input.save()
        features = qwen.model.vision.image_features.save()
    vision = qwen.model.vision
    for image in range(2):
        written = vision.place_patch_grid(vision.patch_grid(entering, image=image), into=entering.clone(), image=image)
        assert torch.equal(written, entering)
        emptied = vision.place_patch_grid(torch.zeros_like(vision.patch_grid(entering, image=image)),
                                          into=entering.clone(), image=image)
        other = vision.patch_grid(entering, image=1 - image)
        assert bool((vision.patch_grid(emptied, image=image) == 0).all())
        assert torch.equal(vision.patch_grid(emptied, image=1 - image), other)
        assert int((emptied[0] == 0).all(dim=-1).sum()) == vision.patch_grid(entering, image=image)[..., 0].numel()
        tokens = vision.token_grid(features, image=image)
        assert torch.equal(vision.place_token_grid(tokens, into=features.clone(), image=image), features)


def test_qwen_grid_of_an_unknown_value_is_refused(qwen):
    with qwen.trace():
        features = qwen.model.vision.image_features.save()
    with pytest.raises(GridError, match="'stream' or 'patch_embeddings'"):
        qwen.model.vision.patch_grid(features, image=0, of="image_features")
    with pytest.raises(GridError, match="'image_features' or 'projector_output'"):
        qwen.model.vision.token_grid(features, image=0, of="stream")
    with pytest.raises(GridError, match="holds 2 image"):
        qwen.model.vision.token_grid(features, image=2)


def test_a_write_inside_the_trace_reaches_the_patch_of_the_window_ordered_stream(load):
    """Zeroing image 1's patch (0, 0) on the first block's input, through the grid, inside the trace: the first
    block sees the zero at that patch's row, nowhere else."""
    case = load("qwen2_5_vl")
    vision = case.model.vision
    with case.trace():
        entering = vision.layers[0].layer_input
        grid = vision.patch_grid(entering, image=1)
        grid[0, 0] = 0
        vision.place_patch_grid(grid, into=entering, image=1)
        seen = vision.layers[0].input_layernorm.input.save()
    zero_rows = (seen.reshape(-1, seen.shape[-1]) == 0).all(dim=-1).nonzero().squeeze(1)
    assert zero_rows.numel() == 1
    assert bool((vision.patch_grid(seen.reshape(1, -1, seen.shape[-1]), image=1)[0, 0] == 0).all())


# -- Pixtral (Mistral 3, Llava-Pixtral, LightOnOCR, Mistral Large 4) --------------------------------


@pytest.fixture(scope="module", params=["mistral3", "llava-pixtral", "lighton_ocr", "mistral_large4"])
def pixtral(request, load) -> Case:
    return load(request.param)


def test_pixtral_patch_grid_puts_each_patch_embedding_where_its_patch_is(pixtral):
    """The tower's convolution on the padded images, by hand: its output at (r, c) of image i is that patch's
    embedding; cropped to each image's size (``image_sizes``) it is the grid."""
    conv = pixtral.model.vision.patch_embed._module
    by_hand = F.conv2d(pixtral.inputs["pixel_values"], conv.weight, conv.bias, stride=conv.stride)
    assert pixtral.inputs["image_sizes"].tolist() == [list(size) for size in SIZES[pixtral.name]]
    with pixtral.trace():
        embeddings = pixtral.model.vision.patch_embeddings.save()
        tower = pixtral.model.vision.tower_output.save()
    for image, (h, w) in enumerate(pixtral.shapes):
        expected = by_hand[image, :, :h, :w].permute(1, 2, 0)
        assert torch.equal(pixtral.model.vision.patch_grid(embeddings, image=image), expected)
        assert pixtral.model.vision.patch_grid(tower, image=image).shape == (h, w, tower.shape[-1])
        # the test's own check that the image is where it was drawn: the patch at (r, c) has its colour
        pixels = pixtral.inputs["pixel_values"][image, :, :h * pixtral.patch, :w * pixtral.patch]
        patches = pixels.reshape(3, h, pixtral.patch, w, pixtral.patch).permute(1, 3, 0, 2, 4).reshape(h * w, -1)
        colours = torch.stack([row_colour(row) for row in patches.double()])
        assert torch.equal(torch.cdist(colours, pixtral.palette()).argmin(dim=1), pixtral.colours[image].reshape(-1))


def test_pixtral_token_grid_puts_each_image_token_where_its_merged_square_is(pixtral):
    """Mistral 3: the patch merger's input row of token (a, b) is the normed patches of the square (2a..2a+1,
    2b..2b+1) unfolded (channel-major); Llava-Pixtral merges nothing: token (r, c) is the projection of patch (r, c).
    The ``[IMG_BREAK]`` / ``[IMG_END]`` tokens are no image tokens."""
    model = pixtral.model
    merge = getattr(model.config, "spatial_merge_size", 1)
    tokens = [(h // merge) * (w // merge) for h, w in pixtral.shapes]
    assert int((pixtral.inputs["input_ids"] == model.config.image_token_id).sum()) == sum(tokens)
    with pixtral.trace():
        tower = model.vision.tower_output.save()
        if merge > 1:
            normed = model.projector.norm.output.save()
            unfolded = model.projector.patch_merger.merging_layer.input.save()
        features = model.vision.image_features.save()
    for image, (h, w) in enumerate(pixtral.shapes):
        grid = model.vision.token_grid(features, image=image)
        assert grid.shape[:2] == (h // merge, w // merge)
        if merge > 1:
            patches = model.vision.patch_grid(normed[None], image=image)
            assert torch.equal(model.vision.patch_grid(normed, image=image), patches)  # the flat stream, no leading 1
            squares = patches.reshape(h // merge, merge, w // merge, merge, -1).permute(0, 2, 4, 1, 3)
            expected = squares.reshape(h // merge, w // merge, -1)
            assert torch.equal(model.vision.token_grid(unfolded, image=image), expected)
            assert model.vision.token_grid(unfolded, image=image).shape[:2] == grid.shape[:2]
        else:
            with torch.no_grad():
                by_hand = model.projector._module(model.vision.patch_grid(tower, image=image))
            assert torch.equal(grid, features[nearest(features, by_hand)])


def test_pixtral_grids_round_trip(pixtral):
    with pixtral.trace():
        tower = pixtral.model.vision.tower_output.save()
        features = pixtral.model.vision.image_features.save()
    vision = pixtral.model.vision
    for image in range(2):
        assert torch.equal(vision.place_patch_grid(vision.patch_grid(tower, image=image), into=tower.clone(),
                                                   image=image), tower)
        assert torch.equal(vision.place_token_grid(vision.token_grid(features, image=image), into=features.clone(),
                                                   image=image), features)


# -- Gemma 4 ---------------------------------------------------------------------------------------


def test_gemma4_patch_grid_drops_the_padded_rows(load):
    """Each real row's patch is found by its colour; the padded rows (zero patches) are in no cell."""
    case = load("gemma4")
    model = case.model
    pixels = case.inputs["pixel_values"]
    rows = case.patch_rows(pixels.reshape(-1, pixels.shape[-1]))
    proj = model.vision.patch_embed.input_proj._module
    by_hand = F.linear(2 * (pixels - 0.5), proj.weight, proj.bias).reshape(-1, proj.out_features)
    with case.trace():
        embeddings = model.vision.patch_embeddings.save()
        tower = model.vision.tower_output.save()
    assert torch.equal(embeddings.reshape(by_hand.shape), by_hand)
    for image, where in enumerate(rows):
        assert torch.equal(model.vision.patch_grid(embeddings, image=image), by_hand[where])
        assert torch.equal(model.vision.patch_grid(tower, image=image), tower.reshape(-1, tower.shape[-1])[where])
        # a value over this image's rows only: its padded rows are dropped the same
        own = tower[image]
        assert torch.equal(model.vision.patch_grid(own, image=image), model.vision.patch_grid(tower, image=image))
    assert sum(where.numel() for where in rows) < pixels.shape[0] * pixels.shape[1]  # there is padding to drop


def test_gemma4_token_grid_puts_each_soft_token_where_its_pooled_cell_is(load):
    """Soft token (a, b) is the mean of the real patches (k a .. k a + k - 1, k b .. k b + k - 1) of the last
    block's stream, times sqrt(width) (the tiny tower does not standardise)."""
    case = load("gemma4")
    model = case.model
    kernel = model.config.vision_config.pooling_kernel_size
    with case.trace():
        tower = model.vision.tower_output.save()
        pooled = model.projector.input.save()
        features = model.vision.image_features.save()
    assert not model.config.vision_config.standardize
    assert int((case.inputs["input_ids"] == model.config.image_token_id).sum()) == features.shape[0]
    width = tower.shape[-1]
    for image, (h, w) in enumerate(case.shapes):
        patches = model.vision.patch_grid(tower, image=image)
        by_hand = patches.reshape(h // kernel, kernel, w // kernel, kernel, width).mean(dim=(1, 3)) * math.sqrt(width)
        grid = model.vision.token_grid(pooled, image=image)
        assert grid.shape[:2] == (h // kernel, w // kernel)
        assert torch.equal(grid, pooled[nearest(pooled, by_hand)])
        assert model.vision.token_grid(features, image=image).shape[:2] == (h // kernel, w // kernel)


def test_gemma4_grids_round_trip_leaving_the_padding(load):
    case = load("gemma4")
    vision = case.model.vision
    with case.trace():
        tower = vision.tower_output.save()
        features = vision.image_features.save()
    for image in range(2):
        grid = vision.patch_grid(tower, image=image)
        assert torch.equal(vision.place_patch_grid(grid, into=tower.clone(), image=image), tower)
        emptied = vision.place_patch_grid(torch.zeros_like(grid), into=tower.clone(), image=image)
        changed = (emptied != tower).any(dim=-1)
        assert int(changed.sum()) == grid.shape[0] * grid.shape[1] and bool(changed[image].any())
        assert not bool(changed[1 - image].any())
        tokens = vision.token_grid(features, image=image)
        assert torch.equal(vision.place_token_grid(tokens, into=features.clone(), image=image), features)


# -- RADIO (Nemotron-H Omni) -----------------------------------------------------------------------


def test_radio_patch_grid_drops_the_cls_and_register_rows(load):
    """The patch embeddings are the projection of the processor's flat patches (no prefix rows: ``of=
    "patch_embeddings"``); the blocks' stream has each image's cls and register rows first, which the grid drops:
    the tower's own ``features`` (its output less the prefix rows) is the grid of its last stream."""
    case = load("nemotron_h_omni")
    model = case.model
    assert case.inputs["image_grid_hw"].tolist() == [list(shape) for shape in case.shapes]
    rows = case.patch_rows(case.inputs["pixel_values"])
    projection = model.vision.patch_embed._module
    by_hand = F.linear(case.inputs["pixel_values"], projection.weight, projection.bias)
    with case.trace():
        embeddings = model.vision.patch_embeddings.save()
        tower = model.vision.tower_output.save()
        features = model.vision.output.features.save()
    prefix = model.vision.num_prefix_tokens
    assert tower.shape[1] == embeddings.shape[1] + 2 * prefix
    assert torch.equal(embeddings[0], by_hand)
    own = features.split([h * w for h, w in case.shapes])
    for image, (where, (h, w)) in enumerate(zip(rows, case.shapes)):
        assert torch.equal(model.vision.patch_grid(embeddings, image=image, of="patch_embeddings"), by_hand[where])
        assert torch.equal(model.vision.patch_grid(tower, image=image), own[image].reshape(h, w, -1))
    with pytest.raises(GridError, match="'stream' or 'patch_embeddings'"):
        model.vision.patch_grid(tower, image=0, of="features")
    # the patch embeddings read as the stream (of= forgotten) would be shifted by the prefix rows: refused
    with pytest.raises(GridError, match=rf"holding exactly {tower.shape[1]} rows"):
        model.vision.patch_grid(embeddings, image=0)


def test_radio_token_grid_is_the_pixel_shuffle(load):
    """Token (a, b) of an image is its features at (2a, 2b), (2a, 2b + 1), (2a + 1, 2b), (2a + 1, 2b + 1), joined:
    what the projector receives (the host's pixel shuffle)."""
    case = load("nemotron_h_omni")
    model = case.model
    merge = round(1 / model.config.downsample_ratio)
    assert model._module.vision_final_layernorm is None
    with case.trace():
        features = model.vision.output.features.save()
        shuffled = model.projector.input.save()
        image_features = model.vision.image_features.save()
    assert int((case.inputs["input_ids"] == model.config.image_token_id).sum()) == image_features.shape[0]
    own = features.split([h * w for h, w in case.shapes])
    for image, (h, w) in enumerate(case.shapes):
        patches = own[image].reshape(h // merge, merge, w // merge, merge, -1).permute(0, 2, 1, 3, 4)
        expected = patches.reshape(h // merge, w // merge, -1)
        assert torch.equal(model.vision.token_grid(shuffled, image=image), expected)
        assert model.vision.token_grid(image_features, image=image).shape[:2] == (h // merge, w // merge)


def test_radio_grids_round_trip_leaving_the_prefix_rows(load):
    case = load("nemotron_h_omni")
    vision = case.model.vision
    with case.trace():
        tower = vision.tower_output.save()
        features = vision.image_features.save()
    for image in range(2):
        grid = vision.patch_grid(tower, image=image)
        assert torch.equal(vision.place_patch_grid(grid, into=tower.clone(), image=image), tower)
        emptied = vision.place_patch_grid(torch.zeros_like(grid), into=tower.clone(), image=image)
        changed = (emptied != tower).any(dim=-1)[0].nonzero().squeeze(1)
        first = sum(h * w + vision.num_prefix_tokens for h, w in case.shapes[:image]) + vision.num_prefix_tokens
        assert torch.equal(changed, torch.arange(first, first + grid.shape[0] * grid.shape[1]))
        tokens = vision.token_grid(features, image=image)
        assert torch.equal(vision.place_token_grid(tokens, into=features.clone(), image=image), features)
