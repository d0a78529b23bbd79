"""Each standard value of a checkpoint as plain nnsight spells it: what a server without this package reads.

Every value sits at a location nnsight's own envoys reach (a module's
``.output`` or ``.inputs``, or an operation of its forward's ``.source``,
drilled with ``.source`` again into a function it calls), and is a part of
what is served there (an argument, an item, a field). `spellings` prints, for
each value of the first block of each stack and of everything outside them,
that spelling, the standard layout it is shown in, and the reason where the
checkpoint lacks it. ``python -m instrument.show qwen3_vl --nnsight`` prints it
for a family's tiny checkpoint; a folder or hub id for that checkpoint (no
weight is read).
"""

from __future__ import annotations

import re
from typing import Any

from . import testing
from .core.backends import relabelled
from .core.paths import standard_path
from .core.pinning import PinnedEProperty
from .core.standard import Standard
from .core.values import Argument, EProperty, Field, First, Item, Selector, standard_values
from .model import IMAGE_TEXT_TO_TEXT, StandardizedTransformer
from .towers.per_image import BlockDiagonal


def native_path(location: str) -> str:
    """``model.model.layers.0.source.x_0.input`` -> ``model.model.layers[0].source.x_0.inputs``: the location as
    nnsight's envoys are walked to it (a served ``input`` is the call's ``(args, kwargs)``, nnsight's ``.inputs``)."""
    path = re.sub(r"\.(\d+)(?=\.|$)", r"[\1]", location)
    return path[: -len(".input")] + ".inputs" if path.endswith(".input") else path


def native_part(select: Selector | None) -> str:
    """The indexing that takes a standard value's part out of what nnsight serves at its location."""
    if select is None:
        return ""
    if isinstance(select, Argument):
        return f"[0][{select.index}]  (or [1][{select.name!r}] where it is passed by keyword)"
    if isinstance(select, First):
        return "[0]  (where the call returns a tuple)"
    if isinstance(select, Item):
        return f"[{select.index}]"
    if isinstance(select, Field):
        return f".{select.name}"
    return f"  (then the part {select!r} takes)"


def nnsight_location(envoy: Any, location: str) -> str:
    """``location`` with nnsight's own labels for the forward this release runs (a site a rule's release variant
    serves under another label, such as the attention kernel call on transformers 5.0)."""
    module = location.partition(".source.")[0]
    labels = {}
    for forward in envoy.root.site_plan.forwards.get(module, ()):
        labels.update(forward.labels)
    return relabelled(location, labels)


def spelling(envoy: Any, prop: EProperty) -> str:
    """How plain nnsight reads ``prop`` on ``envoy``, or why the checkpoint lacks it."""
    reason = prop.reason(envoy)
    if reason is not None:
        return f"unavailable: {reason}"
    text = native_path(nnsight_location(envoy, prop._location(envoy))) + native_part(prop.selector(envoy))
    if isinstance(prop, PinnedEProperty) and prop.occurrence is not None:
        call = prop.occurrence(envoy)
        if call is not None:
            text += f"  (occurrence {call} of the location in a forward: read it in `for _ in tracer.iter[{call}]:`)"
    if isinstance(prop, BlockDiagonal):
        text += ("  (occurrence k is kernel call k, one per image or window: read each in `for _ in tracer.iter[k]:` "
                 "and lay them on the diagonal)")
    layout = getattr(prop._preprocess, "__annotations__", {}).get("return")
    return f"{text}  -> {prop.description} ({getattr(layout, '__name__', layout)})"


def _first_block(envoy: Any) -> bool:
    return all(segment == "0" for segment in envoy.path.split(".") if segment.isdigit())


def spellings_of(model: StandardizedTransformer) -> str:
    """One line per standard value of ``model`` (the first block of each stack standing for every block)."""
    lines = [f"# {model.config.model_type}: each standard value as plain nnsight reads it (block 0 for block i)"]
    for envoy in model.modules():
        if not (isinstance(envoy, Standard) or envoy is model) or not _first_block(envoy):
            continue
        for name, prop in standard_values(type(envoy)).items():
            where = standard_path(envoy).replace("[0]", "[i]")
            lines.append(f"{name if where == 'model' else f'{where}.{name}'}: {spelling(envoy, prop)}")
    return "\n".join(lines) + "\n"


def spellings(target: str) -> str:
    """The spellings of a checkpoint: a tiny checkpoint's name or model_type (``qwen3_vl``), or a folder or hub id."""
    names = [name for name in testing.NAMES if target in (name, name.partition("-")[0])]
    path = testing.tiny_checkpoint(names[0]) if names else target
    return spellings_of(StandardizedTransformer(path, task=IMAGE_TEXT_TO_TEXT, attn_implementation="eager"))
