"""StandardizedTransformer on a tiny LLaVA-OneVision-1.5 checkpoint: what is particular to it, exact.

Every expected number comes from outside the code under test: the stock
processor's ``image_grid_thw``, the modules' own weights, or a recomputation
from other values read in the same trace. The spec's contracts run on it in
test_vision_contracts.py (and its video in test_video_values.py); this file
holds the names and the CLS row the RICE ViT puts before each frame's patches:
where it enters, that it takes part in the attention, and that the merger
reads the stream without it.
"""

from __future__ import annotations

import pytest
import torch
from family_inputs import prompt

from envoys.testing import noise_image

pytest.importorskip("transformers.models.llava_onevision1_5", reason="target absent: llava_onevision1_5 came in 5.25")

TWO = [noise_image(32, 32, seed=0), noise_image(64, 48, seed=1)]  # 64 wide, 48 high: 16 and 48 patches


CHECKPOINT = "llava_onevision1_5"


def patches_per_image(model, images) -> list[int]:
    sizes = model.processor(text=[prompt(model, images)], images=images, return_tensors="pt")["image_grid_thw"]
    return sizes.prod(dim=1).tolist()


def test_the_towers_merge_and_no_windows(model):
    assert model.vision.spatial_merge_size == 2 and model.vision.window_size is None


def test_each_image_enters_the_blocks_after_its_cls_row_normed_with_its_patches(model):
    """Block 0's input is ``pre_layernorm`` over each image's CLS row (the learned class embedding), then its patch
    embeddings, image after image."""
    with torch.no_grad(), model.trace(prompt(model, TWO), images=TWO) as tracer:
        patches = model.vision.patch_embeddings.save()
        entering = model.vision.layers[0].layer_input.save()
        tracer.stop()
    visual = model._module.model.visual  # the loaded tower (the first trace loaded the weights)
    counts = patches_per_image(model, TWO)
    cls = visual.cls_embeddings.class_embedding[None]
    expected = torch.cat([torch.cat((cls, part)) for part in patches[0].split(counts)])
    assert entering.shape == (1, sum(counts) + len(counts), 32)
    assert torch.equal(entering[0], visual.pre_layernorm(expected))


def test_the_merger_reads_the_last_blocks_stream_without_the_cls_rows_and_tower_output_is_that(model):
    with torch.no_grad(), model.trace(prompt(model, TWO), images=TWO) as tracer:
        last = model.vision.layers[-1].layer_output.save()
        received = model.projector.input.save()
        tower = model.vision.tower_output.save()
        tracer.stop()
    counts = patches_per_image(model, TWO)
    without_cls = torch.cat([part[1:] for part in last[0].split([count + 1 for count in counts])])
    assert torch.equal(received, without_cls) and torch.equal(tower[0], without_cls)


def test_the_cls_row_takes_part_in_its_images_attention_alone(model):
    """Writing the first image's CLS row in block 0's output changes that image's image tokens and leaves the
    second image's as they were: the CLS is attended within its own image only."""
    text = prompt(model, TWO)
    with torch.no_grad():
        with model.trace(text, images=TWO):
            clean = model.vision.image_features.save()
        with model.trace(text, images=TWO):
            model.vision.layers[0].layer_output[:, 0] = 0  # the first image's CLS row
            edited = model.vision.image_features.save()
    first = 4  # 16 patches merged 2x2
    assert not torch.equal(edited[:first], clean[:first])
    assert torch.equal(edited[first:], clean[first:])


def test_the_patch_grid_of_the_stream_skips_each_images_cls_row(model):
    with torch.no_grad(), model.trace(prompt(model, TWO), images=TWO):
        stream = model.vision.layers[0].layer_output.save()
        tower = model.vision.tower_output.save()
    counts = patches_per_image(model, TWO)
    parts = stream[0].split([count + 1 for count in counts])
    towers = tower[0].split(counts)
    for image, (height, width) in enumerate([(4, 4), (6, 8)]):
        # the processor's merge-block order: 2x2 blocks in raster order, each block's patches in raster order
        order = [(r // 2 * (width // 2) + c // 2) * 4 + (r % 2) * 2 + c % 2 for r in range(height) for c in range(width)]
        expected = parts[image][1:][order].reshape(height, width, 32)  # after the CLS row
        assert torch.equal(model.vision.patch_grid(stream, image=image), expected)
        on_tower = towers[image][order].reshape(height, width, 32)  # no CLS rows: as the patch embeddings
        assert torch.equal(model.vision.patch_grid(tower, image=image, of="patch_embeddings"), on_tower)
