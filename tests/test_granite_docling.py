"""StandardizedTransformer on a tiny Granite-Docling checkpoint: what is particular to it, exact.

Idefics 3's tiled tower with the connector inside it (``model.projector`` is
the tower's child ``connector``, returning the features and its DeepStack
features), tiles as Granite-Docling's image processor cuts them (an image it
does not split is one tile, no thumbnail), a coarse and a fine connector path,
DeepStack added after the first text blocks, and a Granite text model whose
multipliers scale the embeddings, each sublayer's output and the logits.
Every expected number comes from outside the code under test: the stock
processor's outputs, the modules' own weights and the config's multipliers,
or a recomputation from other values. The spec's contracts run in
test_vision_contracts.py; this file holds what is particular to the family.
"""

from __future__ import annotations

import nnsight
import pytest
import torch
from family_inputs import prompt
from swap_rules import without_rule
from tiled_grids import TiledGridSuite, flat_sources, real_tiles, tiles_in_order

from envoys import StandardizedTransformer, Unavailable
from envoys.testing import noise_image

ONE = [noise_image(32, 32, seed=0)]
TWO = [noise_image(32, 32, seed=0), noise_image(64, 48, seed=1)]  # 1 tile; 2x2 tiles + the thumbnail


CHECKPOINT = "granite_docling"


def processed(model, images, **options) -> dict:
    return model.processor(text=[prompt(model, images)], images=images, return_tensors="pt", **options)


def native(model):
    """The wrapper's inner model (GraniteDoclingModel)."""
    return model._module.model


def multipliers(model) -> tuple[float, float, float]:
    text = model.config.text_config
    return text.embedding_multiplier, text.residual_multiplier, text.logits_scaling


# -- loading and names -----------------------------------------------------------------------------


def test_loads_with_its_stock_processor_and_the_towers_sizes(model):
    # the connector (the projector) is inside the tower, the density router beside the image path: the row's native
    assert type(model.processor).__name__ == "GraniteDoclingProcessor"
    assert (model.vision.scale_factor, model.vision.image_seq_len) == (4, model.processor.image_seq_len)


def test_an_image_not_split_is_one_tile_with_no_thumbnail(model):
    tokens = model.processor.tokenizer.convert_ids_to_tokens(processed(model, ONE)["input_ids"][0])
    image = model.processor.image_seq_len
    assert "<global-img>" not in tokens and tokens.count("<image>") == image
    at = tokens.index("<row_1_col_1>")
    assert tokens[at - 1] == "<fake_token_around_image>" and tokens[at + 1:at + 1 + image] == ["<image>"] * image
    two = model.processor.tokenizer.convert_ids_to_tokens(processed(model, TWO)["input_ids"][0])
    assert two.count("<global-img>") == 1 and "<row_2_col_2>" in two  # the second image: 2x2 tiles + the thumbnail


# -- the tower and the connector -------------------------------------------------------------------


def test_each_row_is_one_of_the_processors_tiles_in_order(model):
    with model.trace(prompt(model, TWO), images=TWO):
        patches = model.vision.patch_embeddings.save()
    pixels = processed(model, TWO)["pixel_values"][0]
    with torch.no_grad():
        expected = model.vision.patch_embed._module(pixels).flatten(2).transpose(1, 2)
    assert pixels.shape[0] == 1 + 5 and torch.equal(patches, expected)


def test_padding_tiles_are_not_rows_and_the_grids_place_each_prompts_image(model):
    """Two prompts, 1 and 5 tiles: the processor pads the first with 4 tiles that pixel_attention_mask marks, which
    the host drops, so the tower has 6 rows, the real tiles in order; each prompt's image is on its own grid."""
    text = prompt(model, ONE)
    inputs = model.processor(text=[text, text], images=[[TWO[0]], [TWO[1]]], return_tensors="pt", padding=True)
    real = inputs["pixel_attention_mask"]
    assert real.sum(1).tolist() == [1, 5] and real.shape == (2, 5)
    with model.trace(**inputs):
        mask = model.vision.image_token_mask.save()
        patches = model.vision.patch_embeddings.save()
        features = model.vision.image_features.save()
        first = model.layers[0].input.save()
    with torch.no_grad():
        expected = model.vision.patch_embed._module(inputs["pixel_values"][real]).flatten(2).transpose(1, 2)
    assert torch.equal(patches, expected)
    assert mask.sum(1).tolist() == [4, 20] and torch.equal(first[mask], features * multipliers(model)[0])
    assert model.vision.patch_grid(patches, image=0).shape[:2] == (8, 8)  # one tile of 8x8 patches
    assert model.vision.patch_grid(patches, image=1).shape[:2] == (16, 16)  # 2x2 tiles, the thumbnail off the grid
    assert torch.equal(model.vision.token_grid(features, image=0), features[:4].reshape(2, 2, -1))


