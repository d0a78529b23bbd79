"""The base of every standard envoy, and the helpers values use to find their way.

`Standard` is an nnsight ``Envoy`` whose standard values (`values.EProperty`)
can be listed with their availability (`Standard.support`). `missing_site`
says why a rewritten site a value needs is not on a module (its rule drifted,
or no rule covers the module's class), which is how a failure to instrument
shows up as a reason instead of a crash mid-trace.
"""

from __future__ import annotations

import difflib
from typing import Any

from nnsight import Envoy
from nnsight.intervention.source import STATE

from instrument import installed

from .backends import release, stock_labels
from .paths import standard_path
from .values import standard_values


class Standard(Envoy):
    """An envoy with standard values."""

    #: Why its values are served on the first step of generate only, or None (served on every step).
    first_step_only: str | None = None

    def support(self) -> dict[str, str | None]:
        """Each standard value of this envoy: None when available, else why not."""
        return {name: value.reason(self) for name, value in standard_values(type(self)).items()}

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name.startswith("_") or name in standard_values(type(self)):
                raise
            raise NoSuchValue(self, name) from None


class NoSuchValue(AttributeError):
    """A name a standard envoy has neither as a value nor as a module: the message (built when shown) gives the
    closest names, the values the envoy has, and the families that have a value of that name (as the envoy's root,
    the model, finds them: its ``families_with``)."""

    def __init__(self, envoy: Envoy, name: str) -> None:
        super().__init__(name)
        self.envoy, self.attribute = envoy, name

    def __str__(self) -> str:
        envoy, name = self.envoy, self.attribute
        values = list(standard_values(type(envoy)))
        modules = list(dict.fromkeys([*envoy._aliases, *(c.path.rpartition(".")[2] for c in envoy._children)]))
        methods = [attribute for attribute in dir(type(envoy)) if not attribute.startswith("_")]  # output, skip, ...
        close = difflib.get_close_matches(name, list(dict.fromkeys([*values, *modules, *methods])), n=3)
        guess = f" (did you mean {' or '.join(map(repr, close))}?)" if close else ""
        parts = [f"{standard_path(envoy)} has no value or module {name!r}{guess}"]
        families_with = getattr(envoy.root, "families_with", None)
        others = families_with(name) if families_with is not None else {}
        if others:
            where = "; ".join(f"{', '.join(who)} (at {place}.{name})" for place, who in others.items())
            parts.append(f"{name} is a value of other families: {where}")
        parts.append(f"its values: {', '.join(values) or 'none'}")
        parts.append(f"its modules: {', '.join(modules) or 'none'}")
        return "; ".join(parts)


class Blocks(Envoy):
    """A stack of modules (a ``ModuleList``: the text model's blocks, the tower's): an index past the end is an
    ``IndexError`` saying how many there are, where nnsight's lookup by name finds no attribute."""

    def __getitem__(self, key: Any) -> Any:
        count = len(self)
        if isinstance(key, int) and not isinstance(key, bool) and not -count <= key < count:
            indices = f"0 to {count - 1}" if count else "none"
            whose, what = self.whose()
            raise IndexError(f"{standard_path(self)}[{key}]: {whose} has {count} {what} ({indices}); got {key}")
        return super().__getitem__(key)

    def whose(self) -> tuple[str, str]:
        """``("the text model", "blocks")``, ``("the tower", "blocks")``, or the stack's own path and "entries"."""
        root = self.root
        text_layers = getattr(getattr(root, "family", None), "text_layers", None)
        if text_layers is not None and self.path == f"{root.path}.{text_layers}":
            return "the text model", "blocks"
        vision = root.__dict__.get("vision")
        if isinstance(vision, Envoy) and vision.__dict__.get("layers") is self:
            return "the tower", "blocks"
        return standard_path(self), "entries"


def child(envoy: Envoy, name: str) -> Envoy | None:
    """The child (or aliased) envoy ``name`` of ``envoy``, or None when the module has none."""
    found = envoy.__dict__.get(name)
    if isinstance(found, Envoy):
        return found
    for candidate in envoy._children:
        if candidate.path.rpartition(".")[2] == name:
            return candidate
    return None


