"""Tiny random checkpoints of every supported family, built offline: to try the library, test code against it, or
write a bug report without the hub.

A tiny checkpoint is a model of the family's real class with two blocks of
width 32 (tower and text), random float32 weights drawn from a seed, eager
attention, and the processor its real users load (the stock processor, image
and video processors, a small generated tokenizer with the family's special
tokens and a chat template). It is saved with ``save_pretrained``, so it loads
by path exactly as a hub checkpoint does::

    from envoys import StandardizedTransformer
    from envoys.testing import build_checkpoint

    path = build_checkpoint("qwen2_5_vl", "tiny-qwen2.5-vl")
    model = StandardizedTransformer(path, task="image-text-to-text")

Its outputs are noise: it shows what each value is, its shape, and what a
write changes, not what a trained model computes.

- `NAMES`: every checkpoint this release can build (``"llava-siglip"``,
  ``"qwen2_5_vl"``, ...); a family with several layouts has one name each.
- `build_checkpoint(name, directory)`: build and save one into ``directory``.
- `tiny_checkpoint(name)`: the same, built once per process into a temporary
  folder that is removed at exit (what tests and the documentation use).
- `build(name)`: the model and processor in memory, unsaved.
- `build_text_checkpoint(name, directory)`: its text model alone, as a causal LM.
- `noise_image(width, height)` and `chat_prompt(processor, n_images, text)`:
  an input image whose every patch differs, and a prompt with one image
  placeholder per image, rendered by the processor's chat template (``videos=`` and ``audio=`` add video and
  audio entries).
- `noise_video(frames, width, height)` and `noise_audio(seconds)`: a video of noise frames and a clip of noise.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

from .tiny import NAMES, build, build_checkpoint, build_text_checkpoint
from .tiny.images import chat_prompt, image_prompts, noise_audio, noise_image, noise_video

_built: dict[tuple[str, int], Path] = {}
_folder: Path | None = None


def tiny_checkpoint(name: str, seed: int = 0) -> Path:
    """The directory of the tiny checkpoint ``name`` (weights from ``seed``), built on the first call in this process.

    Later calls with the same name and seed return the same directory; treat
    it as read-only. Everything built this way lives in one temporary folder,
    removed when the process exits. Raises ValueError for a name not in
    `NAMES`, saying which names there are.
    """
    global _folder
    key = (name, seed)
    if key not in _built:
        if _folder is None:
            _folder = Path(tempfile.mkdtemp(prefix="vlm-instrument-tiny-"))
            atexit.register(shutil.rmtree, _folder, True)
        _built[key] = build_checkpoint(name, _folder / f"{name}-seed{seed}", seed=seed)
    return _built[key]


__all__ = [
    "NAMES", "build", "build_checkpoint", "build_text_checkpoint", "chat_prompt", "image_prompts", "noise_audio",
    "noise_image", "noise_video", "tiny_checkpoint",
]