def test_tower_output_is_what_the_connector_receives_and_the_towers_last_hidden_state(model):
    """tower_output is post_layernorm's output, read before the connector runs inside the tower's forward; the tower
    returns it as its last_hidden_state after the connector."""
    with model.trace(prompt(model, TWO), images=TWO):
        last = model.vision.layers[-1].layer_output.save()
        tower = model.vision.tower_output.save()
        received = model.projector.input.save()
        returned = model.vision.output.last_hidden_state.save()
    assert torch.equal(tower, model.vision.norm._module(last)) and not torch.equal(tower, last)
    assert torch.equal(received, tower) and torch.equal(returned, tower)


def test_a_write_to_tower_output_reaches_the_connector(model):
    text = prompt(model, ONE)
    with model.trace(text, images=ONE):
        clean = model.vision.image_features.save()
    with model.trace(text, images=ONE):
        model.vision.tower_output[:] = 0
        received = model.projector.input.save()
        features = model.vision.image_features.save()
    assert torch.equal(received, torch.zeros_like(received)) and not torch.equal(features, clean)


def pixel_shuffle(tiles: torch.Tensor, scale: int) -> torch.Tensor:
    """Token (i, j) of a tile holds the scale x scale block of patches at (i, j), row by row, joined on the features."""
    count, patches, width = tiles.shape
    side = int(patches**0.5)
    blocks = tiles.reshape(count, side // scale, scale, side // scale, scale, width)
    return blocks.permute(0, 1, 3, 2, 4, 5).reshape(count, (side // scale) ** 2, scale * scale * width)


def connector_by_hand(connector, tower: torch.Tensor, path) -> torch.Tensor:
    with torch.no_grad():
        shuffled = pixel_shuffle(connector.ln_in(tower), path.scale_factor)
        hidden = path.pos_embed(path.projection(shuffled))
        return connector.ln_out(connector.mlp_fc2(torch.nn.functional.gelu(connector.ln_mid(hidden)))).flatten(0, 1)


def test_the_connector_returns_the_features_then_the_deepstack_features(model):
    """projector.output is (features [tiles * tokens, hidden_size], one DeepStack feature per tap): the coarse path
    recomputed from tower_output, and each tap's merger on its tower block's shuffled output."""
    with model.trace(prompt(model, TWO), images=TWO):
        taps = nnsight.save([model.vision.layers[k].layer_output for k in model.config.vision_config.deepstack_visual_indexes])
        tower = model.vision.tower_output.save()
        output = model.projector.output.save()
        features = model.vision.image_features.save()
        added = nnsight.save([model.layers[k].deepstack_output for k in range(len(taps))])
    connector = model.projector._module
    projected, deepstack = output
    assert torch.equal(projected, connector_by_hand(connector, tower, connector.coarse))
    assert torch.equal(projected, features) and features.shape == (6 * model.processor.image_seq_len, model.hidden_size)
    assert len(deepstack) == len(taps) == 2
    for k, (tap, merger) in enumerate(zip(taps, connector.coarse.deepstack_mergers)):
        with torch.no_grad():
            expected = merger(pixel_shuffle(tap, connector.coarse.scale_factor)).flatten(0, 1)
        assert torch.equal(deepstack[k], expected)
        assert torch.equal(added[k], deepstack[k])


def test_the_fine_route_shuffles_2x2_blocks_four_times_as_many_tokens(model):
    """The processor called with fine_route=True: 16 tokens a tile, the connector's fine path, its own DeepStack."""
    inputs = processed(model, TWO, fine_route=True)
    coarse = processed(model, TWO)
    mask = inputs["input_ids"] == model.config.image_token_id
    assert int(mask.sum()) == 4 * int((coarse["input_ids"] == model.config.image_token_id).sum())
    with model.trace(**inputs):
        tower = model.vision.tower_output.save()
        projected = model.projector.output[0].save()
        features = model.vision.image_features.save()
        first = model.layers[0].input.save()
        added = model.layers[0].deepstack_output.save()
    connector = model.projector._module
    assert connector.fine.scale_factor == model.vision.scale_factor // 2
    assert torch.equal(projected, connector_by_hand(connector, tower, connector.fine))
    assert torch.equal(features, projected) and features.shape == (int(mask.sum()), model.hidden_size)
    assert torch.equal(first[0][mask[0]], features * multipliers(model)[0])
    assert added.shape == features.shape


def test_the_token_grid_follows_the_route(model):
    """An image not split is one tile of image_seq_len tokens on its grid (2x2 coarse); on the fine route a tile is
    4x4 tokens, the 2x2 tiles of the second image 8x8, placed by their <row_r_col_c> tokens, the thumbnail off it."""
    with model.trace(prompt(model, TWO), images=TWO):
        model.vision.image_features.save()
    coarse = [model.vision.token_grid(torch.arange(24), image=i) for i in range(2)]
    assert torch.equal(coarse[0], torch.arange(4).reshape(2, 2))
    tile = lambda first: torch.arange(first, first + 4).reshape(2, 2)  # noqa: E731
    assert torch.equal(coarse[1], torch.cat([torch.cat([tile(4), tile(8)], 1), torch.cat([tile(12), tile(16)], 1)]))
    with model.trace(**processed(model, TWO, fine_route=True)):
        model.vision.image_features.save()
    fine = [model.vision.token_grid(torch.arange(96), image=i) for i in range(2)]
    assert torch.equal(fine[0], torch.arange(16).reshape(4, 4))
    assert fine[1].shape == (8, 8) and torch.equal(fine[1][:4, :4], torch.arange(16, 32).reshape(4, 4))
    assert torch.equal(fine[1][4:, 4:], torch.arange(64, 80).reshape(4, 4))  # tile (2, 2); the thumbnail is 80..95


# -- the Granite text model's multipliers ----------------------------------------------------------


def test_the_text_model_multiplies_the_embeddings_after_the_scatter(model):
    """layers[0].input == (the embeddings with the features scattered) * embedding_multiplier, image and text rows."""
    embedding, _, _ = multipliers(model)
    assert embedding != 1
    with model.trace(prompt(model, TWO), images=TWO):
        mask = model.vision.image_token_mask.save()
        tokens = model.token_embeddings.save()
        features = model.vision.image_features.save()
        first = model.layers[0].input.save()
    assert torch.equal(first[mask], features * embedding) and not torch.equal(first[mask], features)
    assert torch.equal(first[~mask], tokens[~mask] * embedding)


def test_each_sublayer_joins_the_stream_times_the_residual_multiplier(model):
    _, residual, _ = multipliers(model)
    assert residual != 1
    with model.trace(prompt(model, ONE), images=ONE):
        values = nnsight.save([[b.layer_input, b.attention_output, b.mlp_output, b.layer_output] for b in model.layers])
    for index, (layer_input, attention, mlp, output) in enumerate(values):
        assert torch.equal((layer_input + attention * residual) + mlp * residual, output), index
        assert not torch.equal(layer_input + attention + mlp, output), index


def test_the_logits_are_the_heads_output_divided_by_logits_scaling(model):
    _, _, scaling = multipliers(model)
    with model.trace(prompt(model, ONE), images=ONE):
        last = model.layers[-1].layer_output.save()
        head = model.lm_head.output.save()
        logits = model.logits.save()
    assert scaling != 1 and torch.equal(logits, head / scaling)
    assert torch.equal(model.project_on_vocab(last), logits)


def test_the_text_attention_scales_by_attention_multiplier(model):
    attention = model.layers[0].self_attn
    with model.trace(prompt(model, ONE), images=ONE):
        queries = attention.attention_queries.save()
        keys = attention.attention_keys.save()
        scores = attention.attention_scores.save()
    keys = keys.repeat_interleave(queries.shape[1] // keys.shape[1], dim=1)
    causal = torch.ones(scores.shape[-2:], dtype=torch.bool).tril()
    expected = torch.matmul(queries, keys.transpose(2, 3)) * model.config.text_config.attention_multiplier
    assert torch.equal(scores[..., causal], expected[..., causal])


# -- the density router and the rules --------------------------------------------------------------


def test_the_density_router_reads_tower_output_and_feeds_nothing_the_text_model_receives(model):
    text = prompt(model, ONE)
    with model.trace(text, images=ONE):
        tower = model.vision.tower_output.save()
        pooled = model.model.density_router.inputs.save()
        model.model.density_router.output[:] = 100.0
        logits = model.logits.save()
    with model.trace(text, images=ONE):
        clean = model.logits.save()
    args, _ = pooled
    assert torch.equal(args[0], tower) and torch.equal(logits, clean)


def test_without_the_deepstack_rule_deepstack_output_says_why(tiny_checkpoint, monkeypatch):
    without_rule(monkeypatch, "granite_docling.deepstack")
    model = StandardizedTransformer(tiny_checkpoint("granite_docling"), task="image-text-to-text")
    reasons = model.support()["deepstack_output"]
    assert reasons[0].startswith("no rewrite rule exposes self__deepstack_process_0") and "past the taps" in reasons[2]
    with pytest.raises(Unavailable, match=r"layers\[0\]\.deepstack_output is unavailable: no rewrite rule exposes"):
        model.layers[0].deepstack_output
    assert model.vision.support()["image_features"] is None


# -- the grids (tiled_grids.TiledGridSuite) ----------------------------------------------------------------------


class TestGrids(TiledGridSuite):
    """Granite-Docling: tiles then a thumbnail (none for an image not split), padding dropped, the coarse path's shuffle."""

    checkpoint = "granite_docling"
    images = [(8, 8, 4), (8, 16, 4), (16, 16, 4)]  # 1 tile (not split); 1x2 and 2x2 tiles + the thumbnail

    def placed(self, model, inputs):
        info = model.processor.image_processor(self.pictures())
        return tiles_in_order([(rows, columns, int(rows * columns > 1)) for rows, columns in zip(info["rows"][0], info["cols"][0])])

    def tower_pixels(self, model, inputs):
        return real_tiles(inputs["pixel_values"])

    def token_sources(self, model, inputs, index):
        path = model._module.model.vision_model.connector.coarse
        return flat_sources(path.pixel_shuffle(index, path.scale_factor))
