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
- `build_empty(name)`: the model alone on the meta device, no weights (its classes and config).
- `build_text_checkpoint(name, directory)`: its text model alone, as a causal LM.
- `noise_image(width, height)` and `chat_prompt(processor, n_images, text)`:
  an input image whose every patch differs, and a prompt with one image
  placeholder per image, rendered by the processor's chat template (``videos=`` and ``audio=`` add video and
  audio entries).
- `noise_video(frames, width, height)` and `noise_audio(seconds)`: a video of noise frames and a clip of noise.

The builders: each module of this package that defines ``BUILDERS``
(checkpoint name -> builder, its docstring saying which checkpoint it
imitates) declares beside them ``CONTRACTS`` (checkpoint name -> what the
contract suite expects of it, `envoys.testing.contract`); the package gathers
both (nothing else to register).
"""

from __future__ import annotations

import atexit
import importlib
import importlib.util
import json
import os
import pkgutil
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import transformers
from transformers import AutoModelForCausalLM, PreTrainedModel, ProcessorMixin

from ..families import absent_from_release
from .contract import Row
from .images import chat_prompt, image_prompts, noise_audio, noise_image, noise_video, patch_coloured_image
from .quiet import quietly

Builder = Callable[[], tuple[PreTrainedModel, ProcessorMixin]]



def in_release(model_type: str) -> bool:
    """Whether the installed transformers has ``model_type``: a model of its own (``transformers.models.<model_type>``)
    or one that a model's module defines beside others (an omni model's thinker, in the omni model's module)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    return importlib.util.find_spec(f"transformers.models.{model_type}") is not None or model_type in CONFIG_MAPPING_NAMES


def _gather() -> tuple[dict[str, Builder], dict[str, Row]]:
    """Every module's ``BUILDERS`` and ``CONTRACTS``, modules in name order (the rows of the builders found)."""
    found: dict[str, Builder] = {}
    rows: dict[str, Row] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda info: info.name):
        try:
            module = importlib.import_module(f"{__name__}.{info.name}")
        except ImportError as error:  # a class this release lacks: its builders are left out, with the reason
            ABSENT[info.name] = absent_from_release(info.name, error) or (
                f"its builder cannot be imported on transformers {transformers.__version__}: {error}"
            )
            continue
        for name, builder in getattr(module, "BUILDERS", {}).items():
            model_type = name.partition("-")[0]
            if not in_release(model_type):  # one module, several models
                ABSENT[model_type] = f"target absent: transformers {transformers.__version__} has no {model_type} model"
            else:
                found[name] = builder
        rows.update({name: row for name, row in getattr(module, "CONTRACTS", {}).items() if name in found})
    return found, rows


#: Builder modules the installed transformers cannot import (a model or class it lacks): module name -> why.
ABSENT: dict[str, str] = {}


#: Builders by checkpoint name, each returning an unsaved (model, processor); and what the contract suite expects
#: of each checkpoint, declared beside its builder (`envoys.testing.contract`).
BUILDERS, CONTRACTS = _gather()

NAMES: tuple[str, ...] = tuple(BUILDERS)


def _builder(name: str) -> Builder:
    try:
        return BUILDERS[name]
    except KeyError:
        absent = ABSENT.get(name.partition("-")[0])
        if absent is not None:
            raise ValueError(f"no tiny checkpoint {name!r} on this release: {absent}") from None
        raise ValueError(f"unknown tiny checkpoint {name!r}; known names: {', '.join(NAMES)}") from None


def build(name: str, seed: int = 0) -> tuple[PreTrainedModel, ProcessorMixin]:
    """The model (float32, eager attention, eval mode) and processor of `name`, in memory.

    Weights depend only on `seed`: the global torch generator is seeded
    before construction, inside a forked RNG state so the caller's is left
    as it was.
    """
    builder = _builder(name)
    with torch.random.fork_rng(devices=[]), quietly():
        torch.manual_seed(seed)
        model, processor = builder()
    if model.dtype != torch.float32:  # Module.to(dtype) would also make complex buffers real (Llama 4's rotary table)
        model = model.to(torch.float32)
    with quietly():  # a tower that cannot switch its implementation says so; its saved config asks for eager
        model.set_attn_implementation("eager")
    return model.eval(), processor


