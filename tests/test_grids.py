"""Values on the image's own grid (`envoys.image.grids`, ``vision.patch_grid`` / ``token_grid`` and their inverses), exact.

Per family of the batched towers (LLaVA with SigLIP and CLIP, LLaVA-NeXT,
Gemma 3, Idefics 3, SmolVLM, Granite-Docling, Llama 4), on images whose patches each have a
colour of their own (`patch_coloured_image`):

- the patch grid puts every patch embedding where its patch is: the test
  recomputes the patch embedding by hand (the tower's convolution on the
  pixels the tower receives, built from the processor's ``pixel_values``) and
  places each tile's patches by the processor's own geometry (``image_sizes``
  with the image grid pinpoints, the image processor's rows and columns or
  aspect ratios), and compares it with the grid of the tower's stream
  entering its first block (the position embeddings zeroed on this module's
  models, so that the stream is the patch embedding; CLS rows hold no patch);
- the token grid puts every image token where its block is: which patches
  each token is made of comes from the family's own functions
  (``pack_image_features``, the pixel shuffle, the average pool) run on
  patch indices;
- the inverses round-trip and write through in a trace as a direct write does;
- one head's attention from one patch gives a grid; bad inputs give clear errors.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil

import pytest
import torch
import torch.nn.functional as F
from tower_body import tower_body
from transformers.image_processing_utils import select_best_resolution
from transformers.models.llama4.modeling_llama4 import pixel_shuffle

from envoys import StandardizedTransformer
from envoys.core.values import Unavailable
from envoys.image.grids import Grid, GridError, ImageInputs, gather, place, tower_rows
from envoys.testing import chat_prompt, patch_coloured_image

#: Per checkpoint, the images (rows, columns, patch side in pixels of each) the grids are tested on.
IMAGES = {
    "llava-siglip": [(4, 4, 8), (6, 8, 8)],
    "llava-clip": [(4, 4, 8), (8, 6, 8)],
    "llava_next": [(4, 4, 8), (6, 8, 8)],
    "gemma3": [(8, 8, 4), (4, 4, 8)],
    "paligemma": [(4, 4, 8), (6, 8, 8)],
    "idefics3": [(8, 8, 8), (6, 8, 8), (2, 2, 8)],
    "smolvlm": [(8, 8, 8), (8, 6, 8)],
    "granite_docling": [(8, 8, 4), (8, 16, 4), (16, 16, 4)],  # 1 tile (not split); 1x2 and 2x2 tiles + the thumbnail
    "llama4": [(4, 4, 8), (4, 8, 8), (8, 8, 8)],
}
CHECKPOINTS = list(IMAGES)


@pytest.fixture(scope="module", params=CHECKPOINTS)
def name(request):
    return request.param


@pytest.fixture(scope="module")
def models(tiny_checkpoint):
    """Each checkpoint loaded once for this module, its tower's position embeddings zeroed: the stream entering
    the tower's blocks (before any pre-norm) is then the patch embedding at every patch row."""
    loaded = {}

    def get(checkpoint):
        if checkpoint not in loaded:
            model = StandardizedTransformer(tiny_checkpoint(checkpoint), task="image-text-to-text", device="cpu",
                                            attn_implementation="eager")
            with torch.no_grad():
                for parameter_name, parameter in model.vision._module.named_parameters():
                    if "position" in parameter_name and "layers" not in parameter_name:
                        parameter.zero_()
            loaded[checkpoint] = model
        return loaded[checkpoint]

    return get


@pytest.fixture(scope="module")
def model(models, name):
    return models(name)


def images_of(name):
    return [patch_coloured_image(*spec) for spec in IMAGES[name]]


# -- the family's geometry, from the processor's outputs and the config -----------------------------------------


@dataclasses.dataclass
class Placed:
    """One image as the processor tiled it: ``tiles[r][c]`` the tower's tile at tile row r, column c of its grid;
    ``crop`` (top, bottom, left, right) in patches, what the host keeps of the stitched grid."""

    tiles: list[list[int]]
    crop: tuple[int, int, int, int] | None = None


def side(model):
    vision = model.config.vision_config
    return vision.image_size // vision.patch_size


