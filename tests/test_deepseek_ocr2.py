"""StandardizedTransformer on a tiny DeepSeek-OCR 2 checkpoint: what is particular to its tower of two stacks (a SAM
encoder with its neck, then a Qwen2-style decoder over the SAM grid and learned queries, of which only the query rows
leave it), run on the global views and again on the local crops, exact.

Every expected number comes from outside the code under test: the stock processor's outputs, the modules' own
weights, nnsight's own labels of a stock nnsight model of the same checkpoint, or a recomputation from other values
read in the same trace. The spec's contracts on the views' run (model.vision) run in test_vision_contracts.py, the
router in test_moe_router.py.
"""

from __future__ import annotations

import nnsight
import pytest
import torch
import torch.nn.functional as F

from envoys import Unavailable
from envoys.image.grids import GridError
from envoys.testing import chat_prompt, noise_image
from envoys.testing.deepseek_ocr2 import GLOBAL, PATCH, SECOND, TILE
from envoys.towers.sam import SamVisionLayer
from envoys.vision.crops import CropsRun
from envoys.vision.tower import VisionLayer

CHECKPOINT = "deepseek_ocr2"
SMALL = noise_image(32, 32, seed=0)  # not cropped: no side over the 192 px tile
LARGE = noise_image(*SECOND, seed=1)  # cut into 2 x 1 crops of 192 px (the builder's docstring)
TWO = [SMALL, LARGE]
#: Folded grid sides and query counts (the builder's docstring): a 256 px view 16 x 16 and 256 queries, a 192 px crop
#: 12 x 12 and 144.
VIEW, VIEW_QUERIES, CROP, CROP_QUERIES = GLOBAL // PATCH // 4, 256, TILE // PATCH // 4, 144


def prompt(model, images) -> str:
    return chat_prompt(model.processor, len(images), "What is in the picture?")


def inputs(model, images) -> dict:
    return model.processor(text=[prompt(model, images)], images=images, return_tensors="pt")


def test_the_decoder_is_vision_layers_and_the_sam_stack_vision_sam_layers(model):
    tower = model._module.model.vision_tower
    assert model.vision._module is tower and isinstance(model.crops, CropsRun)
    assert [block._module for block in model.vision.layers] == list(tower.vision_encoder.layers)
    assert [block._module for block in model.vision.sam_layers] == list(tower.sam_encoder.layers)
    assert model.vision.norm._module is tower.vision_encoder.norm
    assert model.vision.patch_embed._module is tower.sam_encoder.patch_embed
    assert isinstance(model.vision.layers[0], VisionLayer) and isinstance(model.vision.sam_layers[0], SamVisionLayer)
    assert [model.vision.sam_layers[i].windowed for i in range(2)] == [True, False]  # global_attn_indexes [1]
    assert (model.vision.sam_hidden_size, model.vision.sam_num_heads, model.vision.sam_intermediate_size) == (32, 2, 64)
    assert (model.vision.window_size, model.vision.global_attn_indexes) == (8, (1,))
    assert (model.vision.patch_size, model.vision.image_size, model.vision.num_sam_layers) == (PATCH, GLOBAL, 2)


def stock_reads(stock, model, images):
    """nnsight's own labels of the stock forward: the first SAM block's softmax and the SAM encoder's call in the
    tower's first run; then (another trace) each call of the tower and the projector in get_image_features, and what
    it returns."""
    with stock.trace(prompt(model, images), images=images) as tracer:
        tower, attention = stock.model.vision_tower.source, stock.model.vision_tower.sam_encoder.layers[1].attn.source
        softmax = attention.torch_nn_functional_softmax_0.output.save()  # both bodies opened before the tower runs
        sam = tower.self_sam_encoder_0.output.last_hidden_state.save()
        tracer.stop()
    with stock.trace(prompt(model, images), images=images) as tracer:
        body = stock.model.source.self_get_image_features_0.source
        views = body.self_vision_tower_0.output.last_hidden_state.save()
        views_projected = body.self_multi_modal_projector_0.output.save()
        crops = body.self_vision_tower_1.output.last_hidden_state.save()
        crops_projected = body.self_multi_modal_projector_1.output.save()
        features = stock.model.source.self_get_image_features_0.output.pooler_output.save()
        tracer.stop()
    return softmax, sam, views, views_projected, crops, crops_projected, features


