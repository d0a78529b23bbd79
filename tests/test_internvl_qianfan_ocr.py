"""StandardizedTransformer on tiny InternVL and Qianfan-OCR checkpoints: layer-scaled InternViT blocks, CLS-first
tiles, the host's pixel shuffle, exact.

InternViT scales each sublayer's output by a learned per-channel vector
(``lambda_1`` after the attention, ``lambda_2`` after the MLP) before it joins
the stream, so ``attention_output`` and ``mlp_output`` are after the scales.
Each tile is a row of the tower, its CLS first; the host drops the CLS of the
last block's output and pixel-shuffles each tile (2x2 patches into one row)
before the projector, which only layer-norms and projects. Qianfan-OCR has
InternVL's tower and host, its blocks at ``layers`` and passing each scaled
output through a drop-path module, and a Qwen3 text model. Every expected
number comes from outside the code under test: the builder's documented sizes
(32 pixel tiles of 4 pixel patches: 8x8 patches, 16 tokens a tile; a 32x32
image is 1 tile, a 64 wide x 48 high one 2x2 tiles and a thumbnail), the
stock processor's outputs, the modules' own weights, nnsight's own labels, or
a recomputation from other values read in the same trace. The spec's
contracts run on both checkpoints in test_vision_contracts.py; this file holds
what is particular to them.
"""

from __future__ import annotations

import copy

import pytest
import torch
from family_inputs import prompt
from nnsight.intervention.source import compiled, decorator_chain
from transformers.models.internvl.modeling_internvl import InternVLVisionLayer

from envoys import StandardizedTransformer
from envoys.testing import noise_image
from envoys.towers.internvit import scaled_binding

