"""The tower's attention from a patch, or to it, on the image's grid (``recipes.tower_attention``), and a video's
frames' patch grids (``vision.video_patch_grid``).

The pattern is the tower block's ``attention_probabilities`` (checked against the block's own queries and keys by
the contract suite); where each patch sits in it comes from the family's geometry, written here: LLaVA's one row per
image in raster order (CLIP's CLS first), the Qwen ViT's packed merge-block order, RADIO's packed rows with each
image's cls and register tokens first. Float32, eager, exact.
"""

from __future__ import annotations

import re

import pytest
import torch

from envoys import StandardizedTransformer, Unavailable
from envoys.image import recipes
from envoys.testing import chat_prompt, noise_image, noise_video

FAMILIES = ["llava-siglip", "llava-clip", "qwen3_vl", "nemotron_h_omni"]
IMAGES = [noise_image(48, 32, seed=0), noise_image(32, 64, seed=1)]


@pytest.fixture(scope="module", params=FAMILIES)
def model(request, tiny_checkpoint):
    return StandardizedTransformer(tiny_checkpoint(request.param), task="image-text-to-text",
                                   attn_implementation="eager", dispatch=True)


def prompt(model, images=IMAGES) -> str:
    return chat_prompt(model.processor, len(images), "Where is the cat?")


def grids(model, images=IMAGES) -> list[tuple[int, int]]:
    """Each image's patch grid, ``(rows, columns)``, off the processor's outputs or the square image size."""
    batch = model.processor(text=[prompt(model, images)], images=images, return_tensors="pt")
    for key in ("image_grid_thw", "image_grid_hw"):
        if key in batch:
            return [(int(size[-2]), int(size[-1])) for size in batch[key]]
    side = model.config.vision_config.image_size // model.config.vision_config.patch_size
    return [(side, side)] * len(images)


