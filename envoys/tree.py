"""The standard tree: what ``repr(model)`` shows.

The standard names only (``layers``, ``embed_tokens``, ``norm``, ``lm_head``,
``vision`` and its ``layers``, ``projector``, ...), each with its module in one
line and its standard values, a value being ``name -> Layout: description
[shape]``, or the reason it is unavailable. A stack of blocks shows its first
block of each kind (a hybrid stack has two); ``support()`` says where blocks differ.
"""

from __future__ import annotations

from typing import Any

import torch
from nnsight import Envoy

from .audio import Audio
from .core.standard import child
from .core.values import standard_values
from .vision.tower import Vision

ROOT_NAMES = ("embed_tokens", "layers", "norm", "lm_head", "vision", "projector")
#: The root's names of what its family may take besides images: shown as their tower, or as why there is none.
MEDIA_NAMES = ("video", "audio")
BLOCK_PARTS = ("self_attn", "linear_attn", "mlp")
#: A tower's standard children, shown whether the module names them so itself or a rename does.
TOWER_NAMES = ("patch_embed", "layers", "norm")


def module_line(module: torch.nn.Module) -> str:
    """``Linear(in_features=32, out_features=97, bias=False)``: the module's class and its extra_repr."""
    extra = module.extra_repr()
    return f"{type(module).__name__}({extra})" if "\n" not in extra else type(module).__name__


def value_lines(envoy: Envoy, indent: str) -> list[str]:
    lines = []
    for name, value in standard_values(type(envoy)).items():
        reason = value.reason(envoy)
        shown = str(value).removeprefix(f"({name})")
        lines.append(f"{indent}{name}{shown}" + (f"  [unavailable: {reason}]" if reason else ""))
    return lines


def block_groups(blocks: list[Envoy]) -> list[tuple[list[int], Envoy]]:
    """The blocks grouped by shape (their class and which standard parts they hold), each with its first block.

    One group on an ordinary stack; two on a hybrid one (Qwen3.5's DeltaNet and
    full-attention blocks), so each kind of block shows its own values.
    """
    groups: dict[tuple, tuple[list[int], Envoy]] = {}
    for index, block in enumerate(blocks):
        parts = tuple(part for part in BLOCK_PARTS if isinstance(block.__dict__.get(part), Envoy))
        indices, _ = groups.setdefault((type(block._module), parts), ([], block))
        indices.append(index)
    return list(groups.values())


def node_lines(name: str, envoy: Any, indent: str) -> list[str]:
    """One standard node: its line, its values, and its standard children."""
    module = envoy._module
    if isinstance(module, torch.nn.ModuleList):
        blocks = list(envoy)
        kinds = sorted({type(block._module).__name__ for block in blocks})
        lines = [f"{indent}{name}: {len(blocks)} x {' / '.join(kinds)}"]
        groups = block_groups(blocks)
        for indices, first in groups:
            inner = indent + "  "
            if len(groups) > 1:
                lines.append(f"{inner}[{', '.join(map(str, indices))}]:")
                inner += "  "
            lines += value_lines(first, inner)
            for part in BLOCK_PARTS:
                child = first.__dict__.get(part)
                if isinstance(child, Envoy):
                    lines += node_lines(part, child, inner)
        return lines
    lines = [f"{indent}{name}: {module_line(module)}"]
    lines += value_lines(envoy, indent + "  ")
    for part, node in child_names(envoy).items():
        lines += node_lines(part, node, indent + "  ")
    return lines


def child_names(envoy: Any) -> dict[str, Envoy]:
    """The standard children a node shows, by name: those a rename gives a standard name and, on a tower, those of
    `TOWER_NAMES` its module already names so (Kimi's ``layers``, the Qwen ViT's ``patch_embed``), these first."""
    aliases = [alias for alias in getattr(envoy, "_aliases", {}) if "." not in alias]
    names = dict.fromkeys([*(TOWER_NAMES if isinstance(envoy, Vision | Audio) else ()), *aliases])
    found = {name: child(envoy, name) for name in names}
    return {name: part for name, part in found.items() if isinstance(part, Envoy)}


def standard_tree(root: Any, title: str) -> str:
    """The whole standard tree under ``root``, headed by ``title``."""
    lines = [title]
    lines += value_lines(root, "  ")
    for name in ROOT_NAMES:
        child = root.__dict__.get(name)
        if isinstance(child, Envoy):
            lines += node_lines(name, child, "  ")
    for name in MEDIA_NAMES:
        child = root.__dict__.get(name)
        if isinstance(child, Envoy):
            lines += node_lines(name, child, "  ")
        elif child is not None:
            lines.append(f"  {child!r}")
    family = getattr(root, "family", None)
    if family is not None and family.crops is not None and "crops" in root.__dict__:  # the tower's second run
        lines.append(f"  {root.__dict__['crops']!r}")
    return "\n".join(lines)