#: The builder's sizes: a tile is 8x8 patches after its CLS; the shuffle folds 2x2 of them into one token.
SIDE, FACTOR = 8, 2
TOKENS = (SIDE // FACTOR) ** 2
#: 32x32 (1 tile) and 64 wide x 48 high (a 2x2 canvas, then the thumbnail): tiles 0 | 1 2 3 4 | 5.
TWO = [noise_image(32, 32, seed=0), noise_image(64, 48, seed=1)]
TILES = 6


FAMILIES = ["internvl", "qianfan_ocr"]
PROCESSORS = {"internvl": "InternVLProcessor", "qianfan_ocr": "QianfanOCRProcessor"}
TOWERS = {"internvl": "InternVLVisionModel", "qianfan_ocr": "QianfanOCRVisionModel"}


@pytest.fixture(scope="module", params=FAMILIES)
def model(request, tiny_checkpoint):
    return StandardizedTransformer(tiny_checkpoint(request.param), task="image-text-to-text", device="cpu",
                                   attn_implementation="eager", dispatch=True)


def native_blocks(model):
    """The tower's blocks as transformers holds them: InternVL's at ``encoder.layer``, Qianfan-OCR's at ``layers``."""
    tower = model._module.model.vision_tower
    return tower.encoder.layer if model.family.model_type == "internvl" else tower.layers


def processed(model, images) -> dict:
    return model.processor(text=[prompt(model, images)], images=images, return_tensors="pt")


# -- loading and names ------------------------------------------------------------------------------------------------


def test_loads_with_its_stock_processor_and_its_tower(model):
    assert type(model.processor).__name__ == PROCESSORS[model.family.model_type]
    assert type(model.processor.image_processor).__name__ == "GotOcr2ImageProcessor"
    assert type(model._module.model.vision_tower).__name__ == TOWERS[model.family.model_type]


def test_the_sizes_are_the_sides_of_the_configs_lists(model):
    vision = model.config.vision_config
    assert list(vision.image_size) == [32, 32] and list(vision.patch_size) == [4, 4]
    assert (model.vision.image_size, model.vision.patch_size) == (32, 4)


def test_the_builder_drew_the_layer_scales_and_the_cls_and_position_embeddings(model):
    tower = model._module.model.vision_tower
    for native in native_blocks(model):
        for scale in (native.lambda_1, native.lambda_2):
            assert scale.unique().numel() == scale.numel()  # not the constant 0.1 of the init
    assert tower.embeddings.cls_token.abs().min() > 0
    assert tower.embeddings.position_embeddings.abs().min() > 0


# -- the layer scales -----------------------------------------------------------------------------------------------


def test_the_scaled_bindings_are_the_assignments_nnsight_labels():
    """InternVL's block has no module after its scales: the labels the envoys read at are the ones nnsight's own
    .source gives the two scaled assignments."""
    labelled = compiled(decorator_chain(InternVLVisionLayer.forward)[0])  # nnsight's labels of the forward it runs
    lines = labelled.source.splitlines()
    for scale in ("lambda_1", "lambda_2"):
        label = scaled_binding(InternVLVisionLayer, scale)
        assert label in labelled.names
        assert f"self.{scale} * " in lines[labelled.lines[label] - 1]


def test_attention_and_mlp_outputs_are_the_sublayers_outputs_times_their_layer_scales(model):
    reads = []
    with model.trace(prompt(model, TWO), images=TWO) as tracer:
        for block in model.vision.layers:
            reads.append(dict(
                input=block.layer_input.save(),
                attention=block.self_attn.output[0].save(),  # the module's own, before lambda_1
                attention_output=block.attention_output.save(),
                mlp=block.mlp.output.save(),  # before lambda_2
                mlp_output=block.mlp_output.save(),
                output=block.layer_output.save(),
            ))
        tracer.stop()
    for native, read in zip(native_blocks(model), reads, strict=True):
        assert read["input"].shape == (TILES, 1 + SIDE * SIDE, model.vision.vision_hidden_size)
        assert torch.equal(read["attention_output"], native.lambda_1 * read["attention"])
        assert torch.equal(read["mlp_output"], native.lambda_2 * read["mlp"])
        assert not torch.equal(read["attention_output"], read["attention"])
        assert torch.equal(read["input"] + read["attention_output"] + read["mlp_output"], read["output"])


def test_the_sublayers_answer_with_their_blocks_scaled_values(model):
    with model.trace(prompt(model, TWO[:1]), images=TWO[:1]) as tracer:
        block = model.vision.layers[1]
        on_attention = block.self_attn.attention_output.save()
        on_block = block.attention_output.save()
        on_mlp = block.mlp.mlp_output.save()
        on_block_mlp = block.mlp_output.save()
        tracer.stop()
    assert torch.equal(on_attention, on_block) and torch.equal(on_mlp, on_block_mlp)


def test_a_copy_serves_the_scaled_values_on_its_own_blocks(model):
    """nnsight's State copies a module with its plain body; the copy's blocks run the instrumented one again."""
    twin = copy.deepcopy(model)
    with twin.trace(prompt(twin, TWO[:1]), images=TWO[:1]) as tracer:
        block = twin.vision.layers[0]
        attention = block.self_attn.output[0].save()
        attention_output = block.attention_output.save()
        tracer.stop()
    native = native_blocks(twin)[0]
    assert native is not native_blocks(model)[0]
    assert torch.equal(attention_output, native.lambda_1 * attention)


def test_qianfan_ocrs_values_are_its_drop_path_modules_outputs(model):
    if model.family.model_type != "qianfan_ocr":
        pytest.skip("InternVL's blocks have no drop-path modules")
    natives = native_blocks(model)
    assert type(natives[0].drop_path1).__name__ == "Identity"  # drop_path_rate 0.1 spread from 0 over the blocks
    assert type(natives[1].drop_path1).__name__ == "QianfanOCRDropPath"
    with model.trace(prompt(model, TWO[:1]), images=TWO[:1]) as tracer:
        block = model.vision.layers[1]
        attention_output = block.attention_output.save()
        dropped = block.drop_path1.output.save()
        mlp_output = block.mlp_output.save()
        dropped_mlp = block.drop_path2.output.save()
        tracer.stop()
    assert torch.equal(attention_output, dropped) and torch.equal(mlp_output, dropped_mlp)


def test_an_ablated_attention_output_leaves_the_stream_as_it_entered(model):
    with model.trace(prompt(model, TWO[:1]), images=TWO[:1]) as tracer:
        block = model.vision.layers[0]
        entering = block.layer_input.save()
        block.attention_output[:] = 0
        mlp_reads = block.post_attention_layernorm.input.save()
        mlp_output = block.mlp_output.save()
        leaving = block.layer_output.save()
        tracer.stop()
    assert torch.equal(mlp_reads, entering)
    assert torch.equal(leaving, entering + mlp_output)


# -- tiles, the CLS and the pixel shuffle ---------------------------------------------------------------------------


def test_each_tile_is_a_row_its_cls_first(model):
    with model.trace(prompt(model, TWO), images=TWO) as tracer:
        pixels = model.vision.input.save()
        patches = model.vision.patch_embeddings.save()
        stream = model.vision.layers[0].layer_input.save()
        tracer.stop()
    assert torch.equal(pixels, processed(model, TWO)["pixel_values"])
    assert pixels.shape == (TILES, 3, 32, 32)
    embeddings = model._module.model.vision_tower.embeddings
    positions = embeddings.position_embeddings
    assert torch.equal(stream[:, 0], (embeddings.cls_token + positions[:, :1]).expand(TILES, 1, -1)[:, 0])
    assert torch.equal(stream[:, 1:], patches + positions[:, 1:])


def shuffled_by_hand(value: torch.Tensor) -> torch.Tensor:
    """``[tiles, 64, width]`` -> ``[tiles, 16, 4 * width]``: each 2x2 block of a tile's 8x8 patches joined on the
    feature axis, its top row first, left to right; blocks in raster order."""
    tiles, _, width = value.shape
    blocks = value.reshape(tiles, SIDE // FACTOR, FACTOR, SIDE // FACTOR, FACTOR, width)  # tile, R, dr, C, dc
    return blocks.permute(0, 1, 3, 2, 4, 5).reshape(tiles, TOKENS, FACTOR * FACTOR * width)


def test_the_projector_reads_the_last_blocks_patches_shuffled_without_the_cls(model):
    with model.trace(prompt(model, TWO), images=TWO) as tracer:
        mask = model.vision.image_token_mask.save()
        last = model.vision.layers[-1].layer_output.save()
        tower = model.vision.tower_output.save()
        received = model.projector.input.save()
        projected = model.projector.output.save()
        features = model.vision.image_features.save()
        tracer.stop()
    assert mask.sum() == TILES * TOKENS
    assert torch.equal(tower, last)  # no final norm on a mean-pooling tower
    assert received.shape == (TILES, TOKENS, FACTOR * FACTOR * model.vision.vision_hidden_size)
    assert torch.equal(received, shuffled_by_hand(last[:, 1:]))
    projector = model.projector._module
    by_hand = projector.linear_2(projector.act(projector.linear_1(projector.layer_norm(received))))
    assert torch.equal(by_hand, projected)
    assert projected.shape == (TILES, TOKENS, model.hidden_size)
    assert torch.equal(features, projected.reshape(-1, model.hidden_size))  # tile after tile


def test_the_prompt_holds_each_images_tiles_tokens_in_one_run(model):
    placeholder = "<image>" if model.family.model_type == "qianfan_ocr" else "<IMG_CONTEXT>"
    assert prompt(model, TWO).count(placeholder) == 2  # the chat template's, one an image, expanded by the processor
    ids = processed(model, TWO)["input_ids"][0].tolist()
    tokens = model.processor.tokenizer.convert_ids_to_tokens(ids)
    start = [i for i, token in enumerate(tokens) if token == "<img>"]
    end = [i for i, token in enumerate(tokens) if token == "</img>"]
    assert [b - a - 1 for a, b in zip(start, end, strict=True)] == [1 * TOKENS, 5 * TOKENS]
    assert all(token == "<IMG_CONTEXT>" for a, b in zip(start, end) for token in tokens[a + 1 : b])


def test_an_edit_of_the_cls_reaches_nothing_and_one_patch_reaches_only_its_blocks_token(model):
    """The CLS row of the last block is dropped before the projector; patch (r, c) of a tile goes to the token of
    block (r // 2, c // 2) of that tile alone."""
    text = prompt(model, TWO)
    with model.trace(text, images=TWO) as tracer:
        clean = model.vision.image_features.save()
        tracer.stop()
    with model.trace(text, images=TWO) as tracer:
        model.vision.layers[-1].layer_output[:, 0] = 3.0
        cls_edited = model.vision.image_features.save()
        tracer.stop()
    assert torch.equal(cls_edited, clean)
    tile, row, column = 2, 5, 2
    with model.trace(text, images=TWO) as tracer:
        model.vision.layers[-1].layer_output[tile, 1 + row * SIDE + column] = 3.0
        edited = model.vision.image_features.save()
        tracer.stop()
    changed = (edited != clean).any(dim=-1).nonzero().flatten().tolist()
    assert changed == [tile * TOKENS + (row // FACTOR) * (SIDE // FACTOR) + column // FACTOR]


# -- the grids, on the canvas of each image -----------------------------------------------------------------------


def test_the_grids_place_each_tile_on_its_canvas_past_its_cls_and_each_token_on_its_block(model):
    with model.trace(prompt(model, TWO), images=TWO) as tracer:
        stream = model.vision.layers[0].layer_input.save()
        features = model.vision.image_features.save()
        tracer.stop()
    grid, tokens = model.vision.patch_grid(stream, image=1), model.vision.token_grid(features, image=1)
    side = SIDE // FACTOR
    # the 64 wide x 48 high image: tiles 1 2 / 3 4 on its 2x2 canvas, the thumbnail (tile 5) off the grid
    assert grid.shape == (2 * SIDE, 2 * SIDE, model.vision.vision_hidden_size)
    assert tokens.shape == (2 * side, 2 * side, model.hidden_size)
    for r in range(2 * SIDE):
        for c in range(2 * SIDE):
            tile = 1 + (r // SIDE) * 2 + c // SIDE
            assert torch.equal(grid[r, c], stream[tile, 1 + (r % SIDE) * SIDE + c % SIDE]), (r, c)
    for r in range(2 * side):
        for c in range(2 * side):
            tile = 1 + (r // side) * 2 + c // side
            assert torch.equal(tokens[r, c], features[tile * TOKENS + (r % side) * side + c % side]), (r, c)
    # the 32x32 image is one tile, on its own grid, its CLS left out
    assert torch.equal(model.vision.patch_grid(stream, image=0), stream[0, 1:].reshape(SIDE, SIDE, -1))
    assert torch.equal(model.vision.token_grid(features, image=0), features[:TOKENS].reshape(side, side, -1))