def stream_row(model, image: int, r: int, c: int) -> tuple[int, int]:
    """(row of the pattern's first axis, position) of patch ``(r, c)`` of ``image``, by the family's geometry."""
    sizes = grids(model)
    vision = model.config.vision_config
    if model.config.model_type == "llava":  # one row per image, raster order; CLIP's CLS first
        return image, (1 if vision.model_type == "clip_vision_model" else 0) + r * sizes[image][1] + c
    if hasattr(vision, "num_summary_tokens"):  # RADIO: packed, each image's cls and register rows first
        prefix = vision.num_summary_tokens
        return 0, sum(prefix + h * w for h, w in sizes[:image]) + prefix + r * sizes[image][1] + c
    merge, width = vision.spatial_merge_size, sizes[image][1]  # the Qwen ViT: packed, merge-block order
    block = (r // merge) * (width // merge) + c // merge
    return 0, sum(h * w for h, w in sizes[:image]) + block * merge * merge + (r % merge) * merge + c % merge


def pattern_of(model, layer: int, images=IMAGES) -> torch.Tensor:
    with torch.no_grad(), model.trace(prompt(model, images), images=images) as tracer:
        pattern = model.vision.layers[layer].self_attn.attention_probabilities.save()
        tracer.stop()
    return pattern.as_subclass(torch.Tensor)


@pytest.mark.parametrize("direction", ["from", "to"])
def test_the_attention_from_or_to_a_patch_is_its_row_or_column_on_the_image_s_grid(model, direction):
    layer, image, patch = -1, 1, (2, 1)
    got = recipes.tower_attention(model, prompt(model), IMAGES, layer=layer, patch=patch, image=image,
                                  direction=direction, per_head=True)
    pattern = pattern_of(model, layer)
    row, query = stream_row(model, image, *patch)
    height, width = grids(model)[image]
    expected = torch.empty(pattern.shape[1], height, width)
    for r in range(height):
        for c in range(width):
            _, key = stream_row(model, image, r, c)
            expected[:, r, c] = pattern[row, :, query, key] if direction == "from" else pattern[row, :, key, query]
    assert torch.equal(got.grid, expected)
    summed = recipes.tower_attention(model, prompt(model), IMAGES, layer=layer, patch=patch, image=image,
                                     direction=direction)
    assert torch.equal(summed.grid, expected.sum(0))
    assert (summed.layer, summed.patch, summed.direction) == (model.vision.num_layers - 1, patch, direction)


def test_a_packed_tower_s_patch_attends_within_its_own_image(tiny_checkpoint):
    model = StandardizedTransformer(tiny_checkpoint("qwen3_vl"), task="image-text-to-text", attn_implementation="eager")
    other = recipes.tower_attention(model, prompt(model), IMAGES, layer=0, patch=(0, 0), image=0)
    assert float(other.grid.sum()) == pytest.approx(model.vision.num_heads)  # every key it attends to is on its grid
    pattern = pattern_of(model, 0)
    _, query = stream_row(model, 1, 0, 0)
    first = sum(h * w for h, w in grids(model)[:1])
    assert torch.equal(pattern[0, :, query, :first], torch.zeros_like(pattern[0, :, query, :first]))


def test_a_video_s_frames_are_each_its_own_grid(tiny_checkpoint, tmp_path):
    """The Qwen ViT encodes a video's frames two at a time (temporal units): its kernel calls are one per unit, so a
    patch attends within its unit only; the grids are the units' merge-block order."""
    model = StandardizedTransformer(tiny_checkpoint("qwen3_vl"), task="image-text-to-text", attn_implementation="eager")
    frames = noise_video(4, 32, 32)
    text = chat_prompt(model.processor, 0, "What happens in the video?", videos=1)
    got = recipes.tower_attention(model, text, videos=[frames], layer=0, patch=(1, 2, 3), per_head=True)
    with torch.no_grad(), model.trace(text, videos=[frames]) as tracer:
        pattern = model.vision.layers[0].self_attn.attention_probabilities.save()
        tracer.stop()
    units, height, width = (int(size) for size in
                            model.processor(text=[text], videos=[frames], return_tensors="pt")["video_grid_thw"][0])
    merge = model.config.vision_config.spatial_merge_size

    def index(unit: int, r: int, c: int) -> int:
        block = (r // merge) * (width // merge) + c // merge
        return unit * height * width + block * merge * merge + (r % merge) * merge + c % merge

    expected = torch.empty(pattern.shape[1], units, height, width)
    for unit in range(units):
        for r in range(height):
            for c in range(width):
                expected[:, unit, r, c] = pattern[0, :, index(1, 2, 3), index(unit, r, c)]
    assert torch.equal(got.grid, expected)
    assert torch.equal(got.grid[:, 0], torch.zeros_like(got.grid[:, 0]))  # another unit: another kernel call
    assert got.draw(tmp_path / "frames.png").exists()


def test_bad_arguments_are_refused_saying_what_to_pass(tiny_checkpoint):
    model = StandardizedTransformer(tiny_checkpoint("qwen3_vl"), task="image-text-to-text", attn_implementation="eager")
    text = prompt(model)
    with pytest.raises(TypeError, match=re.escape("tower_attention takes images= or videos=")):
        recipes.tower_attention(model, text, layer=0, patch=(0, 0))
    with pytest.raises(ValueError, match=re.escape("direction is 'from' (what the patch attends to) or 'to'")):
        recipes.tower_attention(model, text, IMAGES, layer=0, patch=(0, 0), direction="into")
    with pytest.raises(IndexError, match=re.escape("patch is (row, column) on a grid of shape (4, 6); got (4, 0)")):
        recipes.tower_attention(model, text, IMAGES, layer=0, patch=(4, 0))
    with pytest.raises(IndexError, match=re.escape("vision.layers[7]: the tower has 3 blocks (0 to 2); got 7")):
        recipes.tower_attention(model, text, IMAGES, layer=7, patch=(0, 0))
    sdpa = StandardizedTransformer(tiny_checkpoint("qwen3_vl"), task="image-text-to-text", attn_implementation="sdpa")
    with pytest.raises(Unavailable, match=re.escape("vision.layers[0].self_attn.attention_probabilities is "
                                                    "unavailable: the scores and probabilities exist only inside "
                                                    "eager attention")):
        recipes.tower_attention(sdpa, text, IMAGES, layer=0, patch=(0, 0))