def cls_rows(name):
    """Where the CLS row of each tile is in the tower's stream: CLIP first, Llama 4 last, none otherwise."""
    return {"llava-clip": "first", "llava_next": "first", "llama4": "last"}.get(name)


def tower_pixels(name, model, inputs):
    """The pixels the tower receives, ``[tiles, 3, size, size]``, from the processor's pixel_values as the host
    selects them, in the model's dtype (float32; Llama 4's image processor returns bfloat16)."""
    pixels = inputs["pixel_values"].to(torch.float32)
    if name == "llava_next":
        return torch.cat([pixels[i][: 1 + len(p.tiles) * len(p.tiles[0])] for i, p in enumerate(placed(name, model, inputs))])
    if name in ("idefics3", "smolvlm", "granite_docling"):
        tiles = pixels.reshape(-1, *pixels.shape[2:])
        real = (tiles == 0.0).sum(dim=(-1, -2, -3)) != tiles.shape[1:].numel()
        return tiles[real]
    return pixels


def placed(name, model, inputs):
    """Every image of the batch, as its tiles sit in the tower's tile order."""
    config, images = model.config, images_of(name)
    if name in ("llava-siglip", "llava-clip", "gemma3", "paligemma"):
        return [Placed([[i]]) for i in range(inputs["pixel_values"].shape[0])]
    if name == "llava_next":
        out, tile = [], 0
        for height, width in inputs["image_sizes"].tolist():
            canvas_h, canvas_w = select_best_resolution((height, width), config.image_grid_pinpoints)
            rows, columns = canvas_h // config.vision_config.image_size, canvas_w // config.vision_config.image_size
            grid = [[tile + 1 + r * columns + c for c in range(columns)] for r in range(rows)]
            out.append(Placed(grid, unpadded(height, width, rows * side(model), columns * side(model))))
            tile += 1 + rows * columns
        return out
    if name in ("idefics3", "smolvlm"):
        info = model.processor.image_processor(images, return_row_col_info=True)
        out, tile = [], 0
        for rows, columns in zip(info["rows"][0], info["cols"][0]):
            if rows == columns == 0:
                out.append(Placed([[tile]]))
                tile += 1
                continue
            out.append(Placed([[tile + r * columns + c for c in range(columns)] for r in range(rows)]))
            tile += rows * columns + 1
        return out
    if name == "granite_docling":  # an image not split is one tile, with no thumbnail
        info = model.processor.image_processor(images)
        out, tile = [], 0
        for rows, columns in zip(info["rows"][0], info["cols"][0]):
            out.append(Placed([[tile + r * columns + c for c in range(columns)] for r in range(rows)]))
            tile += rows * columns + (rows * columns > 1)
        return out
    if name == "llama4":
        ratios = model.processor.image_processor(images, return_tensors="pt")["aspect_ratios"]
        out, tile = [], 0
        for rows, columns in ratios.tolist():
            out.append(Placed([[tile + r * columns + c for c in range(columns)] for r in range(rows)]))
            tile += rows * columns + (rows * columns > 1)
        return out
    raise AssertionError(name)


def unpadded(height, width, grid_h, grid_w):
    """LLaVA-NeXT: the rows or columns of the stitched grid (in patches) that hold the image, not the padding the
    processor centred it in (the host's unpad rule, from the original size)."""
    if width / height > grid_w / grid_h:
        new_h = int(round(height * (grid_w / width), 7))
        pad = (grid_h - new_h) // 2
        return pad, grid_h - pad, 0, grid_w
    new_w = int(round(width * (grid_h / height), 7))
    pad = (grid_w - new_w) // 2
    return 0, grid_h, pad, grid_w - pad


def place_tiles(table, image: Placed, n):
    """``table`` ``[tiles, n * n, ...]`` (a value per patch of each tile, raster order) laid out as the image:
    tiles side by side by their row and column, then cropped."""
    rows = [torch.cat([table[t].reshape(n, n, *table.shape[2:]) for t in row], dim=1) for row in image.tiles]
    grid = torch.cat(rows, dim=0)
    if image.crop is not None:
        top, bottom, left, right = image.crop
        grid = grid[top:bottom, left:right]
    return grid