def test_both_runs_are_the_stock_forwards_at_nnsights_own_labels(model, stock):
    """The global SAM block's softmax and sam_features are the stock ones; what the tower returns is tower_output's
    query rows, the normed rows after the patch rows, on both runs; the projector's outputs and image_features are the
    stock forward's."""
    with model.trace(prompt(model, TWO), images=TWO):
        probabilities = model.vision.sam_layers[1].self_attn.attention_probabilities.save()
        sam = model.vision.sam_features.save()
        tower = model.vision.tower_output.save()
        views = model.projector.input.save()
        views_projected = model.projector.output.save()
        crops_tower = model.crops.tower_output.save()
        crops = model.crops.projector.input.save()
        crops_projected = model.crops.projector.output.save()
        features = model.vision.image_features.save()
    softmax, stock_sam, stock_views, stock_views_projected, stock_crops, stock_crops_projected, stock_features = (
        stock_reads(stock, model, TWO))
    assert torch.equal(probabilities.flatten(0, 1), softmax) and probabilities.shape == (2, 2, 4096, 4096)
    assert torch.equal(sam, stock_sam.flatten(2).transpose(1, 2)) and sam.shape == (2, VIEW * VIEW, 32)
    assert torch.equal(views, stock_views) and torch.equal(views, tower[:, VIEW * VIEW:])
    assert torch.equal(crops, stock_crops) and torch.equal(crops, crops_tower[:, CROP * CROP:])
    assert views.shape == (2, VIEW_QUERIES, 32) and crops.shape == (2, CROP_QUERIES, 32)
    assert torch.equal(views_projected, stock_views_projected) and torch.equal(crops_projected, stock_crops_projected)
    assert torch.equal(features, torch.cat(stock_features))


@pytest.mark.parametrize("run", ["vision", "crops"])
def test_the_sam_stack_and_the_queries_make_the_decoders_input(model, run):
    """On each run: patch_embeddings is the convolution of the run's pixels; every SAM block's identity holds; the neck
    and the folding convolutions on the last SAM block's output are sam_features; the first decoder block's input is
    sam_features then the learned queries of the run's table (256 for a view, 144 for a crop); tower_output is the
    final norm of the last decoder block's output."""
    pixels = inputs(model, TWO)["pixel_values" if run == "vision" else "pixel_values_local"]
    tower = getattr(model, run)
    with model.trace(prompt(model, TWO), images=TWO):
        if run == "crops":
            model.vision.tower_output.save()  # the views' run first
        embedded = tower.patch_embeddings.save()
        blocks = nnsight.save([])
        for index in range(model.vision.num_sam_layers):
            block = tower.sam_layers[index]
            blocks.append([block.layer_input.save(), block.attention_output.save(), block.mlp_output.save(),
                           block.layer_output.save()])
        sam = tower.sam_features.save()
        first = tower.layers[0].layer_input.save()
        last = tower.layers[-1].layer_output.save()
        normed = tower.tower_output.save()
    native = model._module.model.vision_tower
    conv = native.sam_encoder.patch_embed.projection
    side = pixels.shape[-1] // PATCH
    assert torch.equal(embedded, F.conv2d(pixels, conv.weight, conv.bias, stride=conv.stride).flatten(2).transpose(1, 2))
    for index, (layer_input, attention, mlp, output) in enumerate(blocks):
        assert layer_input.shape == (pixels.shape[0], side * side, 32)
        assert torch.equal(layer_input + attention + mlp, output)
        if index:
            assert torch.equal(layer_input, blocks[index - 1][3])
    with torch.no_grad():
        folded = native.sam_encoder.proj(native.sam_encoder.neck(blocks[-1][3].unflatten(1, (side, side))))
        table = native.query_1024_resolution if run == "vision" else native.query_768_resolution
        expected = torch.cat([sam, table.weight.expand(pixels.shape[0], -1, -1)], dim=1)
        final = native.vision_encoder.norm(last)
    assert torch.equal(sam, folded.flatten(2).transpose(1, 2))
    assert torch.equal(first, expected)
    assert torch.equal(normed, final)


