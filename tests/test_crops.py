"""``model.crops`` (`envoys.vision.crops`): the tower's second run in one forward, on the local crops, pinned as
``model.video`` pins the videos' run.

Run on the first tiny checkpoint whose family runs a tower of one stack twice (``Family.crops``: Step-3.7's). Every
expected value comes from outside the code under test: the stock processor's pixels and crop counts, the modules' own
weights, and a stock nnsight model of the same checkpoint, whose own ``.source`` of ``get_image_features`` labels each
call of the tower and the projector (``self_vision_model_0`` / ``_1``, ``self_multi_modal_projector_0`` / ``_1``).
"""

from __future__ import annotations

import re

import nnsight
import pytest
import torch
import torch.nn.functional as F
from nnsight import TransformersModel
from nnsight.intervention.interleaver import OutOfOrderError

from envoys import StandardizedTransformer, Unavailable
from envoys.families import families
from envoys.image.grids import GridError
from envoys.testing import CONTRACTS, NAMES, chat_prompt, noise_image
from envoys.vision.crops import CROPS_RUN_ORDER, CropsRun
from envoys.vision.tower import NoTower

#: The first checkpoint whose family runs a tower of one stack a second time, on the local crops (its patch embedding
#: feeds its blocks: the row's patch_embeddings is the stream's). A tower of two stacks run twice (a SAM encoder, then
#: another stack over its grid) is tested by its family's own file.
CHECKPOINT = next((family.model_type for family in families() if family.crops is not None and family.model_type in NAMES
                   and CONTRACTS[family.model_type].patch_embeddings is None), None)
if CHECKPOINT is None:  # pragma: no cover - every release that builds Step-3.7 builds it
    pytest.skip("no tiny checkpoint of a family whose tower runs twice", allow_module_level=True)

SMALL = noise_image(32, 32, seed=0)  # not cropped: its sides are within the global view's
LARGE = noise_image(64, 48, seed=1)  # cut into crops (the builder's documented 2 x 2)


def prompt(model, images) -> str:
    return chat_prompt(model.processor, len(images), "What is in the picture?")


def inputs(model, images) -> dict:
    return model.processor(text=[prompt(model, images)], images=images, return_tensors="pt")


def stock_calls(stock, model, images):
    """nnsight's own labels of the stock forward: each call of the tower and the projector in get_image_features."""
    with stock.trace(prompt(model, images), images=images) as tracer:
        body = stock.model.source.self_get_image_features_0.source
        views = body.self_vision_model_0.output.save()
        views_projected = body.self_multi_modal_projector_0.output.save()
        crops = body.self_vision_model_1.output.save()
        crops_projected = body.self_multi_modal_projector_1.output.save()
        tracer.stop()
    return views.last_hidden_state, views_projected, crops.last_hidden_state, crops_projected


def test_model_crops_is_the_towers_run_on_the_crops_and_model_vision_its_run_on_the_views(model, stock):
    """The tower's own output and the projector's on each run are the stock forward's at nnsight's own labels of the
    two calls: model.vision / model.projector the first, model.crops / model.crops.projector the second."""
    images = [SMALL, LARGE]
    with model.trace(prompt(model, images), images=images):
        views = model.vision.output.last_hidden_state.save()
        views_projected = model.projector.output.save()
        crops = model.crops.output.last_hidden_state.save()
        crops_projected = model.crops.projector.output.save()
    stock_views, stock_views_projected, stock_crops, stock_crops_projected = stock_calls(stock, model, images)
    assert torch.equal(views, stock_views) and torch.equal(views_projected, stock_views_projected)
    assert torch.equal(crops, stock_crops) and torch.equal(crops_projected, stock_crops_projected)
    assert crops.shape[0] == int(inputs(model, images)["num_local_patches"].sum()) != views.shape[0]


