"""The grids of the packed and padded towers (`envoys.image.grids`): the helpers, and the suites a family's test file
declares with its checkpoint's facts.

Each case runs two images of different sizes, each patch of its own colour
(every colour of the batch different), so a row of the processor's
``pixel_values`` says by its colour which patch of which image it is. The
patch embeddings are recomputed by hand from ``pixel_values`` with the
tower's weights; the token grids are checked against the merge each host
does (the Qwen merger, the Pixtral hosts' patch merger, a pooler, a pixel
shuffle), recomputed from the patch values, and against ``image_grid_thw`` /
``image_sizes`` / ``image_grid_hw`` and the config.
Where a recomputation is not bit for bit the model's (a matrix product over
other rows), each expected row is found as the nearest of the model's rows,
checked to be close and used once, and the grid is then compared exactly.

A family's test file declares a class over a suite here, its facts as class attributes::

    class TestGrids(QwenLearnedPositionsGrids):
        \"\"\"What is particular to it, in a line.\"\"\"

        checkpoint = "some_family"  # the tiny checkpoint's name
        sizes = ((32, 32), (48, 64))  # each image's (height, width) in pixels, kept by the processor (the default)

`GridSuite` alone gives the class its ``case`` (the model, loaded once for the
class), for a tower whose grid tests are its own.
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


class Case:
    """One checkpoint's model, its two patch-coloured images of ``sizes`` (each (height, width) in pixels), and the
    processor's outputs for them."""

    def __init__(self, model: StandardizedTransformer, sizes: tuple[tuple[int, int], ...]):
        self.model, self.sizes = model, sizes
        self.patch = model.config.vision_config.patch_size
        self.shapes = [(height // self.patch, width // self.patch) for height, width in sizes]
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


class GridSuite:
    """A checkpoint's `Case`, loaded once for the class that declares it (eager, float32, with its processor).

    ``checkpoint``: the tiny checkpoint's name (`tiny_checkpoint`); ``sizes``: each image's (height, width) in
    pixels, chosen so that the processor keeps the size.
    """

    checkpoint: str
    sizes: tuple[tuple[int, int], ...] = ((32, 32), (48, 64))

    @pytest.fixture(scope="class")
    def case(self, tiny_checkpoint) -> Case:
        model = StandardizedTransformer(
            tiny_checkpoint(self.checkpoint), task="image-text-to-text", device="cpu", attn_implementation="eager",
            dispatch=True)  # the weights loaded: the grids are checked against the modules' own arithmetic
        return Case(model, self.sizes)


# -- the Qwen ViT ----------------------------------------------------------------------------------


def qwen_patch_embeddings(case: Case) -> torch.Tensor:
    """The patch embeddings by hand, ``[patches, hidden]``: the tower's 3D convolution on the processor's patches."""
    conv = case.model._module.model.visual.patch_embed.proj
    vision = case.model.config.vision_config
    shape = (vision.in_channels, vision.temporal_patch_size, case.patch, case.patch)
    pixels = case.inputs["pixel_values"].view(-1, *shape)
    return F.conv3d(pixels, conv.weight, conv.bias, stride=conv.stride).view(pixels.shape[0], -1)


class QwenViTGridSuite(GridSuite):
    """The grids of a Qwen ViT checkpoint: the processor's geometry, each patch embedding and image token where its
    patch and merge block are, round trips, and the values the grids refuse."""

    def test_qwen_grids_are_the_processors_geometry(self, case):
        merge = case.model.config.vision_config.spatial_merge_size
        grid_thw = case.inputs["image_grid_thw"]
        with case.trace():
            embeddings = case.model.vision.patch_embeddings.save()
            features = case.model.vision.image_features.save()
        assert grid_thw.tolist() == [[1, *shape] for shape in case.shapes]
        for image, (_t, h, w) in enumerate(grid_thw.tolist()):
            assert case.model.vision.patch_grid(embeddings, image=image, of="patch_embeddings").shape == (h, w, 32)
            assert case.model.vision.token_grid(features, image=image).shape[:2] == (h // merge, w // merge)

    def test_qwen_patch_grid_puts_each_patch_embedding_where_its_patch_is(self, case):
        by_hand = qwen_patch_embeddings(case)
        rows = case.patch_rows(case.inputs["pixel_values"])
        with case.trace():
            embeddings = case.model.vision.patch_embeddings.save()
        assert torch.equal(embeddings[0], by_hand)
        for image, where in enumerate(rows):
            grid = case.model.vision.patch_grid(embeddings, image=image, of="patch_embeddings")
            assert torch.equal(grid, by_hand[where])

    def test_qwen_token_grid_puts_each_image_token_where_its_merge_block_is(self, case):
        """Image token (a, b) is the merger of the merge block of patches (2a..2a+1, 2b..2b+1), its patches in raster
        order; the merger's output in window order (where the tower has windows) gives the same grid with
        ``of="projector_output"``."""
        merge = case.model.config.vision_config.spatial_merge_size
        with case.trace():
            merging = case.model.projector.input.save()
            merged = case.model.projector.output.save()
            features = case.model.vision.image_features.save()
        merger = case.model.projector._module
        for image in range(2):
            patches = case.model.vision.patch_grid(merging[None], image=image)
            h, w, width = patches.shape
            blocks = patches.reshape(h // merge, merge, w // merge, merge, width).permute(0, 2, 1, 3, 4)
            with torch.no_grad():
                by_hand = merger(blocks.reshape(-1, width)).reshape(h // merge, w // merge, -1)
            grid = case.model.vision.token_grid(features, image=image)
            assert torch.equal(grid, features[nearest(features, by_hand)])
            assert torch.equal(case.model.vision.token_grid(merged, image=image, of="projector_output"), grid)

    def test_qwen_grids_round_trip(self, case):
        with case.trace():
            entering = case.model.vision.layers[0].layer_input.save()
            features = case.model.vision.image_features.save()
        vision = case.model.vision
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

    def test_qwen_grid_of_an_unknown_value_is_refused(self, case):
        with case.trace():
            features = case.model.vision.image_features.save()
        with pytest.raises(GridError, match="'stream' or 'patch_embeddings'"):
            case.model.vision.patch_grid(features, image=0, of="image_features")
        with pytest.raises(GridError, match="'image_features' or 'projector_output'"):
            case.model.vision.token_grid(features, image=0, of="stream")
        with pytest.raises(GridError, match="holds 2 image"):
            case.model.vision.token_grid(features, image=2)


class QwenUnpositionedGrids(QwenViTGridSuite):
    """A Qwen ViT that adds no position embedding before the first block (rotary positions only).

    ``windowed``: whether the tower has several attention windows per image, so the blocks' rows really are permuted.
    """

    windowed = False

    def test_qwen_patch_grid_undoes_the_window_order_of_the_blocks(self, case):
        """The first block's input is the patch embeddings (no position embedding is added), permuted into windows
        where the tower has them, so its grid is the patch embeddings' grid."""
        by_hand = qwen_patch_embeddings(case)
        rows = case.patch_rows(case.inputs["pixel_values"])
        with case.trace():
            entering = case.model.vision.layers[0].layer_input.save()
            tower = case.model.vision.tower_output.save()
        if self.windowed:  # several windows per image: the rows really are permuted
            assert not torch.equal(entering[0], by_hand)
        for image, where in enumerate(rows):
            assert torch.equal(case.model.vision.patch_grid(entering, image=image), by_hand[where])
            assert case.model.vision.patch_grid(tower, image=image).shape == (*where.shape, tower.shape[-1])


class QwenLearnedPositionsGrids(QwenViTGridSuite):
    """A Qwen ViT that adds a learned position embedding (``pos_embed``) to the patch embeddings before the first
    block."""

    def test_qwen3_stream_grid_holds_each_patch_with_its_position(self, case):
        """The first image is as many patches a side as the position table (4 x 4), so the embedding added at patch
        (r, c) is the table's row r * 4 + c: the first block's input, less the patch embedding of the patch the grid
        puts there, is that row."""
        table = case.model._module.model.visual.pos_embed.weight.detach()
        side = math.isqrt(table.shape[0])
        assert case.shapes[0] == (side, side)
        by_hand = qwen_patch_embeddings(case)
        where = case.patch_rows(case.inputs["pixel_values"])[0]
        with case.trace():
            entering = case.model.vision.layers[0].layer_input.save()
        added = case.model.vision.patch_grid(entering, image=0) - by_hand[where]
        assert torch.equal(nearest(table, added), torch.arange(side * side).reshape(side, side))


# -- Pixtral ---------------------------------------------------------------------------------------


class PixtralGridSuite(GridSuite):
    """The grids of a checkpoint with a Pixtral tower: the padded convolution cropped per image, the image tokens
    (merged squares, or one per patch where the host merges nothing), round trips."""

    def test_pixtral_patch_grid_puts_each_patch_embedding_where_its_patch_is(self, case):
        """The tower's convolution on the padded images, by hand: its output at (r, c) of image i is that patch's
        embedding; cropped to each image's size (``image_sizes``) it is the grid."""
        conv = case.model.vision.patch_embed._module
        by_hand = F.conv2d(case.inputs["pixel_values"], conv.weight, conv.bias, stride=conv.stride)
        assert case.inputs["image_sizes"].tolist() == [list(size) for size in case.sizes]
        with case.trace():
            embeddings = case.model.vision.patch_embeddings.save()
            tower = case.model.vision.tower_output.save()
        for image, (h, w) in enumerate(case.shapes):
            expected = by_hand[image, :, :h, :w].permute(1, 2, 0)
            assert torch.equal(case.model.vision.patch_grid(embeddings, image=image), expected)
            assert case.model.vision.patch_grid(tower, image=image).shape == (h, w, tower.shape[-1])
            # the test's own check that the image is where it was drawn: the patch at (r, c) has its colour
            pixels = case.inputs["pixel_values"][image, :, :h * case.patch, :w * case.patch]
            patches = pixels.reshape(3, h, case.patch, w, case.patch).permute(1, 3, 0, 2, 4).reshape(h * w, -1)
            colours = torch.stack([row_colour(row) for row in patches.double()])
            assert torch.equal(torch.cdist(colours, case.palette()).argmin(dim=1), case.colours[image].reshape(-1))

    def test_pixtral_token_grid_puts_each_image_token_where_its_merged_square_is(self, case):
        """Where the host merges (``spatial_merge_size`` 2), the patch merger's input row of token (a, b) is the
        normed patches of the square (2a..2a+1, 2b..2b+1) unfolded (channel-major); where it merges nothing, token
        (r, c) is the projection of patch (r, c). The ``[IMG_BREAK]`` / ``[IMG_END]`` tokens are no image tokens."""
        model = case.model
        merge = getattr(model.config, "spatial_merge_size", 1)
        tokens = [(h // merge) * (w // merge) for h, w in case.shapes]
        assert int((case.inputs["input_ids"] == model.config.image_token_id).sum()) == sum(tokens)
        with case.trace():
            tower = model.vision.tower_output.save()
            if merge > 1:
                normed = model.projector.norm.output.save()
                unfolded = model.projector.patch_merger.merging_layer.input.save()
            features = model.vision.image_features.save()
        for image, (h, w) in enumerate(case.shapes):
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

    def test_pixtral_grids_round_trip(self, case):
        with case.trace():
            tower = case.model.vision.tower_output.save()
            features = case.model.vision.image_features.save()
        vision = case.model.vision
        for image in range(2):
            assert torch.equal(vision.place_patch_grid(vision.patch_grid(tower, image=image), into=tower.clone(),
                                                       image=image), tower)
            assert torch.equal(vision.place_token_grid(vision.token_grid(features, image=image), into=features.clone(),
                                                       image=image), features)
