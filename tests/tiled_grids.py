"""Values on the image's own grid (`envoys.image.grids`, ``vision.patch_grid`` / ``token_grid`` and their inverses), exact.

A suite for the batched towers, whose stream holds one row of patches per tile:
each family declares ``class TestGrids(TiledGridSuite)`` in its own test file
with its checkpoint, the images it is tested on and what its geometry does
differently (the hooks below). On images whose patches each have a colour of
their own (`patch_coloured_image`):

- the patch grid puts every patch embedding where its patch is: the test
  recomputes the patch embedding by hand (the tower's convolution on the
  pixels the tower receives, built from the processor's ``pixel_values``) and
  places each tile's patches by the processor's own geometry (``image_sizes``
  with the image grid pinpoints, the image processor's rows and columns or
  aspect ratios), and compares it with the grid of the tower's stream
  entering its first block (the position embeddings zeroed on the suite's
  models, so that the stream is the patch embedding; CLS rows hold no patch);
- the token grid puts every image token where its block is: which patches
  each token is made of comes from the family's own functions
  (``pack_image_features``, the pixel shuffle, the average pool) run on
  patch indices;
- the inverses round-trip and write through in a trace as a direct write does;
- one head's attention from one patch gives a grid; bad inputs give clear errors.

What a family states (class attributes): ``checkpoint``, its tiny checkpoint;
``images``, ``(rows, columns, patch side in pixels)`` of each test image;
``cls_rows``, where each tile's CLS row sits in the tower's stream (``None``,
``"first"`` or ``"last"``). What it may override (methods), each defaulting to
the common case of a whole image per tile, one convolution for the patch
embedding and a token per patch: `placed`, `tower_pixels`,
`hand_patch_embedding`, `token_sources`, `first_stream`.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F

from envoys import StandardizedTransformer
from envoys.core.values import Unavailable
from envoys.image.grids import GridError, ImageInputs
from envoys.testing import chat_prompt, patch_coloured_image


@dataclasses.dataclass
class Placed:
    """One image as the processor tiled it: ``tiles[r][c]`` the tower's tile at tile row r, column c of its grid;
    ``crop`` (top, bottom, left, right) in patches, what the host keeps of the stitched grid."""

    tiles: list[list[int]]
    crop: tuple[int, int, int, int] | None = None


def tiles_in_order(shapes) -> list[Placed]:
    """Images whose tiles follow one another in the tower: per image ``(rows, columns, after)``, its ``rows x
    columns`` tiles in raster order, then ``after`` tiles that sit on no cell of its grid (a thumbnail)."""
    out, tile = [], 0
    for rows, columns, after in shapes:
        out.append(Placed([[tile + r * columns + c for c in range(columns)] for r in range(rows)]))
        tile += rows * columns + after
    return out


def real_tiles(pixel_values: torch.Tensor) -> torch.Tensor:
    """The tiles of ``pixel_values`` ``[images, tiles, 3, size, size]`` that are not the processor's all-zero
    padding, ``[tiles, 3, size, size]`` in float32: the tiles the host hands its tower."""
    tiles = pixel_values.to(torch.float32).reshape(-1, *pixel_values.shape[2:])
    real = (tiles == 0.0).sum(dim=(-1, -2, -3)) != tiles.shape[1:].numel()
    return tiles[real]


def flat_sources(shuffled: torch.Tensor) -> torch.Tensor:
    """A shuffle's output on patch indices ``[tiles, tokens, k]`` as `TiledGridSuite.token_sources` returns it."""
    return shuffled.reshape(-1, shuffled.shape[-1]).long()


def side(model) -> int:
    """A tile's side in patches."""
    vision = model.config.vision_config
    return vision.image_size // vision.patch_size


def place_tiles(table, image: Placed, n):
    """``table`` ``[tiles, n * n, ...]`` (a value per patch of each tile, raster order) laid out as the image:
    tiles side by side by their row and column, then cropped."""
    rows = [torch.cat([table[t].reshape(n, n, *table.shape[2:]) for t in row], dim=1) for row in image.tiles]
    grid = torch.cat(rows, dim=0)
    if image.crop is not None:
        top, bottom, left, right = image.crop
        grid = grid[top:bottom, left:right]
    return grid


def flat_stream(value):
    """A pre-norm input with a chunks axis of 1, ``[tiles, 1, rows, width]``, as ``[tiles, rows, width]``."""
    return value.reshape(-1, *value.shape[-2:])


