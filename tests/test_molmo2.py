"""StandardizedTransformer on a tiny Molmo 2 checkpoint: a tower over overlapping crops, a pooling adapter, a text
model that adds the pooled features to the image tokens' embeddings.

What is particular to it (the spec's contracts run on it in
test_vision_contracts.py): ``projector.input`` is the outputs of the tower
blocks ``vision_feature_layer`` names, concatenated; the adapter's pooling
attention (``projector.image_pooling_2d``) attends from each image token's
mean patch to the patches ``image_token_pooling`` names, padding slots
masked; ``image_features`` is the image tokens' embeddings plus the pooled
features; the grids follow the pooling indices; a text block that norms
after its sublayers (``norm_after``) keeps the block equality. Each value is
also read on a stock nnsight model through ``.source``, as a server without
this package reads it. Expected numbers come from the builder's documented
config (envoys/testing/molmo2.py), never from the code under test.
"""

from __future__ import annotations

import nnsight
import pytest
import torch
from nnsight import TransformersModel
from standard_reads import every_value
from test_remote import StockServer, library_state, read, writable
from transformers import Molmo2ForConditionalGeneration

from envoys import StandardizedTransformer
from envoys.families.molmo2 import feature_blocks
from envoys.image.grids import GridError
from envoys.testing import build, chat_prompt, noise_image
from envoys.testing.norms import randomise_norms

CHECKPOINT = "molmo2"

#: 32x32 noise: 1 + 2x2 crops, 9 + 16 tokens; 64 wide x 48 high: 1 + 2x3 crops, 9 + 24 tokens (the builder's docstring).
IMAGES = [noise_image(32, 32, seed=0), noise_image(64, 48, seed=1)]
#: Patches a crop (5 x 5), the crops' inner window (3 patches), each token's pooling window (2 x 2).
CROP_SIDE, WINDOW, POOL = 5, 3, 2


def prompt(model) -> str:
    return chat_prompt(model.processor, len(IMAGES), "What is in the picture?")


def processed(model) -> dict:
    return model.processor(text=[prompt(model)], images=IMAGES, return_tensors="pt")


def batch_pooling(inputs) -> torch.Tensor:
    """``image_token_pooling`` as rows of the batch's stream, ``[image_tokens, 4]``: where the processor numbers each
    image's patches from 0 (transformers 5.25 on: a later image's windows name its patch 0), they are moved past the
    earlier images' patches, as the host moves them."""
    pooling, grids = inputs["image_token_pooling"].long(), inputs["image_grids"].long()
    tokens = (grids[:, 0] * grids[:, 1] + grids[:, 2] * grids[:, 3]).tolist()
    patches = (inputs["image_num_crops"] * inputs["pixel_values"].shape[1]).tolist()
    moved, start, first = [], 0, 0
    for count, own in zip(tokens, patches):
        part = pooling[start:start + count]
        per_image = first and int(part[part >= 0].min()) == 0
        moved.append(torch.where(part >= 0, part + first, part) if per_image else part)
        start, first = start + count, first + own
    return torch.cat(moved)


def test_the_modules_are_molmo2_classes(model):
    assert type(model._module).__name__ == "Molmo2ForConditionalGeneration"
    assert type(model.vision._module).__name__ == "Molmo2VisionModel"
    assert type(model.projector._module).__name__ == "Molmo2Adapter"
    assert type(model.projector.image_pooling_2d._module).__name__ == "Molmo2VisionAttention"


def test_the_projector_reads_the_chosen_blocks_concatenated(model):
    """vision_feature_layer [-1, 0]: the last block's output, then the first's, on the width."""
    assert feature_blocks(model.config) == [1, 0]
    with model.trace(prompt(model), images=IMAGES) as tracer:
        first = model.vision.layers[0].layer_output.save()
        last = model.vision.layers[1].layer_output.save()
        tower = model.vision.tower_output.save()
        received = model.projector.input.save()
        tracer.stop()
    assert received.shape == (5 + 7, CROP_SIDE**2, 2 * model.vision.vision_hidden_size)
    assert torch.equal(received, torch.cat([last, first], dim=-1))
    assert torch.equal(tower, last)


def test_image_features_are_the_embeddings_plus_the_pooled_features(model):
    with model.trace(prompt(model), images=IMAGES) as tracer:
        mask = model.vision.image_token_mask.save()
        embedded = model.embed_tokens.output.save()
        pooled = model.projector.output.save()
        features = model.vision.image_features.save()
        first = model.layers[0].input.save()
        tracer.stop()
    pooled = pooled.last_hidden_state
    assert int(mask.sum()) == 25 + 33 and pooled.shape == features.shape == (58, model.hidden_size)
    assert torch.equal(features, embedded[mask] + pooled)
    assert not torch.equal(features, pooled)
    assert torch.equal(first[mask], features)