def build_empty(name: str) -> PreTrainedModel:
    """The model of `name` built on the meta device: its classes, config and shapes, and no weights.

    For what reads a model's structure alone, such as the rule catalogue
    (`envoys.catalog`): nothing is drawn or stored, and the caller's torch
    generator is left as it was. The builder's processor is built and
    dropped; the attention implementation is left as the builder made it (it
    changes no module class). A builder that reads its weights' values while
    it builds skips the meta parameters (MiniCPM's, which redraws the entries
    its init left at zero).
    """
    builder = _builder(name)
    with torch.random.fork_rng(devices=[]), torch.device("meta"), quietly():
        model, _ = builder()
    return model.eval()


def _save(model: PreTrainedModel, saved_with: Any, directory: str | os.PathLike[str]) -> Path:
    """Save ``model`` and its processor or tokenizer into ``directory``, eager attention written into the config.

    transformers does not serialise the attention implementation, so
    ``"attn_implementation": "eager"`` is written into the saved
    ``config.json`` afterwards: a load without ``attn_implementation=`` gets
    eager attention in every sub-model, and an explicit argument still wins.
    Older releases (4.57.6 to 5.2.0; 5.10.4 reads it) ignore that key when
    loading, so a load that needs eager attention there passes it.
    """
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    saved_with.save_pretrained(path)
    config_file = path / "config.json"
    config = json.loads(config_file.read_text())
    config["attn_implementation"] = "eager"
    config_file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return path


def build_checkpoint(name: str, directory: str | os.PathLike[str], seed: int = 0) -> Path:
    """Build the tiny random checkpoint `name` with its processor, save both with save_pretrained into `directory`,
    return the directory. Raises ValueError for a name not in :data:`NAMES`."""
    model, processor = build(name, seed)
    return _save(model, processor, directory)


def build_text_checkpoint(name: str, directory: str | os.PathLike[str], seed: int = 0) -> Path:
    """Save the text model of the tiny checkpoint `name` alone, as the causal LM transformers has for it, with its tokenizer.

    The weights are the full checkpoint's (same `seed`): its text model (the
    module of the causal LM's decoder class) and its head, so the text model
    alone computes what the wrapper computes on text.
    Raises ValueError when transformers has no causal LM for the text model's config.
    """
    model, processor = build(name, seed)
    text_config = model.config.get_text_config()
    try:
        causal = AutoModelForCausalLM.from_config(text_config)
    except ValueError as error:
        raise ValueError(f"transformers has no causal LM for {name}'s text model ({text_config.model_type})") from error
    nested = next((m for m in model.modules() if type(m) is type(causal)), None)
    if nested is not None:  # the wrapper holds the causal LM whole (Llama 4, Nemotron-H Omni)
        causal.load_state_dict(nested.state_dict())
    else:  # get_decoder, not base_model: 4.57's Gemma3ForCausalLM names a base_model_prefix it lacks
        decoder = next(m for m in model.modules() if type(m) is type(causal.get_decoder()))
        causal.get_decoder().load_state_dict(decoder.state_dict())
        causal.get_output_embeddings().load_state_dict(model.get_output_embeddings().state_dict())
    causal = causal.to(torch.float32).eval()
    return _save(causal, processor.tokenizer, directory)


__all__ = [
    "BUILDERS", "NAMES", "build", "build_checkpoint", "build_empty", "build_text_checkpoint", "chat_prompt", "image_prompts",
    "noise_audio", "noise_image", "noise_video", "patch_coloured_image", "quietly",
]


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