def trace(model, images, **kwargs):
    return model.trace(chat_prompt(model.processor, len(images), "What is this?"), images=images, **kwargs)


class TiledGridSuite:
    """The grid tests of one checkpoint of a batched tower; a subclass states its facts and overrides its hooks."""

    #: the tiny checkpoint (`envoys.testing`) the class tests
    checkpoint: str
    #: the images the grids are tested on: (rows, columns, patch side in pixels) of each
    images: list[tuple[int, int, int]]
    #: where the CLS row of each tile is in the tower's stream: "first", "last", or None (no CLS)
    cls_rows: str | None = None

    # -- the model, loaded once per class, and one traced forward --------------------------------------------------

    @pytest.fixture(scope="class")
    @classmethod
    def model(cls, tiny_checkpoint):
        """The class's checkpoint loaded once for the class (over any module fixture of this name), with its weights,
        its tower's position embeddings zeroed: the stream entering the tower's blocks (before any pre-norm) is then the patch
        embedding at every patch row."""
        model = StandardizedTransformer(tiny_checkpoint(cls.checkpoint), task="image-text-to-text", device="cpu",
                                        attn_implementation="eager", dispatch=True)  # weights loaded, to edit
        with torch.no_grad():
            for parameter_name, parameter in model.vision._module.named_parameters():
                if "position" in parameter_name and "layers" not in parameter_name:
                    parameter.zero_()
        return model

    @pytest.fixture(scope="class")
    @classmethod
    def run(cls, model):
        """One traced forward on the patch-coloured images: the values read, grids taken inside the trace, the
        inputs."""
        suite = cls()
        images = suite.pictures()
        inputs = model.processor(text=chat_prompt(model.processor, len(images), "What is this?"), images=images,
                                 return_tensors="pt")
        count = len(images)
        in_trace, token_in_trace = [], []  # filled inside the trace
        with trace(model, images) as tracer:
            patches = model.vision.patch_embeddings.save()
            stream = suite.first_stream(model)
            in_trace.extend(model.vision.patch_grid(flat_stream(stream), image=i) for i in range(count))
            stream = stream.save()
            probabilities = model.vision.layers[0].self_attn.attention_probabilities.save()
            features = model.vision.image_features.save()
            token_in_trace.extend(model.vision.token_grid(features, image=i) for i in range(count))
            hidden = model.layers[0].input.save()
            tracer.stop()
        return dict(inputs=inputs, stream=flat_stream(stream), patches=patches, features=features, hidden=hidden,
                    probabilities=probabilities, in_trace=in_trace, token_in_trace=token_in_trace, count=count)

    # -- the family's geometry, from the processor's outputs and the config: the hooks ------------------------------

    def pictures(self):
        return [patch_coloured_image(*spec) for spec in self.images]

    def placed(self, model, inputs) -> list[Placed]:
        """Every image of the batch, as its tiles sit in the tower's tile order; by default each image one tile."""
        return [Placed([[i]]) for i in range(inputs["pixel_values"].shape[0])]

    def tower_pixels(self, model, inputs) -> torch.Tensor:
        """The pixels the tower receives, ``[tiles, 3, size, size]``, from the processor's pixel_values as the host
        selects them, in the model's dtype (float32; an image processor may return bfloat16); by default all of
        them."""
        return inputs["pixel_values"].to(torch.float32)

    def hand_patch_embedding(self, model, pixels) -> torch.Tensor:
        """The tower's patch embedding of ``pixels``, by hand: ``[tiles, patches, vision_hidden_size]``; by default
        the convolution of ``vision.patch_embed``."""
        embed = model.vision.patch_embed._module
        out = F.conv2d(pixels, embed.weight, embed.bias, stride=embed.stride, padding=embed.padding)
        return out.flatten(2).transpose(1, 2)

    def token_sources(self, model, inputs, index) -> torch.Tensor:
        """long ``[image_tokens, k]``: the ``tile * patches + patch`` indices each image token is made of (-1: none),
        from the family's own code run on ``index`` (float ``[tiles, patches, 1]``, each patch's own index); by
        default each patch its own token."""
        return index.reshape(-1, 1).long()

    def first_stream(self, model):
        """The tower's stream before its first block's pre-norm, ``[tiles, rows, vision_hidden_size]`` (or with a
        chunks axis of 1); by default the first block's input."""
        return model.vision.layers[0].layer_input

    # -- derived from the hooks ------------------------------------------------------------------------------------

    def patch_table(self, stream):
        """A tower value ``[tiles, rows, ...]`` without its CLS rows: ``[tiles, patches, ...]``."""
        where = self.cls_rows
        return stream[:, 1:] if where == "first" else stream[:, :-1] if where == "last" else stream

    def patch_indices(self, model, inputs):
        """Per image, long ``[grid_rows, grid_columns]``: the index ``tile * patches + patch`` of the patch at each
        cell."""
        n = side(model)
        tiles = self.tower_pixels(model, inputs).shape[0]
        table = torch.arange(tiles * n * n).reshape(tiles, n * n)
        return [place_tiles(table, image, n) for image in self.placed(model, inputs)]

    def expected_token_grids(self, model, inputs):
        """Per image, long ``[token_rows, token_columns]``: the image token (row of ``out[mask]``) at each block."""
        n = side(model)
        tiles = self.tower_pixels(model, inputs).shape[0]
        index = torch.arange(tiles * n * n, dtype=torch.float32).reshape(tiles, n * n, 1)
        sources = self.token_sources(model, inputs, index)
        grids = []
        for cells in self.patch_indices(model, inputs):
            block = math.isqrt(sources.shape[1])
            grid = torch.full((cells.shape[0] // block, cells.shape[1] // block), -1, dtype=torch.long)
            for token, made_of in enumerate(sources):
                hits = torch.isin(cells, made_of[made_of >= 0]).nonzero()
                if len(hits):
                    assert len(hits) == block * block
                    grid[hits[:, 0].min() // block, hits[:, 1].min() // block] = token
            grids.append(grid)
        return grids

    def shares_tiles(self, model, run, first, second):
        images = self.placed(model, run["inputs"])
        tiles = lambda image: {t for row in image.tiles for t in row}  # noqa: E731
        return bool(tiles(images[first]) & tiles(images[second]))

    # -- the patch grid ---------------------------------------------------------------------------------------------

    def test_the_model_records_the_batch_image_inputs(self, model, run):
        recorded = model.last_image_inputs
        assert isinstance(recorded, ImageInputs)
        assert torch.equal(recorded["pixel_values"], run["inputs"]["pixel_values"].to(recorded["pixel_values"].dtype))
        assert torch.equal(recorded.input_ids, run["inputs"]["input_ids"])
        assert torch.equal(recorded.image_token_mask, run["inputs"]["input_ids"] == model.config.image_token_id)
        assert recorded.image_tokens == run["features"].shape[0]

    def test_patch_grid_puts_every_patch_embedding_where_its_patch_is(self, model, run):
        pixels = self.tower_pixels(model, run["inputs"])
        by_hand = self.hand_patch_embedding(model, pixels)
        assert torch.equal(run["patches"], by_hand)  # the tower's patch embedding is the hand-made one
        assert torch.equal(self.patch_table(run["stream"]), by_hand)  # position embeddings zeroed: the stream is it
        for i, image in enumerate(self.placed(model, run["inputs"])):
            expected = place_tiles(by_hand, image, side(model))
            after = model.vision.patch_grid(run["stream"], image=i)
            assert torch.equal(after, expected)
            assert torch.equal(run["in_trace"][i], expected)

    def test_patch_coloured_patches_differ(self, model, run):
        """The test image makes every patch's embedding its own, so a misplaced row cannot go unseen."""
        grid = model.vision.patch_grid(run["stream"], image=0)
        rows = grid.reshape(-1, grid.shape[-1])
        assert torch.unique(rows, dim=0).shape[0] == rows.shape[0]

    def test_cls_rows_are_dropped(self, model, run):
        where = self.cls_rows
        if where is None:
            pytest.skip("this tower has no CLS token")
        stream = run["stream"].clone()
        column = 0 if where == "first" else -1
        stream[:, column] = float("nan")
        for i in range(run["count"]):
            assert not model.vision.patch_grid(stream, image=i).isnan().any()

    def test_one_heads_attention_from_one_patch_is_a_grid(self, model, run):
        probabilities, head, query = run["probabilities"], 1, 5
        query_row = query + (self.cls_rows == "first")
        for i, image in enumerate(self.placed(model, run["inputs"])):
            if len(image.tiles) * len(image.tiles[0]) == 1:
                # one tile: the attention from one patch over that image's keys, [keys]
                tile = image.tiles[0][0]
                value = probabilities[tile, head, query_row]
                expected = self.patch_table(probabilities[:, head, query_row])[tile].reshape(side(model), side(model))
            else:
                # tiles: each tile's attention from its patch over its own keys, [tiles, keys], the stream's layout
                value = probabilities[:, head, query_row]
                expected = place_tiles(self.patch_table(value), image, side(model))
            assert torch.equal(model.vision.patch_grid(value, image=i), expected)

    # -- the token grid ---------------------------------------------------------------------------------------------

    def test_token_grid_puts_every_image_token_where_its_block_is(self, model, run):
        tokens = run["features"].shape[0]
        expected = self.expected_token_grids(model, run["inputs"])
        covered = torch.cat([grid[grid >= 0] for grid in expected])
        assert sorted(covered.tolist()) == sorted(set(covered.tolist()))  # each token in one cell at most
        for i, cells in enumerate(expected):
            assert (cells >= 0).all()
            assert torch.equal(model.vision.token_grid(torch.arange(tokens), image=i), cells)
            assert torch.equal(model.vision.token_grid(run["features"], image=i), run["features"][cells])
            assert torch.equal(run["token_in_trace"][i], run["features"][cells])
            # the text stream [batch, seq, hidden] is read at the image tokens (a text model with an
            # embedding_multiplier multiplies the embeddings by it after the scatter)
            scale = getattr(model.config.get_text_config(), "embedding_multiplier", 1.0)
            assert torch.equal(model.vision.token_grid(run["hidden"], image=i), run["features"][cells] * scale)

    def test_the_token_grid_covers_the_patch_grid(self, model, run):
        for i in range(run["count"]):
            patches = model.vision.patch_grid(run["stream"], image=i).shape[:2]
            tokens = model.vision.token_grid(run["features"], image=i).shape[:2]
            assert patches[0] % tokens[0] == 0 and patches[1] % tokens[1] == 0
            assert patches[0] // tokens[0] == patches[1] // tokens[1]

    # -- the inverses -----------------------------------------------------------------------------------------------

    def test_place_patch_grid_round_trips(self, model, run):
        stream = run["stream"]
        for i in range(run["count"]):
            grid = model.vision.patch_grid(stream, image=i)
            copy = stream.clone()
            assert model.vision.place_patch_grid(grid, into=copy, image=i) is copy
            assert torch.equal(copy, stream)
            changed = model.vision.place_patch_grid(grid + 1, into=stream.clone(), image=i)
            assert torch.equal(model.vision.patch_grid(changed, image=i), grid + 1)
            # nothing else moved: each row either is one of the grid's patches, or is as it was
            moved = (changed != stream).any(dim=-1)
            assert int(moved.sum()) == grid.shape[0] * grid.shape[1]
            for other in range(run["count"]):
                if other != i and not self.shares_tiles(model, run, i, other):
                    assert torch.equal(model.vision.patch_grid(changed, image=other),
                                       model.vision.patch_grid(stream, image=other))

    def test_place_token_grid_round_trips(self, model, run):
        features, hidden = run["features"], run["hidden"]
        for i, cells in enumerate(self.expected_token_grids(model, run["inputs"])):
            grid = model.vision.token_grid(features, image=i)
            written = model.vision.place_token_grid(grid * 2, into=features.clone(), image=i)
            by_hand = features.clone()
            by_hand[cells.reshape(-1)] = features[cells.reshape(-1)] * 2
            assert torch.equal(written, by_hand)
            stream = model.vision.place_token_grid(grid * 2, into=hidden.clone(), image=i)
            mask = model.last_image_inputs.image_token_mask
            in_stream = features * getattr(model.config.get_text_config(), "embedding_multiplier", 1.0)
            in_stream[cells.reshape(-1)] = by_hand[cells.reshape(-1)]
            assert torch.equal(stream[mask], in_stream)
            assert torch.equal(stream[~mask], hidden[~mask])

    def test_placing_a_patch_grid_in_a_trace_writes_through(self, model, run):
        """Zeroing image 1's patch grid of the first block's output in a trace changes the tower's output as zeroing
        those rows directly does."""
        cells = self.patch_indices(model, run["inputs"])[1].reshape(-1)
        n = side(model) ** 2
        tile, patch = cells // n, cells % n
        row = patch + (self.cls_rows == "first")
        images = self.pictures()
        with trace(model, images) as tracer:
            out = model.vision.layers[0].layer_output
            grid = model.vision.patch_grid(out, image=1)
            model.vision.place_patch_grid(torch.zeros_like(grid), into=out, image=1)
            placed_output = model.vision.layers[-1].layer_output.save()
            tracer.stop()
        with trace(model, images) as tracer:
            out = model.vision.layers[0].layer_output
            out[tile, row] = 0
            direct = model.vision.layers[-1].layer_output.save()
            tracer.stop()
        with trace(model, images) as tracer:
            clean = model.vision.layers[-1].layer_output.save()
            tracer.stop()
        assert torch.equal(placed_output, direct)
        assert not torch.equal(placed_output, clean)

    def test_placing_a_token_grid_in_a_trace_writes_through(self, model, run):
        cells = self.expected_token_grids(model, run["inputs"])[0].reshape(-1)
        images = self.pictures()
        with trace(model, images) as tracer:
            features = model.vision.image_features
            grid = model.vision.token_grid(features, image=0)
            model.vision.place_token_grid(torch.zeros_like(grid), into=features, image=0)
            placed_stream = model.layers[-1].layer_output.save()
            tracer.stop()
        with trace(model, images) as tracer:
            features = model.vision.image_features
            features[cells] = 0
            direct = model.layers[-1].layer_output.save()
            tracer.stop()
        with trace(model, images) as tracer:
            clean = model.layers[-1].layer_output.save()
            tracer.stop()
        assert torch.equal(placed_stream, direct)
        assert not torch.equal(placed_stream, clean)

    # -- errors -----------------------------------------------------------------------------------------------------

    def test_an_image_the_batch_lacks_is_refused(self, model, run):
        with pytest.raises(GridError, match=rf"image={run['count']} is not an image of this batch: it holds {run['count']}"):
            model.vision.patch_grid(run["stream"], image=run["count"])
        with pytest.raises(GridError, match="is not an image of this batch"):
            model.vision.token_grid(run["features"], image=-1)

    def test_a_value_of_another_shape_is_refused_with_the_shapes_accepted(self, model, run):
        with pytest.raises(GridError, match=r"neither the tower's stream .* nor this image's rows only"):
            model.vision.patch_grid(torch.zeros(3), image=0)
        with pytest.raises(GridError, match=r"is not over the image tokens: pass the text stream"):
            model.vision.token_grid(torch.zeros(run["features"].shape[0] + 7, 2), image=0)
        grid = model.vision.patch_grid(run["stream"], image=0)
        copy = run["stream"].clone()
        with pytest.raises(GridError, match="cannot be placed here"):
            model.vision.place_patch_grid(grid[:, :-1], into=copy, image=0)
        assert torch.equal(copy, run["stream"])  # nothing half-written

    def test_a_family_without_a_layout_says_so(self, model, run, monkeypatch):
        monkeypatch.setattr(model, "family", dataclasses.replace(model.family, grid_layout=None))
        with pytest.raises(Unavailable, match=f"the {model.family.model_type} family has no grid layout yet"):
            model.vision.patch_grid(run["stream"], image=0)

    def test_a_value_with_more_rows_than_the_stream_is_refused(self, model, run):
        stream = run["stream"]
        longer = torch.cat([stream, stream[:1]])  # one tile too many: not this batch's stream
        with pytest.raises(GridError, match=rf"holding exactly {stream.shape[0] * stream.shape[1]} rows"):
            model.vision.patch_grid(longer, image=0)

    def test_an_option_the_layout_does_not_take_is_refused_by_name(self, model, run):
        with pytest.raises(TypeError, match=rf"of=: patch_grid on the {model.family.model_type} family takes no options"):
            model.vision.patch_grid(run["stream"], image=0, of="patch_embeddings")
        copy = run["features"].clone()
        with pytest.raises(TypeError, match=rf"of=: token_grid on the {model.family.model_type} family takes no options"):
            model.vision.place_token_grid(torch.zeros(1), into=copy, image=0, of="projector_output")
        assert torch.equal(copy, run["features"])

    def test_no_batch_yet_says_what_to_do(self, model, run, monkeypatch):
        monkeypatch.setattr(model, "last_image_inputs", None)
        with pytest.raises(Unavailable, match="no batch with images has run on this model yet"):
            model.vision.token_grid(run["features"], image=0)