def test_the_pooling_attends_from_each_tokens_mean_patch_to_its_patches(model):
    """Queries from the mean of a token's valid patches, keys over its window; the padding slots get nothing."""
    pooling = batch_pooling(processed(model))
    attention = model.projector.image_pooling_2d
    with model.trace(prompt(model), images=IMAGES) as tracer:
        received = model.projector.input.save()
        queries = attention.attention_queries.save()
        keys = attention.attention_keys.save()
        probabilities = attention.attention_probabilities.save()
        tracer.stop()
    heads, key_value_heads, head_dim = 2, 1, 16  # the adapter's config in the builder
    assert probabilities.shape == (58, heads, 1, POOL * POOL)
    valid = pooling >= 0
    assert not valid.all()  # the low-resolution view's 5 x 5 patches leave padding slots in its last windows
    assert torch.equal(probabilities[~valid.unsqueeze(1).unsqueeze(2).expand_as(probabilities)],
                       torch.zeros(int((~valid).sum()) * heads))
    torch.testing.assert_close(probabilities.sum(-1), torch.ones(58, heads, 1))
    flat = received.reshape(-1, received.shape[-1])
    window = flat[pooling.clip(0)] * valid.unsqueeze(-1)
    mean = window.sum(-2, keepdim=True) / valid.sum(-1).clamp(min=1)[:, None, None].float()
    module = attention._module
    with torch.no_grad():
        expected_queries = module.q_proj(mean).view(58, 1, heads, head_dim).transpose(1, 2)
        expected_keys = module.k_proj(window).view(58, POOL * POOL, key_value_heads, head_dim).transpose(1, 2)
    assert torch.equal(queries, expected_queries)
    assert torch.equal(keys, expected_keys)


def test_a_stock_model_reads_the_same_values_through_source(model):
    """What a server without this package reads, through nnsight's own ``.source``, equals the served values."""
    stock = TransformersModel(model._module.name_or_path, task="image-text-to-text", attn_implementation="eager",
                              dispatch=True)
    stock.model.source  # opened before the host runs, as a server opens what it serves
    stock.model.multi_modal_projector.image_pooling_2d.source
    with stock.trace(prompt(model), images=IMAGES) as tracer:
        native_input = stock.model.multi_modal_projector.inputs[0][0].save()
        pooling = stock.model.multi_modal_projector.image_pooling_2d.source.attention_interface_1
        native_probabilities = pooling.source.nn_functional_softmax_0.output.save()
        native_output = stock.model.multi_modal_projector.output.last_hidden_state.save()
        native_features = stock.model.source.inputs_embeds_masked_scatter_0.inputs[0][1].save()
        tracer.stop()
    with model.trace(prompt(model), images=IMAGES) as tracer:
        received = model.projector.input.save()
        probabilities = model.projector.image_pooling_2d.attention_probabilities.save()
        pooled = model.projector.output.save()
        features = model.vision.image_features.save()
        tracer.stop()
    assert torch.equal(native_input, received)
    assert torch.equal(native_probabilities, probabilities)
    assert torch.equal(native_output, pooled.last_hidden_state)
    assert torch.equal(native_features.reshape(features.shape), features)


def test_the_patch_grid_is_the_canvas_the_crops_overlap_on(model):
    """Image 0 is tiled 2 x 2 on an 8 x 8 patch canvas: crop (i, j) (crops 1..4, the low-resolution view first)
    covers canvas patches from (3i, 3j), 5 x 5 of them, its margins overlapping its neighbours' (the same pixels)."""
    inputs = processed(model)
    pixels = inputs["pixel_values"]
    with model.trace(prompt(model), images=IMAGES) as tracer:
        model.vision.image_token_mask.save()
        tracer.stop()
    canvas = model.vision.patch_grid(pixels, 0)
    assert canvas.shape == (8, 8, pixels.shape[-1])
    for crop, (i, j) in enumerate([(0, 0), (0, 1), (1, 0), (1, 1)], start=1):
        patches = pixels[crop].reshape(CROP_SIDE, CROP_SIDE, -1)
        assert torch.equal(canvas[WINDOW * i:WINDOW * i + CROP_SIDE, WINDOW * j:WINDOW * j + CROP_SIDE], patches)
    assert model.vision.patch_grid(pixels, 1).shape == (8, 11, pixels.shape[-1])
    assert torch.equal(model.vision.patch_grid(pixels, 1, view="low"), pixels[5].reshape(CROP_SIDE, CROP_SIDE, -1))


