"""The base of every standard envoy, and the helpers values use to find their way.

`Standard` is an nnsight ``Envoy`` whose standard values (`values.EProperty`)
can be listed with their availability (`Standard.support`). `missing_site`
says why a rewritten site a value needs is not on a module (its rule drifted,
or no rule covers the module's class), which is how a failure to instrument
shows up as a reason instead of a crash mid-trace.
"""

from __future__ import annotations

from typing import Any

from nnsight import Envoy
from nnsight.intervention.source import STATE

from instrument import installed

from .values import standard_values


class Standard(Envoy):
    """An envoy with standard values."""

    #: Why its values are served on the first step of generate only, or None (served on every step).
    first_step_only: str | None = None

    def support(self) -> dict[str, str | None]:
        """Each standard value of this envoy: None when available, else why not."""
        return {name: value.reason(self) for name, value in standard_values(type(self)).items()}


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
    if state is None or not state.sourced:
        return label
    for instrumented in installed(module).values():
        for site in instrumented.rewritten.sites:
            if site.served_as == label:
                return site.label
    return label


def missing_site(envoy: Envoy, label: str) -> str | None:
    """Why ``envoy``'s module has no rewritten site ``label``, or None when it has one."""
    module = envoy._module
    if any(label in instrumented.site_names for instrumented in installed(module).values()):
        return None
    cls = type(module)
    failures = getattr(envoy.root, "rewrite_failures", {})
    failure = failures.get(f"{cls.__module__}:{cls.__qualname__}")
    if failure is not None:
        return failure
    return (
        f"no rewrite rule exposes {label} in {cls.__qualname__}.forward "
        f"(see `python -m instrument.show` for the forwards that have one)"
    )


def rows_over(envoys: list[Envoy], layer: int | None = None) -> dict[str, Any]:
    """The support rows of a stack of blocks: each value of a block, its attention and its MLP.

    A value is None when every block has it, else ``{block index: reason}``
    for the blocks that do not. With ``layer``, that block's rows alone.
    """
    per_block: list[dict[str, str | None]] = []
    for block in envoys:
        rows = dict(block.support()) if isinstance(block, Standard) else {}
        for name in ("self_attn", "mlp"):
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
