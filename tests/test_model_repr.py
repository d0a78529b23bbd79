"""What ``print(model)`` shows of the tower: each stream value in the layout a read of it has.

A packed tower (the Qwen ViT, Pixtral, ...) runs every image's patches in one
row, so its stream values are `PackedPatches`, ``[1, patches,
vision_hidden_size]``; a tower that runs one row per image (SigLIP, CLIP) shows
`Patches`, ``[images, patches, vision_hidden_size]``. The same holds of a
block's own repr (nnsight's, one envoy at a time). The contract suite checks the
layout shown against every builder's row (tests/test_vision_contracts.py).
"""

from __future__ import annotations

from envoys import StandardizedTransformer
from envoys.core.layouts import PackedPatches, Patches
from envoys.testing import chat_prompt, noise_image

#: A tower block's stream values as print(model) lists them: the block's own, its attention's and its MLP's.
BLOCK_LINES = (
    "      layer_input -> {layout}: the stream entering the block {shape}",
    "      attention_output -> {layout}: what the attention adds to the stream {shape}",
    "      mlp_output -> {layout}: what the MLP adds to the stream {shape}",
    "      layer_output -> {layout}: the stream leaving the block {shape}",
    "        attention_output -> {layout}: what the attention adds to the stream {shape}",
    "        mlp_output -> {layout}: what the MLP adds to the stream {shape}",
)


def load(tiny_checkpoint, name: str) -> StandardizedTransformer:
    return StandardizedTransformer(tiny_checkpoint(name), task="image-text-to-text", attn_implementation="eager")


def tower_part(shown: str) -> list[str]:
    """The lines of ``print(model)`` from ``vision:`` up to the next root name."""
    lines = shown.splitlines()
    start = next(index for index, line in enumerate(lines) if line.startswith("  vision: "))
    end = next((index for index in range(start + 1, len(lines)) if not lines[index].startswith("    ")), len(lines))
    return lines[start:end]


def assert_shows(model: StandardizedTransformer, layout: type, other: type) -> None:
    """The tower's part of print(model) gives every stream value (patch_embeddings, tower_output, each block's) in
    ``layout``, and nothing in ``other``."""
    tower = tower_part(repr(model))
    for expected in BLOCK_LINES:
        assert expected.format(layout=layout.__name__, shape=layout.shape()) in tower, "\n".join(tower)
    for name in ("patch_embeddings", "tower_output"):
        (line,) = [line for line in tower if line.startswith(f"    {name} -> ")]
        assert line.startswith(f"    {name} -> {layout.__name__}: ") and line.endswith(layout.shape()), line
    assert not [line for line in tower if other.shape() in line or f"-> {other.__name__}:" in line]


def test_a_packed_tower_shows_one_row_holding_every_image(tiny_checkpoint):
    model = load(tiny_checkpoint, "qwen3_vl")
    assert_shows(model, PackedPatches, Patches)
    assert PackedPatches.shape() == "[1, patches, vision_hidden_size]"
    block = repr(model.vision.layers[0])  # nnsight's repr of one envoy lists the same values
    assert "(layer_output) -> PackedPatches: the stream leaving the block [1, patches, vision_hidden_size]" in block
    assert "[images, patches" not in block
    with model.trace(chat_prompt(model.processor, 1, "What is it?"), images=[noise_image(32, 32, seed=0)]):
        output = model.vision.layers[0].layer_output.save()
    assert output.shape[0] == 1 and output.dim() == 3  # what a read gives: the layout shown


def test_a_tower_of_one_row_per_image_shows_images(tiny_checkpoint):
    model = load(tiny_checkpoint, "llava-siglip")
    assert_shows(model, Patches, PackedPatches)
    assert Patches.shape() == "[images, patches, vision_hidden_size]"
    block = repr(model.vision.layers[0])
    assert "(layer_output) -> Patches: the stream leaving the block [images, patches, vision_hidden_size]" in block
    images = [noise_image(32, 32, seed=0), noise_image(32, 32, seed=1)]
    with model.trace(chat_prompt(model.processor, 2, "What is it?"), images=images):
        output = model.vision.layers[0].layer_output.save()
    assert output.shape[0] == 2