def test_the_decoder_attends_to_every_patch_and_causally_over_its_queries(model):
    """A decoder block's pattern over a view's 256 patch rows and 256 queries: a patch row attends to every patch row
    and no query, a query to every patch row, itself and the queries before it."""
    with model.trace(prompt(model, TWO), images=TWO) as tracer:
        pattern = model.vision.layers[0].self_attn.attention_probabilities.save()
        tracer.stop()
    patches = VIEW * VIEW
    assert pattern.shape == (2, 2, patches + VIEW_QUERIES, patches + VIEW_QUERIES)
    seen = torch.zeros(patches + VIEW_QUERIES, patches + VIEW_QUERIES, dtype=torch.bool)
    seen[:, :patches] = True
    seen[patches:, patches:] = torch.ones(VIEW_QUERIES, VIEW_QUERIES, dtype=torch.bool).tril()
    assert bool((pattern[..., seen] > 0).all()) and not pattern[..., ~seen].any()


def test_image_features_are_each_images_crops_then_its_view_then_view_separator(model):
    """What the host scatters: image 0's view's query rows and view_separator; image 1's 2 crops' query rows, crop
    after crop, then its view's, then view_separator; layers[0].input at the mask is that."""
    assert inputs(model, TWO)["num_local_patches"].tolist() == [0, 2]
    with model.trace(prompt(model, TWO), images=TWO):
        mask = model.vision.image_token_mask.save()
        views = model.projector.output.save()
        crops = model.crops.projector.output.save()
        features = model.vision.image_features.save()
        first = model.layers[0].input.save()
    separator = model._module.model.view_separator.detach()[None]
    expected = torch.cat([views[0], separator, crops[0], crops[1], views[1], separator])
    assert features.shape == (257 + 545, 32) and torch.equal(features, expected)
    assert torch.equal(first[mask], features)


def test_the_grids_of_each_value_and_no_token_grid(model):
    """patch_grid lays out a SAM value (of='sam': the patch convolution of the view's pixels) and a decoder block's
    patch rows (its queries on no cell); crops.patch_grid does so per crop; the tokens, the queries' outputs, have no
    grid."""
    batch = inputs(model, TWO)
    with model.trace(prompt(model, TWO), images=TWO):
        embedded = model.vision.patch_embeddings.save()
        stream = model.vision.layers[0].layer_output.save()
        crops_embedded = model.crops.patch_embeddings.save()
        crops_stream = model.crops.layers[0].layer_output.save()
        features = model.vision.image_features.save()
    conv = model._module.model.vision_tower.sam_encoder.patch_embed.projection
    for image in range(2):
        pixels = batch["pixel_values"][image:image + 1]
        expected = F.conv2d(pixels, conv.weight, conv.bias, stride=conv.stride)[0].permute(1, 2, 0)
        assert torch.equal(model.vision.patch_grid(embedded, image, of="sam"), expected)
        assert torch.equal(model.vision.patch_grid(stream, image), stream[image, :VIEW * VIEW].unflatten(0, (VIEW, VIEW)))
    for crop in range(2):
        pixels = batch["pixel_values_local"][crop:crop + 1]
        expected = F.conv2d(pixels, conv.weight, conv.bias, stride=conv.stride)[0].permute(1, 2, 0)
        assert torch.equal(model.crops.patch_grid(crops_embedded, crop, of="sam"), expected)
        assert torch.equal(model.crops.patch_grid(crops_stream, crop),
                           crops_stream[crop, :CROP * CROP].unflatten(0, (CROP, CROP)))
    with pytest.raises(Unavailable, match="image tokens are its decoder's learned queries' outputs"):
        model.vision.token_grid(features, 0)
    with pytest.raises(GridError, match="of='output' is not a DeepSeek-OCR 2 per-patch value.*'stream' or 'sam'"):
        model.vision.patch_grid(stream, 0, of="output")


def test_a_write_on_the_views_sam_stack_reaches_the_views_rows_alone(model):
    """Zeroing the first SAM block's output on the views' run changes every view's query rows of image_features and
    leaves the crops' rows, from the later run, and the separators as they were."""
    with model.trace(prompt(model, TWO), images=TWO):
        clean = model.vision.image_features.save()
    with model.trace(prompt(model, TWO), images=TWO):
        model.vision.sam_layers[0].layer_output[:] = 0
        crops = model.crops.sam_layers[0].layer_output.save()
        edited = model.vision.image_features.save()
    assert crops.abs().sum() > 0
    view_rows = torch.zeros(edited.shape[0], dtype=torch.bool)
    view_rows[:256] = True  # image 0's view
    view_rows[257 + 2 * 144:257 + 2 * 144 + 256] = True  # image 1's view, after its crops
    assert bool((edited[view_rows] != clean[view_rows]).any(-1).all())
    assert torch.equal(edited[~view_rows], clean[~view_rows])
