"""StandardizedTransformer on tiny Idefics 3 and SmolVLM checkpoints: the tiled tower, exact.

Both families share the tower (tiles as rows), the pixel-shuffle connector and
a Llama text model; they differ in where the features enter the text model:
Idefics 3 through its helper ``self.inputs_merger(..., image_hidden_states=...)``,
SmolVLM by ``inputs_embeds.masked_scatter`` in its own forward. Every expected
number comes from outside the code under test: the stock processor's outputs
(``pixel_values``' tile axis, the image processor's rows and cols,
``image_seq_len``), the modules' own weights and attributes, or a
recomputation from other values. The spec's contracts (the scatter and the
mask, the tiles as the stream's rows and every block's identity, the pattern,
what the connector reads, ablation, sizes, support, the text-only load,
generation, outputs against the plain model) run on both checkpoints in
test_vision_contracts.py; this file holds what is particular to them.
"""

from __future__ import annotations

import nnsight
import pytest
import torch
from family_inputs import prompt
from swap_rules import without_rule
from tiled_grids import TiledGridSuite, flat_sources, real_tiles, tiles_in_order

from envoys import StandardizedTransformer, Unavailable
from envoys.core.values import Argument
from envoys.testing import noise_image

FAMILIES = ["idefics3", "smolvlm"]
ONE = [noise_image(32, 32, seed=0)]
TWO = [noise_image(32, 32, seed=0), noise_image(64, 32, seed=1)]  # 32x32, and 64 wide x 32 high: different tilings


@pytest.fixture(scope="module")
def load(tiny_checkpoint):
    """Each family's model, loaded once for this module (eager, float32, with its processor)."""
    loaded: dict[str, StandardizedTransformer] = {}

    def get(name: str) -> StandardizedTransformer:
        if name not in loaded:
            loaded[name] = StandardizedTransformer(
                tiny_checkpoint(name), task="image-text-to-text", device="cpu", attn_implementation="eager"
            )
        return loaded[name]

    return get


@pytest.fixture(scope="module", params=FAMILIES)
def model(request, load):
    return load(request.param)


def processed(model, images) -> dict:
    return model.processor(text=[prompt(model, images)], images=images, return_tensors="pt")


def tiles_per_image(model, images) -> list[int]:
    """The image processor's own tiling: rows x cols tiles plus the global image (1 tile when not split)."""
    info = model.processor.image_processor(images=[list(images)], return_row_col_info=True, return_tensors="pt")
    return [rows * cols + 1 for rows, cols in zip(info["rows"][0], info["cols"][0])]


def patches_per_tile(model) -> int:
    config = model.config.vision_config
    return (config.image_size // config.patch_size) ** 2


def tokens_per_tile(model) -> int:
    return model.processor.image_seq_len


def native(model):
    """The wrapper's inner model (Idefics3Model / SmolVLMModel)."""
    return model._module.model


# -- loading and names -----------------------------------------------------------------------------


def test_each_family_loads_with_its_stock_processor(model):
    expected = {"idefics3": "Idefics3Processor", "smolvlm": "SmolVLMProcessor"}[model.config.model_type]
    assert type(model.processor).__name__ == expected


def test_the_vocabulary_holds_the_tile_tokens(model):
    tokenizer = model.processor.tokenizer
    tokens = ["<image>", "<fake_token_around_image>", "<global-img>"]
    tokens += [f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)]
    for token in tokens:
        assert tokenizer.convert_ids_to_tokens(tokenizer(token, add_special_tokens=False)["input_ids"]) == [token]
    ids = processed(model, TWO)["input_ids"][0].tolist()
    shown = tokenizer.convert_ids_to_tokens(ids)
    assert shown.count("<global-img>") == 2 and "<row_2_col_2>" in shown and "<row_1_col_2>" in shown


# -- the tiles and the scatter ---------------------------------------------------------------------


def test_each_row_is_one_of_the_processors_tiles_in_order(model):
    """Row t of the tower is the convolution of pixel_values' tile t: image after image, global image last."""
    with model.trace(prompt(model, TWO), images=TWO):
        patches = model.vision.patch_embeddings.save()
    pixels = processed(model, TWO)["pixel_values"][0]
    convolution = model.vision.patch_embed._module
    with torch.no_grad():
        expected = convolution(pixels).flatten(2).transpose(1, 2)
    assert torch.equal(patches, expected)
    assert not torch.equal(patches[0], patches[1])  # noise: tiles differ


