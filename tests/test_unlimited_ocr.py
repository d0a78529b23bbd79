"""StandardizedTransformer on a tiny Unlimited-OCR checkpoint: what is particular to its tower of two stacks (a SAM
encoder with its neck, then a CLIP-style encoder over the SAM grid), run on the global views and again on the local
crops, and to the host's layout of each image's rows (the crops' grid, the view's, a learned image_newline after each
token row and a view_separator after the view), exact.

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

from envoys.families import unlimited_ocr
from envoys.image.grids import GridError
from envoys.testing import chat_prompt, noise_image
from envoys.testing.unlimited_ocr import GLOBAL, PATCH, TILE
from envoys.towers.sam import SamVisionAttention, SamVisionLayer, SamVisionMlp
from envoys.vision.crops import CropsRun
from envoys.vision.tower import VisionAttention, VisionLayer, VisionMlp

CHECKPOINT = "unlimited_ocr"
SMALL = noise_image(32, 32, seed=0)  # not cropped: no side over the 32 px tile
LARGE = noise_image(64, 48, seed=1)  # cut into 2 x 2 crops of 32 px (the builder's docstring)
TWO = [SMALL, LARGE]
#: Token grid sides (the builder's docstring): a 64 px view folds to 4 x 4, a 32 px crop to 2 x 2.
VIEW, CROP = GLOBAL // PATCH // 4, TILE // PATCH // 4
#: The SAM grid's side on a view and on a crop.
SAM_VIEW, SAM_CROP = GLOBAL // PATCH, TILE // PATCH


def prompt(model, images) -> str:
    return chat_prompt(model.processor, len(images), "What is in the picture?")


def inputs(model, images) -> dict:
    return model.processor(text=[prompt(model, images)], images=images, return_tensors="pt")


def test_the_clip_stack_is_vision_layers_and_the_sam_stack_vision_sam_layers(model):
    tower = model._module.model.vision_tower
    assert model.vision._module is tower and isinstance(model.crops, CropsRun)
    assert [block._module for block in model.vision.layers] == list(tower.vision_encoder.encoder.layers)
    assert [block._module for block in model.vision.sam_layers] == list(tower.sam_encoder.layers)
    assert model.vision.patch_embed._module is tower.sam_encoder.patch_embed
    assert isinstance(model.vision.layers[0], VisionLayer) and isinstance(model.vision.layers[0].self_attn, VisionAttention)
    assert isinstance(model.vision.layers[0].mlp, VisionMlp)
    block = model.vision.sam_layers[0]
    assert isinstance(block, SamVisionLayer) and isinstance(block.self_attn, SamVisionAttention)
    assert isinstance(block.mlp, SamVisionMlp)
    assert [model.vision.sam_layers[i].windowed for i in range(2)] == [True, False]  # global_attn_indexes [1]
    assert (model.vision.num_layers, model.vision.num_sam_layers) == (2, 2)
    assert (model.vision.sam_hidden_size, model.vision.sam_num_heads, model.vision.sam_intermediate_size) == (32, 2, 64)
    assert (model.vision.window_size, model.vision.global_attn_indexes) == (3, (1,))
    assert (model.vision.patch_size, model.vision.image_size) == (PATCH, GLOBAL)
    assert unlimited_ocr.FAMILY.crops.carrier == "pixel_values_local"


def stock_reads(stock, model, images):
    """nnsight's own labels of the stock forward: the first SAM block's softmax and the SAM encoder's call in the
    tower's first run; then (another trace) each call of the tower and the projector in get_image_features."""
    with stock.trace(prompt(model, images), images=images) as tracer:
        tower, attention = stock.model.vision_tower.source, stock.model.vision_tower.sam_encoder.layers[0].attn.source
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
    return sam, softmax, views, views_projected, crops, crops_projected, features


def test_both_runs_are_the_stock_forwards_at_nnsights_own_labels(model, stock):
    """sam_features is the SAM encoder's output, the SAM softmax the stock one; each row the tower returns is the
    last CLIP block's patch row (CLS dropped) beside the SAM grid's folded cell, on both runs, and the projector's
    outputs and image_features are the stock forward's."""
    with model.trace(prompt(model, TWO), images=TWO):
        probabilities = model.vision.sam_layers[0].self_attn.attention_probabilities.save()
        sam = model.vision.sam_features.save()
        tower = model.vision.tower_output.save()
        views = model.projector.input.save()
        views_projected = model.projector.output.save()
        crops_sam = model.crops.sam_features.save()
        crops_tower = model.crops.tower_output.save()
        crops = model.crops.projector.input.save()
        crops_projected = model.crops.projector.output.save()
        features = model.vision.image_features.save()
    stock_sam, softmax, stock_views, stock_views_projected, stock_crops, stock_crops_projected, stock_features = (
        stock_reads(stock, model, TWO))
    assert torch.equal(sam, stock_sam.flatten(2).transpose(1, 2))
    assert torch.equal(probabilities.flatten(0, 1), softmax)
    assert probabilities.shape == (2 * 6 * 6, 2, 9, 9)  # the 16x16 grid padded to 18: 6 x 6 windows of 3 x 3 a view
    assert torch.equal(views, stock_views) and torch.equal(views, torch.cat([tower[:, 1:], sam], dim=-1))
    assert torch.equal(crops, stock_crops) and torch.equal(crops, torch.cat([crops_tower[:, 1:], crops_sam], dim=-1))
    assert views.shape == (2, VIEW * VIEW, 64) and crops.shape == (4, CROP * CROP, 64)
    assert torch.equal(views_projected, stock_views_projected) and torch.equal(crops_projected, stock_crops_projected)
    assert torch.equal(features, torch.cat(stock_features))