def test_the_crops_values_are_the_crops_pixels_through_the_tower(model):
    """patch_embeddings is the convolution of the processor's crop pixels, one row per crop; each block's identity
    holds on the crops' run; tower_output is its last block's output; projector.input is the tower's own output."""
    images = [SMALL, LARGE]
    pixels = inputs(model, images)["pixel_values_local"]
    conv = model.vision.patch_embed._module
    crops = model.crops
    with model.trace(prompt(model, images), images=images):
        embedded = crops.patch_embeddings.save()
        blocks = nnsight.save([])
        for index in range(model.vision.num_layers):
            block = crops.layers[index]
            blocks.append([block.layer_input.save(), block.attention_output.save(), block.mlp_output.save(),
                           block.layer_output.save()])
        tower = crops.tower_output.save()
        own = crops.output.last_hidden_state.save()
        received = crops.projector.input.save()
    assert torch.equal(embedded, F.conv2d(pixels, conv.weight, stride=conv.stride).flatten(2).transpose(1, 2))
    for layer_input, attention, mlp, layer_output in blocks:
        assert layer_input.shape[0] == pixels.shape[0]
        assert torch.equal(layer_input + attention + mlp, layer_output)
    assert torch.equal(tower, blocks[-1][3])
    assert torch.equal(received, own)


def test_image_features_are_each_images_crops_then_its_view(model):
    """What the host scatters: image 0's view (it has no crops), then image 1's crops' projected rows, then its
    view's, read off the two runs' projector outputs; and layers[0].input at the mask is that."""
    images = [SMALL, LARGE]
    with model.trace(prompt(model, images), images=images):
        mask = model.vision.image_token_mask.save()
        views = model.projector.output.save()
        crops = model.crops.projector.output.save()
        features = model.vision.image_features.save()
        first = model.layers[0].input.save()
    assert torch.equal(features, torch.cat([views[0], crops.flatten(0, 1), views[1]]))
    assert torch.equal(first[mask], features)


def test_a_write_on_the_crops_run_reaches_only_the_crops_rows(model):
    """Zeroing the crops' run's first block output changes the crops' rows of image_features and nothing of the views'
    run, which comes before it."""
    images = [SMALL, LARGE]
    with model.trace(prompt(model, images), images=images):
        clean_views = model.vision.layers[0].layer_output.save()
        clean = model.vision.image_features.save()
    with model.trace(prompt(model, images), images=images):
        views = model.vision.layers[0].layer_output.save()
        model.crops.layers[0].layer_output[:] = 0
        crops = model.crops.layers[0].layer_output.save()
        edited = model.vision.image_features.save()
    crop_rows = slice(CONTRACTS[CHECKPOINT].image_tokens[0], edited.shape[0] - CONTRACTS[CHECKPOINT].image_tokens[0])
    assert torch.equal(views, clean_views) and not crops.any()
    assert not torch.equal(edited[crop_rows], clean[crop_rows])
    kept = torch.ones(edited.shape[0], dtype=torch.bool)
    kept[crop_rows] = False
    assert torch.equal(edited[kept], clean[kept])


def test_without_crops_every_crops_value_says_so(model):
    """An image too small to crop: the tower runs once, so model.crops's values are Unavailable, saying why, and
    model.vision's are the one run's."""
    with model.trace(prompt(model, [SMALL]), images=[SMALL]):
        views = model.vision.layers[0].layer_output.save()
        with pytest.raises(Unavailable, match=r"crops\.layers\[0\]\.layer_output is unavailable: this forward makes no "
                                              r"local crops \(pixel_values_local is absent"):
            model.crops.layers[0].layer_output.save()
        with pytest.raises(Unavailable, match="makes no local crops"):
            model.crops.projector.output.save()
    assert views.shape[0] == 1


def test_a_read_of_the_crops_run_after_it_ran_names_where_it_is(model):
    images = [SMALL, LARGE]
    with pytest.raises(OutOfOrderError, match=re.escape(CROPS_RUN_ORDER)):
        with model.trace(prompt(model, images), images=images):
            model.vision.image_features.save()
            model.crops.layers[0].layer_output.save()


def test_several_invokes_with_images_refuse_the_crops_run(model):
    """The crops' run is the batch's: no invoke's rows of it are its own."""
    with model.trace() as tracer:
        with tracer.invoke(prompt(model, [LARGE]), images=[LARGE]):
            with pytest.raises(Unavailable, match="read model.crops in a trace of one invoke"):
                model.crops.layers[0].layer_output.save()
        with tracer.invoke(prompt(model, [SMALL]), images=[SMALL]):
            model.vision.layers[0].layer_output.save()