def patch_indices(model, name, inputs):
    """Per image, long ``[grid_rows, grid_columns]``: the index ``tile * patches + patch`` of the patch at each cell."""
    n = side(model)
    tiles = tower_pixels(name, model, inputs).shape[0]
    table = torch.arange(tiles * n * n).reshape(tiles, n * n)
    return [place_tiles(table, image, n) for image in placed(name, model, inputs)]


def patch_table(stream, name):
    """A tower value ``[tiles, rows, ...]`` without its CLS rows: ``[tiles, patches, ...]``."""
    where = cls_rows(name)
    return stream[:, 1:] if where == "first" else stream[:, :-1] if where == "last" else stream


def hand_patch_embedding(name, model, pixels):
    """The tower's patch embedding of ``pixels``, by hand: ``[tiles, patches, vision_hidden_size]``."""
    embed = model.vision.patch_embed._module if name != "llama4" else model.vision._module.patch_embedding
    if name == "llama4":
        patch = model.config.vision_config.patch_size
        unfolded = F.unfold(pixels, kernel_size=patch, stride=patch).permute(0, 2, 1)
        return F.linear(unfolded, embed.linear.weight, embed.linear.bias)
    out = F.conv2d(pixels, embed.weight, embed.bias, stride=embed.stride, padding=embed.padding)
    return out.flatten(2).transpose(1, 2)


def token_sources(name, model, inputs):
    """long ``[image_tokens, k]``: the ``tile * patches + patch`` indices each image token is made of (-1: none),
    from the family's own code run on patch indices."""
    n = side(model)
    tiles = tower_pixels(name, model, inputs).shape[0]
    index = torch.arange(tiles * n * n, dtype=torch.float32).reshape(tiles, n * n, 1)
    if name in ("llava-siglip", "llava-clip"):
        strategy, cls = model.config.vision_feature_select_strategy, int(cls_rows(name) == "first")
        stream = torch.cat([torch.full((tiles, cls, 1), -1.0), index], dim=1)
        selected = stream[:, 1:] if strategy == "default" else stream
        return selected.reshape(-1, 1).long()
    if name == "llava_next":
        per_image, start = [], 0
        for image in placed(name, model, inputs):
            count = 1 + len(image.tiles) * len(image.tiles[0])
            per_image.append(index[start:start + count])
            start += count
        packed, _ = model._module.model.pack_image_features(per_image, inputs["image_sizes"], "default",
                                                             image_newline=torch.tensor([-1.0]))
        return torch.cat(packed).long()
    if name == "paligemma":  # the projector is one Linear: each patch's own token
        return index.reshape(-1, 1).long()
    if name == "gemma3":
        pool = model._module.model.multi_modal_projector.avg_pool
        one_hot = torch.eye(n * n).reshape(1, n * n, n, n)
        pooled = pool(one_hot).flatten(2).transpose(1, 2)[0]  # [tokens per image, patches]: weight of each patch
        sources = [torch.nonzero(weights).squeeze(1) for weights in pooled]
        per_image = torch.stack(sources)
        return torch.cat([per_image + t * n * n for t in range(tiles)])
    if name in ("idefics3", "smolvlm"):
        shuffled = model._module.model.connector.pixel_shuffle(index, model.config.scale_factor)
        return shuffled.reshape(-1, shuffled.shape[-1]).long()
    if name == "granite_docling":  # the connector's coarse path
        path = model._module.model.vision_model.connector.coarse
        shuffled = path.pixel_shuffle(index, path.scale_factor)
        return shuffled.reshape(-1, shuffled.shape[-1]).long()
    if name == "llama4":
        shuffled = pixel_shuffle(index, model.config.vision_config.pixel_shuffle_ratio)
        return shuffled.reshape(-1, shuffled.shape[-1]).long()
    raise AssertionError(name)


