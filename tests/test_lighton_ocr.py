"""StandardizedTransformer on a tiny LightOnOCR checkpoint: Mistral 3's Pixtral tower and projector, renamed, exact.

Every expected number comes from outside the code under test: the stock
processor's ``input_ids`` and ``image_sizes``, the config's patch and merge
sizes, the modules' own weights, or a recomputation from other values read in
the same trace. Images (`pixtral_inputs`): 32x32 (8x8 patches of 4 px, 4x4
image tokens) and 48 high x 64 wide (12x16 patches, 6x8 tokens). The spec's
contracts (test_vision_contracts.py) run on this checkpoint too, and the
tower's own behaviour and its grids (the suites of pixtral_inputs.py and
packed_grids.py, declared at the end); this file holds what differs from
Mistral 3: the names, the processor writing image tokens alone, and a
projector that reads the tower's output.
"""

from __future__ import annotations

import torch
from packed_grids import PixtralGridSuite
from pixtral_inputs import TWO, PixtralTowerSuite, bounds, image_sizes, patch_counts, patch_grids, processed, prompt

CHECKPOINT = "lighton_ocr"


def merged_grids(model, images) -> list[tuple[int, int]]:
    """Each image's grid of image tokens: its patch grid over the config's spatial_merge_size."""
    merge = model.config.spatial_merge_size
    return [(rows // merge, columns // merge) for rows, columns in patch_grids(model, images)]


# -- loading and names ---------------------------------------------------------------------------------


def test_loads_with_its_stock_processor_and_a_qwen3_text_model(model):
    assert type(model.processor).__name__ == "LightOnOcrProcessor"
    assert type(model.processor.image_processor).__name__ in ("PixtralImageProcessor", "PixtralImageProcessorFast")
    assert model.family.model_type == "lighton_ocr" and model.family.root_scatter is None
    assert type(model._module.model.language_model).__name__ == "Qwen3Model"
    assert type(model.layers[0].self_attn._module).__name__ == "Qwen3Attention"


# -- the prompt ----------------------------------------------------------------------------------------------


def test_the_processor_writes_one_run_of_image_tokens_an_image_and_nothing_else(model):
    """Unlike Pixtral's processor, LightOnOCR's writes no [IMG_BREAK] / [IMG_END] rows: each image's placeholder
    becomes one run of image tokens, its merged grid's count, and the rest of the prompt is the template's as it is."""
    tokenizer = model.processor.tokenizer
    text = prompt(model, TWO)
    ids = processed(model, TWO)["input_ids"][0]
    with model.trace(text, images=TWO):
        mask = model.vision.image_token_mask.save()
    positions = mask[0].nonzero().flatten()
    counts = [rows * columns for rows, columns in merged_grids(model, TWO)]
    assert counts == [16, 48] and positions.numel() == sum(counts)
    assert torch.equal(ids[positions], torch.full_like(positions, tokenizer.image_token_id))
    for run in torch.tensor_split(positions, [counts[0]]):  # consecutive positions: nothing between an image's tokens
        assert torch.equal(run, torch.arange(int(run[0]), int(run[0]) + run.numel()))
    template = torch.tensor(tokenizer(text)["input_ids"])
    assert int((template == tokenizer.image_token_id).sum()) == 2  # one placeholder an image
    assert torch.equal(ids[~mask[0]], template[template != tokenizer.image_token_id])


# -- the projector: it reads the tower's output ---------------------------------------------------------------


def test_the_projector_reads_the_tower_output_and_its_output_is_scattered_as_it_is(model):
    with model.trace(prompt(model, TWO), images=TWO):
        last = model.vision.layers[-1].layer_output.save()
        tower = model.vision.tower_output.save()
        received = model.projector.inputs.save()
        projected = model.projector.output.save()
        features = model.vision.image_features.save()
    (read, sizes), _ = received
    assert torch.equal(tower, last)  # no final norm
    assert torch.equal(read, tower[0])  # last_hidden_state without the leading 1
    assert sizes.tolist() == [list(size) for size in image_sizes(model, TWO)]
    assert torch.equal(projected, features)


def test_the_projector_by_hand_norm_merge_and_two_linears_without_bias(model):
    projector = model.projector._module
    assert projector.linear_1.bias is None and projector.linear_2.bias is None
    with model.trace(prompt(model, TWO), images=TWO):
        read = model.projector.input.save()
        features = model.vision.image_features.save()
    merge, width = model.config.spatial_merge_size, model.vision.vision_hidden_size
    squares = []
    with torch.no_grad():
        normed = projector.norm(read)
        for (a, b), (rows, columns) in zip(bounds(patch_counts(model, TWO)), patch_grids(model, TWO)):
            image = normed[a:b].reshape(rows // merge, merge, columns // merge, merge, width)
            squares.append(image.permute(0, 2, 4, 1, 3).reshape(-1, width * merge * merge))
        merged = projector.patch_merger.merging_layer(torch.cat(squares))
        by_hand = projector.linear_2(torch.nn.functional.gelu(projector.linear_1(merged)))
    assert torch.equal(by_hand, features)


def test_an_edit_of_one_patch_the_projector_reads_changes_exactly_its_squares_token(model):
    """Patch (row 5, column 6) of the second image is in merged square (2, 3), token 2 * 8 + 3 of that image."""
    text = prompt(model, TWO)
    (_, columns), merge = patch_grids(model, TWO)[1], model.config.spatial_merge_size
    start = patch_counts(model, TWO)[0]
    patch = start + 5 * columns + 6
    token = 16 + 2 * (columns // merge) + 3
    with model.trace(text, images=TWO):
        clean = model.vision.image_features.save()
    with model.trace(text, images=TWO):
        model.vision.tower_output[0, patch] = 0
        edited = model.vision.image_features.save()
    changed = (edited != clean).any(dim=-1).nonzero().flatten()
    assert changed.tolist() == [token]


# -- the suites of the Pixtral tower (pixtral_inputs.py) and of its grids (packed_grids.py) ----------------------


class TestPixtralTower(PixtralTowerSuite):
    """LightOnOCR: the projector reads the tower's output, so an assignment to tower_output reaches it."""

    checkpoint = "lighton_ocr"
    reads_tower_output = True


class TestGrids(PixtralGridSuite):
    """LightOnOCR: Mistral 3's patch merger, renamed; the processor writes image tokens alone."""

    checkpoint = "lighton_ocr"
