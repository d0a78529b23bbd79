"""Deterministic test inputs for tiny checkpoints: noise images, videos and audio, and chat prompts."""

from __future__ import annotations

import math
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


def noise_video(frames: int, width: int, height: int, seed: int = 0) -> list[Image.Image]:
    """A video of ``frames`` RGB noise frames (a list of images, as the video processors take one video), every frame
    different, the same for the same arguments."""
    return [noise_image(width, height, seed=seed * 1000 + frame) for frame in range(frames)]


#: The sampling rate of every feature extractor the served families ship (Whisper's, Gemma 4's, Parakeet's).
AUDIO_RATE = 16_000


def noise_audio(seconds: float = 1.0, seed: int = 0, rate: int = AUDIO_RATE) -> np.ndarray:
    """A mono clip of ``seconds`` of uniform noise in [-1, 1) at ``rate`` Hz, ``float32 [samples]``, as the feature
    extractors take one clip."""
    rng = np.random.default_rng(seed)
    return rng.uniform(-1.0, 1.0, size=round(seconds * rate)).astype(np.float32)


def patch_colours(count: int) -> np.ndarray:
    """uint8 ``[count, 3]``: ``count`` distinct RGB colours, spread over the colour cube (each channel's levels evenly
    spaced from 0 to 255), so that no two patches' pixels are alike."""
    levels = max(2, math.ceil(round(count ** (1 / 3), 9)))
    step = 255 / (levels - 1)
    index = np.arange(count)
    digits = np.stack([index // levels**2, index // levels % levels, index % levels], axis=1)
    return np.round(digits * step).astype(np.uint8)


def patch_coloured_image(rows: int, columns: int, patch: int) -> Image.Image:
    """An RGB image of ``rows x columns`` patches of ``patch`` pixels a side, each patch one colour of its own.

    ``columns * patch`` wide and ``rows * patch`` high; patch ``(r, c)`` is
    ``patch_colours(rows * columns)[r * columns + c]``. A tower's patch
    embedding of such an image (its convolution on the processor's
    ``pixel_values``, which a test recomputes by hand) differs from patch to
    patch, so a row read from the wrong patch shows.
    """
    colours = patch_colours(rows * columns).reshape(rows, columns, 1, 1, 3)
    pixels = np.broadcast_to(colours, (rows, columns, patch, patch, 3)).transpose(0, 2, 1, 3, 4)
    return Image.fromarray(np.ascontiguousarray(pixels.reshape(rows * patch, columns * patch, 3)))


#: Processors that write an image's tokens at the start of every prompt, once a prompt, from no placeholder
#: (BLIP-2's and InstructBLIP's): a prompt takes one image, so several images go in several prompts.
ONE_IMAGE_A_PROMPT = ("Blip2Processor", "InstructBlipProcessor")


def image_prompts(processor: Any, n_images: int, text: str) -> str | list[str]:
    """What to trace ``n_images`` images with: `chat_prompt` holding every image, or, for a processor of
    `ONE_IMAGE_A_PROMPT`, a list of ``n_images`` prompts of one image each (a batch, image i in prompt i)."""
    if type(processor).__name__ in ONE_IMAGE_A_PROMPT:
        return [chat_prompt(processor, 1, text)] * n_images
    return chat_prompt(processor, n_images, text)


def chat_prompt(processor: Any, n_images: int, text: str, videos: int = 0, audio: int = 0) -> str:
    """One user turn holding `n_images` image entries, `videos` video entries and `audio` audio entries, then `text`,
    rendered with the processor's chat template, ending with the assistant's generation prompt.

    The result holds one image placeholder per image (``<image>``, or
    ``<|vision_start|><|image_pad|><|vision_end|>`` for Qwen-VL); the processor
    expands each placeholder to the image's token count when it is called with
    the images.
    """
    content: list[dict[str, str]] = [{"type": "image"} for _ in range(n_images)]
    content += [{"type": "video"} for _ in range(videos)] + [{"type": "audio"} for _ in range(audio)]
    content.append({"type": "text", "text": text})
    messages = [{"role": "user", "content": content}]
    # a processor that keeps no chat template of its own (BLIP-2's) renders its tokenizer's
    own = getattr(processor, "chat_template", None)
    template = None if own else getattr(getattr(processor, "tokenizer", None), "chat_template", None)
    return processor.apply_chat_template(messages, chat_template=template, add_generation_prompt=True, tokenize=False)
