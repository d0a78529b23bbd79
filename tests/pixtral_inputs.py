"""Inputs and expected layouts for the tests of Pixtral-tower checkpoints (Mistral 3, Llava-Pixtral).

Every number here comes from the stock processor (``image_sizes``) and the
vision config (``patch_size``), never from the code under test. Images: 32x32,
and 48 high x 64 wide, so two images differ in both sides and the
convolution's padded grid is the second image's.
"""

from __future__ import annotations

import torch

from envoys.testing import chat_prompt, noise_image

ONE = [noise_image(32, 32, seed=0)]
TWO = [noise_image(32, 32, seed=0), noise_image(64, 48, seed=1)]  # 32x32, then 64 wide x 48 high


def prompt(model, images) -> str:
    return chat_prompt(model.processor, len(images), "What is in the picture?")


def processed(model, images) -> dict:
    return model.processor(text=[prompt(model, images)], images=images, return_tensors="pt")


def image_sizes(model, images) -> list[tuple[int, int]]:
    """The stock processor's ``image_sizes``: each image's [height, width] in pixels after resizing."""
    return [(int(h), int(w)) for h, w in processed(model, images)["image_sizes"]]


def patch_grids(model, images) -> list[tuple[int, int]]:
    """Each image's grid of patches (rows, columns), from the processor's sizes and the tower's patch size."""
    patch = model.config.vision_config.patch_size
    return [(h // patch, w // patch) for h, w in image_sizes(model, images)]


def patch_counts(model, images) -> list[int]:
    return [rows * columns for rows, columns in patch_grids(model, images)]


def bounds(counts: list[int]) -> list[tuple[int, int]]:
    """Each image's [start, end) on the packed row."""
    ends = torch.tensor(counts).cumsum(0).tolist()
    return list(zip([0, *ends[:-1]], ends))