def test_crops_reads_outside_a_trace_and_support(model):
    assert isinstance(model.crops, CropsRun) and isinstance(model.crops.layers[0], CropsRun)
    assert repr(model.crops).startswith("crops: the tower's run on the local crops (")
    assert f"\n  {model.crops!r}" in repr(model)
    assert model.support()["crops"] is None
    assert model.crops.support() == model.vision.support()
    assert model.crops.num_layers == model.vision.num_layers


def test_a_family_whose_tower_runs_once_has_no_crops(tiny_checkpoint):
    other = StandardizedTransformer(tiny_checkpoint("llava-siglip"), task="image-text-to-text", device="cpu")
    assert isinstance(other.crops, NoTower) and "crops" not in other.support()
    with pytest.raises(Unavailable, match="tower runs once a forward, on every image, view and crop"):
        other.crops.layers  # noqa: B018


@pytest.fixture(scope="module")
def model(tiny_checkpoint):
    return StandardizedTransformer(tiny_checkpoint(CHECKPOINT), task="image-text-to-text", device="cpu",
                                   attn_implementation="eager")


def test_under_generate_the_crops_run_is_step_zeros(model):
    """The image is encoded in step 0's forward only: both runs are read there, and on step 1 the crops' values are
    refused as the views' are."""
    with model.generate(prompt(model, [LARGE]), images=[LARGE], max_new_tokens=2, min_new_tokens=2) as tracer:
        outcomes = nnsight.save([])
        for step in tracer.iter[:2]:
            try:
                views = model.vision.layers[0].layer_output.save()
                crops = model.crops.layers[0].layer_output.save()
                outcomes.append((step, views, crops))
            except Unavailable as error:
                outcomes.append((step, str(error)))
    (_, views, crops), (_, refused) = outcomes
    assert views.shape[0] == 1 and crops.shape[0] == int(inputs(model, [LARGE])["num_local_patches"].sum())
    assert "not computed on step 1" in refused


def test_each_crop_on_its_own_patch_grid(model):
    """crops.patch_grid(value, crop=k) is crop k's convolution output on its own grid (the crop's pixels, channels
    last); place_patch_grid writes it back where it came from; a crop the batch lacks is refused."""
    images = [SMALL, LARGE]
    pixels = inputs(model, images)["pixel_values_local"]
    conv = model.vision.patch_embed._module
    with model.trace(prompt(model, images), images=images):
        embedded = model.crops.patch_embeddings.save()
    for crop in range(pixels.shape[0]):
        expected = F.conv2d(pixels[crop:crop + 1], conv.weight, stride=conv.stride)[0].permute(1, 2, 0)
        grid = model.crops.patch_grid(embedded, crop=crop)
        assert torch.equal(grid, expected)
        copy = torch.zeros_like(embedded)
        model.crops.place_patch_grid(grid, copy, crop=crop)
        assert torch.equal(copy[crop], embedded[crop]) and not copy[:crop].any() and not copy[crop + 1:].any()
    with pytest.raises(GridError, match=f"crop={pixels.shape[0]} is not a crop of this batch: it holds {pixels.shape[0]}"):
        model.crops.patch_grid(embedded, crop=pixels.shape[0])
    with pytest.raises(Unavailable, match="crops.token_grid is not served"):
        model.crops.token_grid(embedded)


def test_a_weightless_client_reads_the_crops_run_through_a_stock_server(model, tiny_checkpoint):
    """Through a stock nnsight server (test_remote's, as NDIF holds the model), the crops' run's values, its blocks'
    layer-scaled ones included, are the local ones, bit for bit; the client loads no weights."""
    import test_remote  # its StockServer: a module import, so that pytest does not collect its tests here

    path = tiny_checkpoint(CHECKPOINT)
    client = StandardizedTransformer(path, task="image-text-to-text", attn_implementation="eager")
    server = test_remote.StockServer(TransformersModel(str(path), task="image-text-to-text", dispatch=True,
                                                       attn_implementation="eager"))

    def reads(on, backend=None):
        with on.trace(prompt(on, [LARGE]), images=[LARGE], backend=backend) as tracer:
            views = on.vision.layers[0].layer_output.save()
            attention = on.crops.layers[0].attention_output.save()
            crops = on.crops.layers[-1].layer_output.save()
            projected = on.crops.projector.output.save()
            tracer.stop()
        return views, attention, crops, projected

    for ours, theirs in zip(reads(model), reads(client, server), strict=True):
        assert torch.equal(ours, theirs)
    assert not client.dispatched