@pytest.mark.parametrize("run", ["vision", "crops"])
def test_the_sam_stack_runs_from_the_patch_convolution_to_sam_features(model, run):
    """On each run: patch_embeddings is the convolution of the run's pixels; every SAM block's identity holds and its
    output is the next one's input; the neck and the folding convolutions on the last SAM block's output are
    sam_features. On the views (the SAM position grid's own size), the first block's input is the patch embeddings
    plus the position grid."""
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
    conv, native = model.vision.patch_embed._module.projection, model._module.model.vision_tower.sam_encoder
    side = pixels.shape[-1] // PATCH
    assert torch.equal(embedded, F.conv2d(pixels, conv.weight, conv.bias, stride=conv.stride).flatten(2).transpose(1, 2))
    for index, (layer_input, attention, mlp, output) in enumerate(blocks):
        assert layer_input.shape == (pixels.shape[0], side * side, 32)
        assert torch.equal(layer_input + attention + mlp, output)
        if index:
            assert torch.equal(layer_input, blocks[index - 1][3])
    if run == "vision":
        assert torch.equal(blocks[0][0], embedded + native.pos_embed.flatten(1, 2))
    with torch.no_grad():
        folded = native.proj(native.neck(blocks[-1][3].unflatten(1, (side, side))))
    assert torch.equal(sam, folded.flatten(2).transpose(1, 2))


def test_the_clip_stack_takes_the_sam_grid_as_its_patch_embeddings(model):
    """The first CLIP block's input is the pre-norm of the learned CLS then sam_features, plus the learned positions
    (the views' 4x4 grid is the configured one); tower_output is the last CLIP block's output, CLS first."""
    with model.trace(prompt(model, TWO), images=TWO):
        sam = model.vision.sam_features.save()
        first = model.vision.layers[0].layer_input.save()
        last = model.vision.layers[-1].layer_output.save()
        tower = model.vision.tower_output.save()
    native = model._module.model.vision_tower.vision_encoder
    embeddings = native.embeddings
    with torch.no_grad():
        rows = torch.cat([embeddings.class_embedding.expand(2, 1, -1), sam], dim=1)
        expected = native.pre_layrnorm(rows + embeddings.position_embedding.weight.unsqueeze(0))
    assert torch.equal(first, expected)
    assert tower.shape == (2, 1 + VIEW * VIEW, 32) and torch.equal(tower, last)