def expected_token_grids(name, model, inputs):
    """Per image, long ``[token_rows, token_columns]``: the image token (row of ``out[mask]``) at each block."""
    sources = token_sources(name, model, inputs)
    grids = []
    for cells in patch_indices(model, name, inputs):
        block = math.isqrt(sources.shape[1])
        grid = torch.full((cells.shape[0] // block, cells.shape[1] // block), -1, dtype=torch.long)
        for token, made_of in enumerate(sources):
            hits = torch.isin(cells, made_of[made_of >= 0]).nonzero()
            if len(hits):
                assert len(hits) == block * block
                grid[hits[:, 0].min() // block, hits[:, 1].min() // block] = token
        grids.append(grid)
    return grids


# -- reading the values -------------------------------------------------------------------------------------------


def first_stream(model, name):
    """The tower's stream before its first block's pre-norm, ``[tiles, rows, vision_hidden_size]``."""
    if cls_rows(name) == "first":
        return tower_body(model.vision).pre_layrnorm.input
    if name == "llama4":
        return model.vision.layernorm_pre.input
    return model.vision.layers[0].layer_input


def flat_stream(value):
    """Llama 4's pre-norm input carries a chunks axis of 1: ``[tiles, 1, rows, width]`` to ``[tiles, rows, width]``."""
    return value.reshape(-1, *value.shape[-2:])


def trace(model, name, images, **kwargs):
    return model.trace(chat_prompt(model.processor, len(images), "What is this?"), images=images, **kwargs)


@pytest.fixture(scope="module")
def run(model, name):
    """One traced forward on the patch-coloured images: the values read, grids taken inside the trace, the inputs."""
    images = images_of(name)
    inputs = model.processor(text=chat_prompt(model.processor, len(images), "What is this?"), images=images,
                             return_tensors="pt")
    count = len(images)
    in_trace, token_in_trace = [], []  # filled inside the trace
    with trace(model, name, images) as tracer:
        patches = model.vision.patch_embeddings.save()
        stream = first_stream(model, name)
        in_trace.extend(model.vision.patch_grid(flat_stream(stream), image=i) for i in range(count))
        stream = stream.save()
        probabilities = model.vision.layers[0].self_attn.attention_probabilities.save()
        features = model.vision.image_features.save()
        token_in_trace.extend(model.vision.token_grid(features, image=i) for i in range(count))
        hidden = model.layers[0].input.save()
        tracer.stop()
    return dict(inputs=inputs, stream=flat_stream(stream), patches=patches, features=features, hidden=hidden,
                probabilities=probabilities, in_trace=in_trace, token_in_trace=token_in_trace, count=count)


# -- the patch grid -----------------------------------------------------------------------------------------------


def test_the_model_records_the_batch_image_inputs(model, name, run):
    recorded = model.last_image_inputs
    assert isinstance(recorded, ImageInputs)
    assert torch.equal(recorded["pixel_values"], run["inputs"]["pixel_values"].to(recorded["pixel_values"].dtype))
    assert torch.equal(recorded.input_ids, run["inputs"]["input_ids"])
    assert torch.equal(recorded.image_token_mask, run["inputs"]["input_ids"] == model.config.image_token_id)
    assert recorded.image_tokens == run["features"].shape[0]


def test_patch_grid_puts_every_patch_embedding_where_its_patch_is(model, name, run):
    pixels = tower_pixels(name, model, run["inputs"])
    by_hand = hand_patch_embedding(name, model, pixels)
    assert torch.equal(run["patches"], by_hand)  # the tower's patch embedding is the hand-made one
    assert torch.equal(patch_table(run["stream"], name), by_hand)  # position embeddings zeroed: the stream is it
    for i, image in enumerate(placed(name, model, run["inputs"])):
        expected = place_tiles(by_hand, image, side(model))
        after = model.vision.patch_grid(run["stream"], image=i)
        assert torch.equal(after, expected)
        assert torch.equal(run["in_trace"][i], expected)


def test_patch_coloured_patches_differ(model, name, run):
    """The test image makes every patch's embedding its own, so a misplaced row cannot go unseen."""
    grid = model.vision.patch_grid(run["stream"], image=0)
    rows = grid.reshape(-1, grid.shape[-1])
    assert torch.unique(rows, dim=0).shape[0] == rows.shape[0]


def test_cls_rows_are_dropped(model, name, run):
    where = cls_rows(name)
    if where is None:
        pytest.skip("this tower has no CLS token")
    stream = run["stream"].clone()
    column = 0 if where == "first" else -1
    stream[:, column] = float("nan")
    for i in range(run["count"]):
        assert not model.vision.patch_grid(stream, image=i).isnan().any()


def test_one_heads_attention_from_one_patch_is_a_grid(model, name, run):
    probabilities, head, query = run["probabilities"], 1, 5
    where = cls_rows(name)
    query_row = query + (where == "first")
    for i, image in enumerate(placed(name, model, run["inputs"])):
        if len(image.tiles) * len(image.tiles[0]) == 1:
            # one tile: the attention from one patch over that image's keys, [keys]
            tile = image.tiles[0][0]
            value = probabilities[tile, head, query_row]
            expected = patch_table(probabilities[:, head, query_row], name)[tile].reshape(side(model), side(model))
        else:
            # tiles: each tile's attention from its patch over its own keys, [tiles, keys], the stream's layout
            value = probabilities[:, head, query_row]
            expected = place_tiles(patch_table(value, name), image, side(model))
        assert torch.equal(model.vision.patch_grid(value, image=i), expected)


# -- the token grid -----------------------------------------------------------------------------------------------


def test_token_grid_puts_every_image_token_where_its_block_is(model, name, run):
    tokens = run["features"].shape[0]
    expected = expected_token_grids(name, model, run["inputs"])
    covered = torch.cat([grid[grid >= 0] for grid in expected])
    assert sorted(covered.tolist()) == sorted(set(covered.tolist()))  # each token in one cell at most
    for i, cells in enumerate(expected):
        assert (cells >= 0).all()
        assert torch.equal(model.vision.token_grid(torch.arange(tokens), image=i), cells)
        assert torch.equal(model.vision.token_grid(run["features"], image=i), run["features"][cells])
        assert torch.equal(run["token_in_trace"][i], run["features"][cells])
        # the text stream [batch, seq, hidden] is read at the image tokens (Granite's text model multiplies the
        # embeddings by its embedding_multiplier after the scatter)
        scale = getattr(model.config.get_text_config(), "embedding_multiplier", 1.0)
        assert torch.equal(model.vision.token_grid(run["hidden"], image=i), run["features"][cells] * scale)


def test_the_token_grid_covers_the_patch_grid(model, name, run):
    for i in range(run["count"]):
        patches = model.vision.patch_grid(run["stream"], image=i).shape[:2]
        tokens = model.vision.token_grid(run["features"], image=i).shape[:2]
        assert patches[0] % tokens[0] == 0 and patches[1] % tokens[1] == 0
        assert patches[0] // tokens[0] == patches[1] // tokens[1]


# -- the inverses ---------------------------------------------------------------------------------------------------


def test_place_patch_grid_round_trips(model, name, run):
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
            if other != i and not _shares_tiles(model, name, run, i, other):
                assert torch.equal(model.vision.patch_grid(changed, image=other),
                                   model.vision.patch_grid(stream, image=other))


def _shares_tiles(model, name, run, first, second):
    images = placed(name, model, run["inputs"])
    tiles = lambda image: {t for row in image.tiles for t in row}  # noqa: E731
    return bool(tiles(images[first]) & tiles(images[second]))


def test_place_token_grid_round_trips(model, name, run):
    features, hidden = run["features"], run["hidden"]
    for i, cells in enumerate(expected_token_grids(name, model, run["inputs"])):
        grid = model.vision.token_grid(features, image=i)
        written = model.vision.place_token_grid(grid * 2, into=features.clone(), image=i)
        by_hand = features.clone()
        by_hand[cells.reshape(-1)] = features[cells.reshape(-1)] * 2
        assert torch.equal(written, by_hand)
        stream = model.vision.place_token_grid(grid * 2, into=hidden.clone(), image=i)
        mask = model.last_image_inputs.image_token_mask
        in_stream = features * getattr(model.config.get_text_config(), "embedding_multiplier", 1.0)  # Granite's
        in_stream[cells.reshape(-1)] = by_hand[cells.reshape(-1)]
        assert torch.equal(stream[mask], in_stream)
        assert torch.equal(stream[~mask], hidden[~mask])


def test_placing_a_patch_grid_in_a_trace_writes_through(model, name, run):
    """Zeroing image 1's patch grid of the first block's output in a trace changes the tower's output as zeroing
    those rows directly does."""
    cells = patch_indices(model, name, run["inputs"])[1].reshape(-1)
    n = side(model) ** 2
    tile, patch = cells // n, cells % n
    row = patch + (cls_rows(name) == "first")
    images = images_of(name)
    with trace(model, name, images) as tracer:
        out = model.vision.layers[0].layer_output
        grid = model.vision.patch_grid(out, image=1)
        model.vision.place_patch_grid(torch.zeros_like(grid), into=out, image=1)
        placed_output = model.vision.layers[-1].layer_output.save()
        tracer.stop()
    with trace(model, name, images) as tracer:
        out = model.vision.layers[0].layer_output
        out[tile, row] = 0
        direct = model.vision.layers[-1].layer_output.save()
        tracer.stop()
    with trace(model, name, images) as tracer:
        clean = model.vision.layers[-1].layer_output.save()
        tracer.stop()
    assert torch.equal(placed_output, direct)
    assert not torch.equal(placed_output, clean)


def test_placing_a_token_grid_in_a_trace_writes_through(model, name, run):
    cells = expected_token_grids(name, model, run["inputs"])[0].reshape(-1)
    images = images_of(name)
    with trace(model, name, images) as tracer:
        features = model.vision.image_features
        grid = model.vision.token_grid(features, image=0)
        model.vision.place_token_grid(torch.zeros_like(grid), into=features, image=0)
        placed_stream = model.layers[-1].layer_output.save()
        tracer.stop()
    with trace(model, name, images) as tracer:
        features = model.vision.image_features
        features[cells] = 0
        direct = model.layers[-1].layer_output.save()
        tracer.stop()
    with trace(model, name, images) as tracer:
        clean = model.layers[-1].layer_output.save()
        tracer.stop()
    assert torch.equal(placed_stream, direct)
    assert not torch.equal(placed_stream, clean)


# -- errors ---------------------------------------------------------------------------------------------------------


def test_an_image_the_batch_lacks_is_refused(model, name, run):
    with pytest.raises(GridError, match=rf"image={run['count']} is not an image of this batch: it holds {run['count']}"):
        model.vision.patch_grid(run["stream"], image=run["count"])
    with pytest.raises(GridError, match="is not an image of this batch"):
        model.vision.token_grid(run["features"], image=-1)


def test_a_value_of_another_shape_is_refused_with_the_shapes_accepted(model, name, run):
    with pytest.raises(GridError, match=r"neither the tower's stream .* nor this image's rows only"):
        model.vision.patch_grid(torch.zeros(3), image=0)
    with pytest.raises(GridError, match=r"is not over the image tokens: pass the text stream"):
        model.vision.token_grid(torch.zeros(run["features"].shape[0] + 7, 2), image=0)
    grid = model.vision.patch_grid(run["stream"], image=0)
    copy = run["stream"].clone()
    with pytest.raises(GridError, match="cannot be placed here"):
        model.vision.place_patch_grid(grid[:, :-1], into=copy, image=0)
    assert torch.equal(copy, run["stream"])  # nothing half-written


def test_a_family_without_a_layout_says_so(model, name, run, monkeypatch):
    monkeypatch.setattr(model, "family", dataclasses.replace(model.family, grid_layout=None))
    with pytest.raises(Unavailable, match=f"the {model.family.model_type} family has no grid layout yet"):
        model.vision.patch_grid(run["stream"], image=0)


def test_a_value_with_more_rows_than_the_stream_is_refused(model, name, run):
    stream = run["stream"]
    longer = torch.cat([stream, stream[:1]])  # one tile too many: not this batch's stream
    with pytest.raises(GridError, match=rf"holding exactly {stream.shape[0] * stream.shape[1]} rows"):
        model.vision.patch_grid(longer, image=0)


def test_an_option_the_layout_does_not_take_is_refused_by_name(model, name, run):
    with pytest.raises(TypeError, match=rf"of=: patch_grid on the {model.family.model_type} family takes no options"):
        model.vision.patch_grid(run["stream"], image=0, of="patch_embeddings")
    copy = run["features"].clone()
    with pytest.raises(TypeError, match=rf"of=: token_grid on the {model.family.model_type} family takes no options"):
        model.vision.place_token_grid(torch.zeros(1), into=copy, image=0, of="projector_output")
    assert torch.equal(copy, run["features"])


def test_no_batch_yet_says_what_to_do(model, name, run, monkeypatch):
    monkeypatch.setattr(model, "last_image_inputs", None)
    with pytest.raises(Unavailable, match="no batch with images has run on this model yet"):
        model.vision.token_grid(run["features"], image=0)


# -- the core, on plain tensors ---------------------------------------------------------------------------------------


def test_gather_fills_uncovered_cells_and_place_skips_them():
    value = torch.arange(12.0).reshape(2, 3, 2)  # [images, rows, width]
    grid = Grid(torch.tensor([[4, -1], [3, 5]]), slice(3, 6))
    rows = tower_rows(value, grid, stream_dims=2)
    gathered = gather(rows, grid)
    assert torch.equal(gathered[0, 0], value[1, 1]) and torch.equal(gathered[1, 0], value[1, 0])
    assert gathered[0, 1].isnan().all()
    copy = value.clone()
    place(torch.zeros(2, 2, 2), tower_rows(copy, grid, stream_dims=2), grid)
    expected = value.clone()
    expected[1, :] = 0
    assert torch.equal(copy, expected)
    # the image's rows only: indices count from the span's start
    assert torch.equal(gather(tower_rows(value[1], grid, stream_dims=2), grid)[1, 1], value[1, 2])


def test_patch_coloured_image_gives_each_patch_its_own_colour():
    image = patch_coloured_image(3, 5, 4)
    assert image.size == (20, 12)
    pixels = torch.tensor(list(image.getdata())).reshape(12, 20, 3)
    blocks = pixels.reshape(3, 4, 5, 4, 3).permute(0, 2, 1, 3, 4).reshape(15, 16, 3)
    assert (blocks == blocks[:, :1]).all()  # one colour per patch
    assert torch.unique(blocks[:, 0], dim=0).shape[0] == 15  # all different


# -- LLaVA's other select strategies: SigLIP under "default", CLIP under "full" ------------------------------------


@pytest.fixture(scope="module", params=[("llava-siglip", "default"), ("llava-clip", "full")], ids=lambda p: "-".join(p))
def strategy_model(request, tiny_checkpoint, tmp_path_factory):
    """The tiny LLaVA checkpoint with the select strategy its builder does not use, in its config and processor."""
    name, strategy = request.param
    folder = tmp_path_factory.mktemp(f"{name}-{strategy}")
    shutil.copytree(tiny_checkpoint(name), folder, dirs_exist_ok=True)
    for file in ("config.json", "processor_config.json"):
        config = json.loads((folder / file).read_text())
        assert config["vision_feature_select_strategy"] != strategy
        config["vision_feature_select_strategy"] = strategy
        (folder / file).write_text(json.dumps(config))
    model = StandardizedTransformer(folder, task="image-text-to-text", device="cpu", attn_implementation="eager")
    return name, model


def test_the_token_grid_follows_the_select_strategy(strategy_model):
    """Under "default" the host drops each tile's first tower row (SigLIP's first patch, which then has no token);
    under "full" it keeps it (CLIP's CLS, a token on no patch). Patch (r, c) is tower row cls + r * side + c, so its
    token is row cls + r * side + c - dropped of the image's tokens."""
    name, model = strategy_model
    images = images_of(name)
    layer = model.config.vision_feature_layer
    with trace(model, name, images):
        tower = model.vision.layers[layer].layer_output.save()
        selected = model.projector.input.save()
        features = model.vision.image_features.save()
    cls = int(name == "llava-clip")
    dropped = int(model.config.vision_feature_select_strategy == "default")
    assert torch.equal(selected, tower[:, dropped:])  # transformers' own selection, on the real values
    n, tokens = side(model), selected.shape[1]
    for image in range(len(images)):
        grid = model.vision.token_grid(features, image=image)
        for r in range(n):
            for c in range(n):
                row = cls + r * n + c - dropped
                if row < 0:
                    assert grid[r, c].isnan().all()
                else:
                    assert torch.equal(grid[r, c], features[image * tokens + row])