def site_label(envoy: Envoy, label: str) -> str:
    """The label under which ``envoy``'s module serves its rewritten site ``label`` now.

    ``label`` itself, unless a user opened nnsight's own ``.source`` on the
    module: nnsight then runs its own instrumented body, which numbers the
    calls as the release's source does, so a site a rule's release variant
    serves under another label (the kernel call nnsight numbers
    ``attention_interface_2`` before transformers 5.1, served as
    ``attention_interface_1``) is at nnsight's label there.
    """
    module = envoy._module
    state = module.__dict__.get(STATE)
    if state is None or not state.sourced or stock_labels(envoy) is not None:
        return label  # on a server's stock module, a value's location is mapped where it is requested (`backends`)
    for instrumented in installed(module).values():
        for site in instrumented.rewritten.sites:
            if site.served_as == label:
                return site.label
    return label


def op_label(envoy: Any, label: str) -> str:
    """nnsight's label, in the forward ``envoy``'s module runs now, of the call served as ``label``: what its
    ``.source`` is indexed with (a drill into the call)."""
    stock = stock_labels(envoy)
    return stock.get(label, label) if isinstance(stock, dict) else site_label(envoy, label)


def _has_site(instrumented: Any, label: str) -> bool:
    """Whether ``instrumented`` serves ``label``: one of its sites, or a drilled one, ``outer.source.inner``."""
    outer, _, inner = label.partition(".source.")
    if not inner:
        return label in instrumented.site_names
    drilled = instrumented.drills.get(outer)
    return drilled is not None and _has_site(drilled, inner)


def missing_site(envoy: Envoy, label: str) -> str | None:
    """Why ``envoy``'s module has no rewritten site ``label`` (a site of a function one of its sites drills into is
    ``outer.source.inner``), or None when it has one."""
    module = envoy._module
    if any(_has_site(instrumented, label) for instrumented in installed(module).values()):
        return None
    cls = type(module)
    stock = stock_labels(envoy)
    if isinstance(stock, str):
        return stock
    if stock is not None:  # a server's stock module, served by nnsight's .source of the forward there
        outer = label.partition(".source.")[0]
        if outer in stock:
            return None
        return (
            f"the client planned no site {outer} on {cls.__qualname__}.forward, so the server's stock forward "
            f"({release()}) is not read there; its planned sites: {', '.join(sorted(stock)) or 'none'}"
        )
    failures = getattr(envoy.root, "rewrite_failures", {})
    failure = failures.get(f"{cls.__module__}:{cls.__qualname__}")
    if failure is not None:
        return failure
    return (
        f"no rewrite rule exposes {label} in {cls.__qualname__}.forward "
        f"(see `python -m instrument.show` for the forwards that have one)"
    )


def rows_over(envoys: list[Envoy], layer: int | None = None) -> dict[str, Any]:
    """The support rows of a stack of blocks: each value of a block, its attention and its MLP (the parts a block's
    class names in ``parts``, where they are others: a cross-attention block's ``cross_attn``).

    A value is None when every block has it, else ``{block index: reason}``
    for the blocks that do not. With ``layer``, that block's rows alone.
    """
    per_block: list[dict[str, str | None]] = []
    for block in envoys:
        rows = dict(block.support()) if isinstance(block, Standard) else {}
        for name in getattr(block, "parts", ("self_attn", "mlp")):
            part = child(block, name)
            if isinstance(part, Standard):
                rows.update({f"{name}.{value}": reason for value, reason in part.support().items()})
        per_block.append(rows)
    if layer is not None:
        return dict(per_block[layer])
    names: dict[str, None] = {}
    for rows in per_block:
        names.update(dict.fromkeys(rows))
    table: dict[str, Any] = {}
    for name in names:
        reasons = {index: rows.get(name, "this block does not have it") for index, rows in enumerate(per_block)}
        missing = {index: reason for index, reason in reasons.items() if reason is not None}
        table[name] = missing or None
    return table
