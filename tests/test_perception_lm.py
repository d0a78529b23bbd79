"""PerceptionLM: timm's Perception Encoder in a TimmWrapper (its eager branch chosen per instance from
attn_implementation), the rotary attention's interior at its rule's sites, the projector's pooling, the tiles' grids."""

from __future__ import annotations

import nnsight
import pytest
import torch
from nnsight import TransformersModel

pytest.importorskip("timm")

from test_remote import StockServer, read
from timm.layers.attention import AttentionRope
from timm.models.eva import EvaAttention
from transformers import AutoModelForImageTextToText

from envoys import StandardizedTransformer, Unavailable
from envoys.testing import chat_prompt, noise_image
from envoys.towers.timm_eager import run_eager_where_asked
from rewrites import rules_for_classes

CHECKPOINT = "perception_lm"
#: A 2x2 canvas and a 4x1 one (16 pixel tiles), each with its thumbnail: 5 tiles of 8x8 patches, 16 tokens a tile.
IMAGES = [noise_image(32, 32, seed=0), noise_image(64, 16, seed=1)]


def prompt(model):
    return chat_prompt(model.processor, len(IMAGES), "What is in the picture?")


def timm_attentions(module):
    return [part for part in module.modules() if isinstance(part, AttentionRope)]


def test_eager_is_set_on_this_models_timm_attention_alone(model, tiny_checkpoint):
    """Loaded eager, the tower's timm attention runs its eager branch; transformers' own load of the same checkpoint
    (and timm's default) keeps the fused kernel: the flag is the instance's."""
    assert all(not attention.fused_attn for attention in timm_attentions(model._module))
    plain = AutoModelForImageTextToText.from_pretrained(tiny_checkpoint(CHECKPOINT), attn_implementation="eager")
    assert all(attention.fused_attn for attention in timm_attentions(plain))
    run_eager_where_asked(plain)
    assert all(not attention.fused_attn for attention in timm_attentions(plain))


def test_eager_changes_the_kernel_alone(model, tiny_checkpoint):
    """The stock model on timm's fused kernel computes the same logits up to the kernels' rounding."""
    plain = AutoModelForImageTextToText.from_pretrained(tiny_checkpoint(CHECKPOINT), attn_implementation="eager").eval()
    inputs = model.processor(text=[prompt(model)], images=IMAGES, return_tensors="pt")
    with torch.no_grad():
        fused, eager = plain(**inputs).logits, model._module(**inputs).logits
    torch.testing.assert_close(eager, fused, rtol=1e-4, atol=1e-5)


def test_the_interior_is_the_eager_kernels_arithmetic(model):
    """Read in the forward's order: the values (the qkv projection), the rotated queries and keys, the scores, the
    probabilities, the head outputs; scores are the scaled products, probabilities their softmax, head outputs the
    probabilities times the values."""
    with torch.no_grad(), model.trace(prompt(model), images=IMAGES) as tracer:
        reads = nnsight.save([])
        for block in model.vision.layers:
            attention = block.self_attn
            reads.append([attention.attention_values, attention.attention_queries, attention.attention_keys,
                          attention.attention_scores, attention.attention_probabilities,
                          attention.attention_head_outputs])
        tracer.stop()
    for native, (values, queries, keys, scores, probabilities, heads) in zip(timm_attentions(model._module), reads):
        assert queries.shape == keys.shape == values.shape == (10, 2, 65, 16)
        assert torch.equal(scores, (queries * native.scale) @ keys.transpose(-2, -1))
        assert torch.equal(probabilities, scores.softmax(dim=-1))
        assert torch.equal(heads, (probabilities @ values).transpose(1, 2))
        assert not torch.equal(queries[:, :, 1:], values[:, :, 1:])  # noise: the rotation and projections differ


def test_the_values_are_nnsights_own_on_the_stock_model(model, tiny_checkpoint):
    """The same values through nnsight's .source of the stock forward, on a stock model set eager the same way."""
    stock = TransformersModel(str(tiny_checkpoint(CHECKPOINT)), task="image-text-to-text", attn_implementation="eager",
                              dispatch=True)
    run_eager_where_asked(stock._module)
    text = prompt(model)
    with torch.no_grad(), stock.trace(text, images=IMAGES) as tracer:
        attention = stock.model.vision_tower.timm_model.blocks[1].attn
        native = nnsight.save([attention.source.torch_cat_0.output, attention.source.torch_cat_1.output,
                               attention.source.maybe_add_mask_0.output, attention.source.attn_softmax_0.output])
        tracer.stop()
    with torch.no_grad(), model.trace(text, images=IMAGES) as tracer:
        block = model.vision.layers[1].self_attn
        ours = nnsight.save([block.attention_queries, block.attention_keys, block.attention_scores,
                             block.attention_probabilities])
        tracer.stop()
    for theirs, mine in zip(native, ours):
        assert torch.equal(theirs, mine)


def test_written_probabilities_are_what_weights_the_values(model):
    evenly = torch.full((10, 2, 65, 65), 1.0 / 65)
    with torch.no_grad(), model.trace(prompt(model), images=IMAGES) as tracer:
        attention = model.vision.layers[0].self_attn
        values = attention.attention_values.save()
        attention.attention_probabilities = evenly
        heads = attention.attention_head_outputs.save()
        tracer.stop()
    assert torch.equal(heads, (evenly @ values).transpose(1, 2))


