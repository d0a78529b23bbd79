"""The supported families: one module per model_type, each with its RENAME and ENVOYS.

A family module defines ``FAMILY``; every module of this package that does is
a supported model_type (nothing else to register). A family says only what is
particular to it: the native names of its modules
under the standard ones (``RENAME``), the envoy classes of its tower and its
scatter host (``ENVOYS``), where its text blocks are (``TEXT_LAYERS``), and,
for a wrapper that scatters in its own forward, ``ROOT_SCATTER``. The text
model's envoys (`Layer`, `Attention`, `Mlp`) are found from the blocks
themselves, whatever text model the checkpoint pairs the tower with.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch

from ..text import Attention, Layer, Mlp, TextModel


@dataclass(frozen=True)
class Family:
    """What is particular to one model_type."""

    model_type: str
    #: native path -> standard name (nnsight's ``rename=``); a module class as a key names a block's child by what
    #: it is, for a hybrid that holds different sublayers under one native name
    rename: Mapping[str | type, str]
    envoys: Mapping[type, type]  #: module type -> envoy class, for the tower and the scatter host
    text_layers: str  #: the text blocks' path from the root
    root_scatter: str | None = None  #: the scatter's site in the root's own forward, if it scatters there
    extra_rename: Callable[[Any], Mapping[str | type, str]] = field(default=lambda config: {})  #: per-checkpoint names

    def rename_for(self, config: Any) -> dict[str | type, str]:
        """The ``rename=`` for one checkpoint of this family."""
        return {**self.rename, **self.extra_rename(config)}

    def envoys_for(self, model: torch.nn.Module) -> dict[type, type]:
        """The ``envoys=`` for one loaded model: the text model's, found from its blocks, then the family's."""
        blocks = model.get_submodule(self.text_layers)
        found: dict[type, type] = {type(model.get_submodule(self.text_layers.rpartition(".")[0])): TextModel}
        for block in blocks:
            found[type(block)] = Layer
            for name, envoy in (("self_attn", Attention), ("mlp", Mlp)):
                part = getattr(block, name, None)
                if isinstance(part, torch.nn.Module):
                    found[type(part)] = envoy
        return {**found, **self.envoys}


def _registry() -> dict[str, Family]:
    """Every family: the ``FAMILY`` of each module in this package (a module without one is a shared helper)."""
    found: dict[str, Family] = {}
    for info in pkgutil.iter_modules(__path__):
        family = getattr(importlib.import_module(f"{__name__}.{info.name}"), "FAMILY", None)
        if isinstance(family, Family):
            found[family.model_type] = family
    return found


def family_for(model_type: str) -> Family:
    """The family of ``model_type``; ValueError listing the supported ones otherwise."""
    registry = _registry()
    if model_type not in registry:
        raise ValueError(
            f"model_type {model_type!r} is not supported; supported model_types: {', '.join(sorted(registry))}"
        )
    return registry[model_type]