def test_a_token_is_the_window_of_patches_its_pooling_row_names(model):
    """Token (r, c) of an image's high-resolution grid pools the canvas patches of window (r, c), 2 x 2."""
    inputs = processed(model)
    pooling = batch_pooling(inputs)
    rows = torch.arange(pooling.shape[0], dtype=torch.float32).unsqueeze(-1)  # each image token's own row number
    stream = torch.arange(inputs["pixel_values"].shape[0] * CROP_SIDE**2, dtype=torch.float32)  # each patch's row
    with model.trace(prompt(model), images=IMAGES) as tracer:
        model.vision.image_token_mask.save()
        tracer.stop()
    for image, shape in ((0, (4, 4)), (1, (4, 6))):
        tokens = model.vision.token_grid(rows, image)[..., 0].long()
        canvas = model.vision.patch_grid(stream.reshape(-1, CROP_SIDE**2, 1), image)[..., 0]
        assert tokens.shape == shape
        padded = torch.full((shape[0] * POOL, shape[1] * POOL), -1.0)
        padded[:canvas.shape[0], :canvas.shape[1]] = canvas  # the processor pads the canvas at its end to whole windows
        for r in range(shape[0]):
            for c in range(shape[1]):
                named = pooling[tokens[r, c]]
                window = padded[POOL * r:POOL * r + POOL, POOL * c:POOL * c + POOL].reshape(-1)
                assert torch.equal(named[named >= 0].float(), window[window >= 0])
    low = model.vision.token_grid(rows, 1, view="low")[..., 0].long()
    assert low.tolist() == [[25 + 3 * r + c for c in range(3)] for r in range(3)]  # image 1's tokens start at 25


def test_a_view_the_image_has_not_is_refused_naming_the_views(model):
    with model.trace(prompt(model), images=IMAGES) as tracer:
        model.vision.image_token_mask.save()
        tracer.stop()
    with pytest.raises(GridError, match="view='high'.*view='low'"):
        model.vision.patch_grid(torch.zeros(12, 25, 1), 0, view="middle")


@pytest.fixture(scope="module")
def normed_after(tmp_path_factory) -> StandardizedTransformer:
    """The tiny checkpoint with its text blocks norming each sublayer's output (``norm_after``, Molmo2-O-7B's)."""
    torch.manual_seed(0)
    tiny, processor = build(CHECKPOINT)
    config = tiny.config
    config.text_config.norm_after = True
    model = Molmo2ForConditionalGeneration(config).eval()
    randomise_norms(model)
    path = tmp_path_factory.mktemp("molmo2-norm-after")
    model.save_pretrained(path)
    processor.save_pretrained(path)
    return StandardizedTransformer(path, task="image-text-to-text", device="cpu", attn_implementation="eager",
                                   dispatch=True)


def test_a_block_that_norms_after_its_sublayers_adds_their_normed_outputs(normed_after):
    model = normed_after
    assert all(block._module.norm_after for block in model.layers)
    with model.trace(prompt(model), images=IMAGES) as tracer:
        reads = nnsight.save([])
        for block in model.layers:
            reads.append(nnsight.save([block.layer_input, block.self_attn.output[0], block.attention_output,
                                       block.mlp.output, block.mlp_output, block.layer_output]))
        tracer.stop()
    with model.trace(prompt(model), images=IMAGES) as tracer:
        answered = nnsight.save([])
        for block in model.layers:
            answered.append(nnsight.save([block.self_attn.attention_output, block.mlp.mlp_output]))
        tracer.stop()
    assert len(reads) == len(answered) == 2
    for (layer_input, attention, added, mlp, mlp_added, output), (on_attention, on_mlp) in zip(reads, answered):
        assert not torch.equal(added, attention) and not torch.equal(mlp_added, mlp)  # after the norms
        assert torch.equal(added, on_attention) and torch.equal(mlp_added, on_mlp)
        assert torch.equal(layer_input + added + mlp_added, output)


def test_every_value_and_write_through_a_stock_server_is_the_local_one(tiny_checkpoint):
    """A weightless client's trace run on a stock nnsight model (as NDIF runs it, tests/test_remote.py's server) reads
    and writes every value, the adapter's pooling attention included, as the local model does."""
    path = tiny_checkpoint(CHECKPOINT)
    loading = {"task": "image-text-to-text", "attn_implementation": "eager"}
    client = StandardizedTransformer(path, **loading)
    local = StandardizedTransformer(path, dispatch=True, **loading)
    server = StockServer(TransformersModel(str(path), dispatch=True, **loading))
    text = chat_prompt(local.processor, 1, "What is in the picture?")
    at = {envoy.path: envoy for envoy in client.modules()}
    names, failures = [], []
    for envoy, name, prop in every_value(local, text, IMAGES[:1]):
        label = f"{envoy.path}.{name}"
        names.append(label)
        expected = read(local, envoy, name, text)
        if not torch.equal(read(client, at[envoy.path], name, text, server), expected):
            failures.append(f"{label}: differs")
        if writable(prop, expected) and not torch.equal(
                read(client, at[envoy.path], name, text, server, write=True),
                read(local, envoy, name, text, write=True)):
            failures.append(f"{label}: its write differs")
    assert any(label.endswith("image_pooling_2d.attention_probabilities") for label in names), names
    assert not failures, failures
    assert not client.dispatched and library_state(server.server) == []