def test_the_projector_drops_the_cls_row_and_pools_each_tiles_grid_two_by_two(model):
    with torch.no_grad(), model.trace(prompt(model), images=IMAGES) as tracer:
        tower = model.vision.tower_output.save()
        projector_input = model.projector.input.save()
        projected = model.projector.linear_2.output.save()
        output = model.projector.output.save()
        tracer.stop()
    assert torch.equal(projector_input, tower[:, 1:])
    assert projected.shape == (64, 10, 32)  # the projector's linears run patches first (LND)
    grid = projected.transpose(0, 1).reshape(10, 4, 2, 4, 2, 32)  # each tile's 8x8 patches as 4x4 blocks of 2x2
    torch.testing.assert_close(output, grid.mean(dim=(2, 4)).reshape(10, 16, 32), rtol=0, atol=1e-6)
    assert output.shape == (10, 16, 32)


def test_the_grids_place_the_tiles_where_they_came_from(model):
    """Image 1 (64x16) is a 4x1 canvas: its patch grid is 8 x 32 patches, the four grid tiles side by side after the
    thumbnail; its token grid 4 x 16, each tile's pooled 4x4."""
    with torch.no_grad(), model.trace(prompt(model), images=IMAGES) as tracer:
        embeddings = model.vision.patch_embeddings.save()
        features = model.vision.image_features.save()
        tracer.stop()
    stream = torch.cat([torch.zeros(10, 1, 32), embeddings], dim=1)  # the stream's layout: a CLS row, then patches
    patches = model.vision.patch_grid(stream, 1)
    assert patches.shape == (8, 32, 32)
    for column in range(4):  # image 1's tiles are 5..9: the thumbnail, then the canvas's four
        tile = embeddings[6 + column].reshape(8, 8, 32)
        assert torch.equal(patches[:, 8 * column:8 * (column + 1)], tile)
    corner = model.vision.patch_grid(stream, 0)  # image 0 (32x32) is a 2x2 canvas: tiles 1..4 in raster order
    assert corner.shape == (16, 16, 32)
    for tile in range(4):
        row, column = divmod(tile, 2)
        assert torch.equal(corner[8 * row:8 * (row + 1), 8 * column:8 * (column + 1)],
                           embeddings[1 + tile].reshape(8, 8, 32))
    tokens = model.vision.token_grid(features, 1)
    assert tokens.shape == (4, 16, 32)
    for column in range(4):
        first = 80 + 16 * (1 + column)  # image 0's 80 tokens, then image 1's thumbnail's 16
        assert torch.equal(tokens[:, 4 * column:4 * (column + 1)], features[first:first + 16].reshape(4, 4, 32))


def test_under_sdpa_the_pattern_is_unavailable_saying_to_load_eager(tiny_checkpoint):
    model = StandardizedTransformer(tiny_checkpoint(CHECKPOINT), task="image-text-to-text", attn_implementation="sdpa")
    with pytest.raises(Unavailable, match=r"fused kernel .* attn_implementation='eager'"):
        model.vision.layers[0].self_attn.attention_probabilities
    rows = model.vision.support(0)
    assert rows["self_attn.attention_queries"] is None and rows["self_attn.attention_keys"] is None  # both branches
    assert "fused kernel" in rows["self_attn.attention_scores"]


def test_the_rule_is_found_from_timms_forward_and_no_other():
    """AttentionRope's forward gets the rule; Eva's own attention (a third torch.cat, its biases) does not fit it."""
    names = [rule.name for rule in rules_for_classes([AttentionRope, EvaAttention])]
    assert names == ["timm.rope-attention"]


def test_a_blocks_sublayers_add_their_outputs_times_the_layer_scale(model):
    """PerceptionLM's encoder scales each sublayer's output (gamma_1, gamma_2) before adding it: attention_output and
    mlp_output are after the scale, the attention's and the MLP's own outputs before it."""
    with torch.no_grad(), model.trace(prompt(model), images=IMAGES) as tracer:
        block = model.vision.layers[1]
        attention = block.self_attn.output.save()
        added = block.attention_output.save()
        mlp = block.mlp.output.save()
        mlp_added = block.mlp_output.save()
        tracer.stop()
    native = model._module.model.vision_tower.timm_model.blocks[1]
    assert torch.equal(added, native.gamma_1 * attention) and not torch.equal(added, attention)
    assert torch.equal(mlp_added, native.gamma_2 * mlp)


def test_a_stock_server_serves_the_rotated_queries_and_says_its_timm_attention_runs_fused(model, tiny_checkpoint):
    """A server's stock model (NDIF's), loaded eager without this library, keeps timm's fused kernel: the queries
    come back as the local model's, the pattern Unavailable saying why."""
    path = tiny_checkpoint(CHECKPOINT)
    loading = {"task": "image-text-to-text", "attn_implementation": "eager"}
    client = StandardizedTransformer(path, **loading)
    server = StockServer(TransformersModel(str(path), dispatch=True, **loading))
    text = chat_prompt(model.processor, 1, "What is in the picture?")
    queries = read(client, client.vision.layers[0].self_attn, "attention_queries", text, server)
    assert torch.equal(queries, read(model, model.vision.layers[0].self_attn, "attention_queries", text))
    with pytest.raises(Unavailable, match="a stock model keeps timm's choice"):
        read(client, client.vision.layers[0].self_attn, "attention_probabilities", text, server)