def test_all_zero_padding_tiles_are_not_rows(model):
    """Two prompts in one batch, 5 and 3 tiles: the processor pads the second with 2 all-zero tiles, which the
    host drops, so the tower has 8 rows, the real tiles in order."""
    text = prompt(model, ONE)
    inputs = model.processor(text=[text, text], images=[[TWO[0]], [TWO[1]]], return_tensors="pt", padding=True)
    pixels = inputs["pixel_values"]
    real = ~(pixels.flatten(2) == 0).all(-1)  # [batch, tiles]: False on a padding tile
    per_prompt = [tiles_per_image(model, [image])[0] for image in TWO]
    assert real.sum(1).tolist() == per_prompt and pixels.shape[1] == max(per_prompt)
    with model.trace(**inputs):
        mask = model.vision.image_token_mask.save()
        patches = model.vision.patch_embeddings.save()
        features = model.vision.image_features.save()
        first = model.layers[0].input.save()
    with torch.no_grad():
        expected = model.vision.patch_embed._module(pixels[real]).flatten(2).transpose(1, 2)
    assert patches.shape[0] == sum(per_prompt) < pixels.shape[0] * pixels.shape[1]
    assert torch.equal(patches, expected)
    assert int(mask.sum()) == sum(per_prompt) * tokens_per_tile(model)
    assert torch.equal(first[mask], features)


def test_the_attention_interior_is_consistent_and_text_blocks_add_up(model):
    block = model.vision.layers[0]
    attention = block.self_attn
    with model.trace(prompt(model, ONE), images=ONE):
        queries = attention.attention_queries.save()
        values = attention.attention_values.save()
        scores = attention.attention_scores.save()
        probabilities = attention.attention_probabilities.save()
        heads = attention.attention_head_outputs.save()
        projected_in = attention.o_proj.input.save()
    with model.trace(prompt(model, ONE), images=ONE):
        text = nnsight.save([model.layers[1].layer_input, model.layers[1].attention_output,
                             model.layers[1].mlp_output, model.layers[1].layer_output])
    tiles, rows = sum(tiles_per_image(model, ONE)), patches_per_tile(model)
    assert queries.shape == values.shape == (tiles, model.vision.num_heads, rows, model.vision.head_dim)
    assert torch.equal(scores.softmax(-1), probabilities)
    assert torch.equal(probabilities @ values, heads.transpose(1, 2))
    assert torch.equal(heads.reshape(tiles, rows, -1), projected_in)
    layer_input, attended, mlp, output = text
    assert torch.equal(layer_input + attended + mlp, output)


def test_patch_embeddings_are_the_convolution_before_positions(model):
    """patch_embeddings is the convolution of the tiles the tower runs on, and block 0 receives it plus one row of
    the position table per patch, the same rows on every (whole) tile. Which rows is the release's own: recent
    ones give a whole tile's patches ids 0..patches-1; 4.57's bucketing repeats some."""
    inputs = processed(model, TWO)
    with model.trace(prompt(model, TWO), images=TWO):
        patches = model.vision.patch_embeddings.save()
        first = model.vision.layers[0].layer_input.save()
    embeddings = native(model).vision_model.embeddings
    pixels = inputs["pixel_values"].flatten(0, 1)
    real = pixels[(pixels != 0).flatten(1).any(1)]  # the host drops all-zero padding tiles
    assert torch.equal(patches, embeddings.patch_embedding(real).flatten(2).transpose(1, 2))
    positions = embeddings.position_embedding.weight
    assert positions.shape[0] == patches_per_tile(model)
    rows = torch.cdist(first - patches, positions.expand(first.shape[0], -1, -1)).argmin(-1)
    assert torch.equal(first, patches + positions[rows])
    assert torch.equal(rows, rows[:1].expand_as(rows))