def stitched(crops: torch.Tensor, columns: int, rows: int) -> list[torch.Tensor]:
    """An image's crops' projected rows (``[crops, CROP * CROP, width]``, crops row after row) as the token rows of
    the canvas they tile, top to bottom, each a list of the row's tokens left to right."""
    lines = []
    for line in range(rows * CROP):
        tokens = []
        for column in range(columns * CROP):
            crop = (line // CROP) * columns + column // CROP
            tokens.append(crops[crop, (line % CROP) * CROP + column % CROP])
        lines.append(torch.stack(tokens))
    return lines


def test_image_features_are_the_crops_canvas_then_the_view_each_row_closed_by_image_newline(model):
    """What the host scatters, rebuilt row by row from the two runs' projector outputs and the host's learned rows:
    image 0's view (no crops), each of its 4 token rows then image_newline, then view_separator; image 1's 2 x 2
    crops' canvas likewise, then its view, then view_separator; layers[0].input at the mask is that."""
    batch = inputs(model, TWO)
    assert batch["num_local_patches"] == [0, 4] and batch["patches_grid"][1] == [2, 2]
    with model.trace(prompt(model, TWO), images=TWO):
        mask = model.vision.image_token_mask.save()
        views = model.projector.output.save()
        crops = model.crops.projector.output.save()
        features = model.vision.image_features.save()
        first = model.layers[0].input.save()
    host = model._module.model
    newline, separator = host.image_newline.detach(), host.view_separator.detach()

    def closed(lines):
        return [torch.cat([line, newline[None]]) for line in lines]

    view_lines = [[views[image, row * VIEW:(row + 1) * VIEW] for row in range(VIEW)] for image in range(2)]
    expected = torch.cat([
        *closed(view_lines[0]), separator[None],
        *closed(stitched(crops, 2, 2)), *closed(view_lines[1]), separator[None],
    ])
    assert features.shape == (21 + 41, 32) and torch.equal(features, expected)
    assert torch.equal(first[mask], features)


def test_the_grids_of_each_value_and_the_learned_rows_no_cell_covers(model):
    """token_grid is each image's view tokens (its projector rows), leaving out the crops' rows, every image_newline
    and the view_separator; patch_grid lays out a SAM value (of='sam': the patch convolution of the view's pixels), a
    CLIP block's (CLS dropped) and a value without CLS (of='output'); crops.patch_grid does so per crop."""
    batch = inputs(model, TWO)
    with model.trace(prompt(model, TWO), images=TWO):
        embedded = model.vision.patch_embeddings.save()
        stream = model.vision.layers[0].layer_output.save()
        received = model.projector.input.save()
        views = model.projector.output.save()
        crops_embedded = model.crops.patch_embeddings.save()
        crops_stream = model.crops.layers[0].layer_output.save()
        features = model.vision.image_features.save()
    conv, host = model.vision.patch_embed._module.projection, model._module.model
    spans = [(0, 21), (21, 62)]
    for image, (start, end) in enumerate(spans):
        pixels = batch["pixel_values"][image:image + 1]
        expected = F.conv2d(pixels, conv.weight, conv.bias, stride=conv.stride)[0].permute(1, 2, 0)
        assert torch.equal(model.vision.patch_grid(embedded, image, of="sam"), expected)
        assert model.vision.patch_grid(embedded, image, of="sam").shape == (SAM_VIEW, SAM_VIEW, 32)
        assert torch.equal(model.vision.patch_grid(stream, image), stream[image, 1:].unflatten(0, (VIEW, VIEW)))
        assert torch.equal(model.vision.patch_grid(received, image, of="output"),
                           received[image].unflatten(0, (VIEW, VIEW)))
        tokens = model.vision.token_grid(features, image)
        assert torch.equal(tokens, views[image].unflatten(0, (VIEW, VIEW)))
        written = torch.zeros_like(features)
        model.vision.place_token_grid(tokens, written, image)
        left = written[start:end].abs().sum(-1) == 0  # the image's rows no cell covers
        assert int(left.sum()) == (end - start) - VIEW * VIEW
        rows = features[start:end][left]
        assert torch.equal(rows[-1], host.view_separator.detach())  # the view_separator closes the image
        view_newlines = rows[-1 - VIEW:-1]
        assert torch.equal(view_newlines, host.image_newline.detach().expand(VIEW, -1))
    assert int((features[21:62].abs().sum(-1) > 0).sum()) == 41
    for crop in range(4):
        pixels = batch["pixel_values_local"][crop:crop + 1]
        expected = F.conv2d(pixels, conv.weight, conv.bias, stride=conv.stride)[0].permute(1, 2, 0)
        assert torch.equal(model.crops.patch_grid(crops_embedded, crop, of="sam"), expected)
        assert torch.equal(model.crops.patch_grid(crops_stream, crop), crops_stream[crop, 1:].unflatten(0, (CROP, CROP)))
    with pytest.raises(GridError, match="of='tokens' is not an Unlimited-OCR per-patch value.*'stream' or 'sam' or 'output'"):
        model.vision.patch_grid(stream, 0, of="tokens")


def test_a_write_on_the_views_sam_stack_reaches_the_views_rows_alone(model):
    """Zeroing the first SAM block's output on the views' run changes sam_features and every view's rows of
    image_features, and leaves the crops' rows, from the later run, as they were."""
    with model.trace(prompt(model, TWO), images=TWO):
        clean_sam = model.vision.sam_features.save()
        clean = model.vision.image_features.save()
    with model.trace(prompt(model, TWO), images=TWO):
        model.vision.sam_layers[0].layer_output[:] = 0
        sam = model.vision.sam_features.save()
        crops = model.crops.sam_layers[0].layer_output.save()
        edited = model.vision.image_features.save()
    assert not torch.equal(sam, clean_sam) and crops.abs().sum() > 0
    crop_rows = slice(21, 21 + 20)  # image 1's crops' canvas: 4 token rows of 4 and a newline
    assert torch.equal(edited[crop_rows], clean[crop_rows])
    view_rows = torch.ones(edited.shape[0], dtype=torch.bool)
    view_rows[crop_rows] = False
    newline = model._module.model.image_newline.detach()
    changed = (edited != clean).any(-1)
    assert bool(changed[view_rows].any())
    assert torch.equal(edited[view_rows][~changed[view_rows]],
                       clean[view_rows][~changed[view_rows]])  # what did not change: the host's learned rows
    assert all(torch.equal(row, newline) or torch.equal(row, model._module.model.view_separator.detach())
               for row in clean[view_rows][~changed[view_rows]])
