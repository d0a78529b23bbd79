"""Deterministic test inputs for tiny checkpoints: noise images and chat prompts."""

from __future__ import annotations

from typing import Any

import numpy as np
from PIL import Image


def noise_image(width: int, height: int, seed: int = 0) -> Image.Image:
    """An RGB image of uniform random noise, the same for the same (width, height, seed).

    Noise rather than a solid colour, so that every patch differs and a
    feature that is read from the wrong patch or image shows up.
    """
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8)
    return Image.fromarray(pixels)


def chat_prompt(processor: Any, n_images: int, text: str) -> str:
    """One user turn holding `n_images` image entries then `text`, rendered with the
    processor's chat template, ending with the assistant's generation prompt.

    The result holds one image placeholder per image (``<image>``, or
    ``<|vision_start|><|image_pad|><|vision_end|>`` for Qwen-VL); the processor
    expands each placeholder to the image's token count when it is called with
    the images.
    """
    content: list[dict[str, str]] = [{"type": "image"} for _ in range(n_images)]
    content.append({"type": "text", "text": text})
    messages = [{"role": "user", "content": content}]
    return processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