def test_the_connector_pixel_shuffles_each_tile_of_tower_output(model):
    """The connector reads tower_output (the tower's last_hidden_state, after post_layernorm), pixel-shuffles each
    tile and projects it, giving image_features."""
    with model.trace(prompt(model, TWO), images=TWO):
        tower = model.vision.tower_output.save()
        features = model.vision.image_features.save()
    scale, (tiles, patches, width) = model.config.scale_factor, tower.shape
    side = int(patches**0.5)
    # Pixel shuffle, recomputed: token (i, j) of a tile holds the scale x scale block of patches at (i, j), row by row.
    blocks = tower.reshape(tiles, side // scale, scale, side // scale, scale, width)
    shuffled = blocks.permute(0, 1, 3, 2, 4, 5).reshape(tiles, (side // scale) ** 2, scale * scale * width)
    projection = native(model).connector.modality_projection.proj.weight
    assert torch.allclose(features, (shuffled @ projection.T).reshape(-1, model.hidden_size), atol=1e-6)


def test_image_features_can_be_replaced_whole_and_a_bad_shape_is_refused(model):
    text = prompt(model, ONE)
    with model.trace(text, images=ONE):
        mask = model.vision.image_token_mask.save()
        features = model.vision.image_features
        model.vision.image_features = torch.ones_like(features)
        first = model.layers[0].input.save()
    assert torch.equal(first[mask], torch.ones_like(first[mask]))
    tokens = sum(tiles_per_image(model, ONE)) * tokens_per_tile(model)
    with pytest.raises(ValueError, match=rf"vision\.image_features takes a tensor of shape \({tokens}, 32\).*got \(3, 32\)"):
        with model.trace(text, images=ONE):
            model.vision.image_features = torch.zeros(3, 32)


# -- what differs: where the features enter --------------------------------------------------------


def test_idefics3_reads_the_features_at_its_inputs_merger_call(load):
    model = load("idefics3")
    vision = model.vision
    assert type(vision).image_features._location(vision) == "model.model.source.self_inputs_merger_0.input"
    assert type(vision).image_features.selector(vision) == Argument(2, "image_hidden_states")
    text = prompt(model, TWO)
    with model.trace(text, images=TWO):
        features = vision.image_features.save()
    with model.trace(text, images=TWO):  # nnsight's own op of the same call: the helper's keyword argument
        call = nnsight.save(model.model.source.self_inputs_merger_0.inputs)
    args, kwargs = call
    assert args == () and set(kwargs) == {"input_ids", "inputs_embeds", "image_hidden_states"}
    assert torch.equal(features, kwargs["image_hidden_states"].reshape(-1, model.hidden_size))  # [tiles, tokens, hidden] on 4.x


def test_smolvlm_scatters_in_its_own_forward_with_no_helper(load):
    model = load("smolvlm")
    vision = model.vision
    if hasattr(native(model), "inputs_merger"):  # before transformers 5.21: the helper's call, as Idefics 3
        assert type(vision).image_features._location(vision) == "model.model.source.self_inputs_merger_0.input"
        assert type(vision).image_features.selector(vision) == Argument(2, "image_hidden_states")
        return
    assert type(vision).image_features._location(vision) == "model.model.source.inputs_embeds_masked_scatter_0.input"
    assert type(vision).image_features.selector(vision) == Argument(1, "source")


@pytest.mark.parametrize("name, site", [("idefics3", "self_inputs_merger_0"), ("smolvlm", "inputs_embeds_masked_scatter_0")])
def test_without_the_scatter_rule_image_features_says_why(name, site, tiny_checkpoint, monkeypatch):
    without_rule(monkeypatch, f"{name}.image-scatter")
    model = StandardizedTransformer(tiny_checkpoint(name), task="image-text-to-text")
    reason = model.vision.support()["image_features"]
    assert reason.startswith(f"no rewrite rule exposes {site}")
    with pytest.raises(Unavailable, match=rf"vision\.image_features is unavailable: no rewrite rule exposes {site}"):
        model.vision.image_features
    assert model.vision.support()["tower_output"] is None


# -- sizes and what is unavailable -----------------------------------------------------------------


def test_the_tile_sizes(model):
    vision = model.vision
    assert vision.image_size == model.processor.image_processor.max_image_size["longest_edge"]  # the tile side
    assert vision.scale_factor == native(model).connector.scale_factor
    assert vision.image_seq_len == model.processor.image_seq_len


@pytest.mark.parametrize("name", FAMILIES)
def test_what_is_unavailable_says_why(name, tiny_checkpoint):
    sdpa = StandardizedTransformer(tiny_checkpoint(name), task="image-text-to-text", attn_implementation="sdpa")
    rows = sdpa.vision.support()
    for value in ("self_attn.attention_scores", "self_attn.attention_probabilities"):
        assert set(rows[value]) == set(range(sdpa.vision.num_layers))
        assert all("attn_implementation='eager'" in reason for reason in rows[value].values())
    assert rows["self_attn.attention_queries"] is None and rows["image_features"] is None
    with pytest.raises(Unavailable, match=r"exist only inside eager attention, and this model runs 'sdpa'"):
        sdpa.layers[0].self_attn.attention_probabilities


# -- the grids (tiled_grids.TiledGridSuite) ----------------------------------------------------------------------


class IdeficsGrids(TiledGridSuite):
    """Idefics 3 and SmolVLM: tiles by the processor's rows and cols then a thumbnail, padding dropped, the connector's shuffle."""

    def placed(self, model, inputs):
        info = model.processor.image_processor(self.pictures(), return_row_col_info=True)
        shapes = zip(info["rows"][0], info["cols"][0])
        return tiles_in_order([(1, 1, 0) if rows == columns == 0 else (rows, columns, 1) for rows, columns in shapes])

    def tower_pixels(self, model, inputs):
        return real_tiles(inputs["pixel_values"])

    def token_sources(self, model, inputs, index):
        return flat_sources(model._module.model.connector.pixel_shuffle(index, model.config.scale_factor))


class TestGridsIdefics3(IdeficsGrids):
    """Idefics 3: the shared geometry, on a square, a wide and a small image (each split 2x2, then its thumbnail)."""

    checkpoint = "idefics3"
    images = [(8, 8, 8), (6, 8, 8), (2, 2, 8)]


class TestGridsSmolvlm(IdeficsGrids):
    """SmolVLM: the shared geometry, on a square and a tall image (each split 2x2, then its thumbnail)."""

    checkpoint = "smolvlm"
    images = [(8, 8, 8), (8, 6, 8)]
