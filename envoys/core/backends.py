"""Which backend serves a site's value: the library's rewritten forward, or nnsight's own ``.source`` of the stock one.

Every site carries the label nnsight's ``.source`` gives the same call, so a
value located at ``{module}.source.{label}`` is served either way:

- locally (and on a weightless client) the module runs the rule's rewritten
  forward, installed by the library, and the site is its;
- on a server that holds the stock model (NDIF: only the modules and the
  interleaver are the server's, the envoys travel with the request), nothing
  of the library is installed, and the same location is served by nnsight's
  own ``.source`` of the module's forward, opened before the model runs.

`SitePlan` is what travels: for each module a rule is installed on, the
sites as the client's forward labels them, with a digest of that forward and
the release it came from. On the server `SitePlan.resolve` reads each label
against the forward that is actually there: the client's labels where the
forward reads as the client's did, else the snapshot store's record of the
server's own release (`instrument.store`, no libcst), else none, and the
values at that module are `Unavailable` saying why (never a guess).
"""

from __future__ import annotations

import hashlib
import inspect
from dataclasses import dataclass
from functools import cache
from typing import Any

import torch
import transformers
from nnsight.intervention.source import STATE

from instrument import installed
from instrument.store import REPOSITORY_STORE, Recorded, StoreError, forward_stem
from instrument.stored import recorded, site_labels

#: A served label -> nnsight's label for the same call in the forward at hand.
Labels = dict[str, str]


@cache
def forward_digest(function: Any) -> str:
    """A digest of a function's source as written (decorators peeled): equal digests, equal nnsight labels."""
    try:
        text = inspect.getsource(inspect.unwrap(function))
    except (OSError, TypeError):
        return ""
    return hashlib.sha256(text.encode()).hexdigest()


def release() -> str:
    """The installed transformers as the snapshot store names releases (``transformers-5.24.0``)."""
    return f"transformers-{transformers.__version__}"


@dataclass(frozen=True)
class PlannedForward:
    """The sites one rule serves on one module, as the client's forward labels them.

    ``stem``: its snapshot file name. ``digest``: `forward_digest` of the target. ``labels``: each site's served
    label -> nnsight's label there. ``drills``: the served labels whose call the rule drills into (the eager kernel,
    a scatter helper); inside a drilled function every site is served under nnsight's own label (no recorded
    release numbers one otherwise), so only the outer labels are mapped.
    """

    stem: str
    digest: str
    labels: Labels
    drills: frozenset[str] = frozenset()


@dataclass(frozen=True)
class SitePlan:
    """Per module path (nnsight's envoy path), the forwards whose sites the client serves there, and its release."""

    forwards: dict[str, tuple[PlannedForward, ...]]
    release: str

    @classmethod
    def of(cls, module: torch.nn.Module, root: Any) -> SitePlan:
        """The plan of the rules installed under ``module``, the model ``root`` wraps."""
        forwards: dict[str, tuple[PlannedForward, ...]] = {}
        for name, part in module.named_modules():
            rules = installed(part)
            if rules:
                forwards[f"{root.path}.{name}" if name else root.path] = tuple(
                    PlannedForward(
                        stem=forward_stem(instrumented.rule.module_name, instrumented.rule.qualname),
                        digest=forward_digest(instrumented.target),
                        labels={site.served_as: site.label for site in instrumented.rewritten.sites},
                        drills=frozenset(instrumented.drills),
                    )
                    for instrumented in rules.values()
                )
        return cls(forwards, release())

    def on_stock_model(self, root: Any) -> bool:
        """Whether ``root`` runs stock modules where this plan has rules: a server's model, which the library never
        rewrote (the envoys travelled; the modules are the server's)."""
        first = next(iter(self.forwards), None)  # one module tells: the library rewrites all or none of them
        module = module_at(root, first) if first is not None else None
        return module is not None and not installed(module)

    def resolve(self, root: Any) -> dict[str, Labels | str]:
        """On a stock model: per module path, the labels of the forward at hand (served label -> nnsight's), or why
        none can be read there; nnsight's ``.source`` of each module with labels is opened, before the model runs."""
        resolved: dict[str, Labels | str] = {}
        for path, planned in self.forwards.items():
            envoy = envoy_at(root, path)
            if envoy is None:
                resolved[path] = f"the model here has no module at {path}"
                continue
            labels: Labels = {}
            reasons = []
            for forward in planned:
                found = server_labels(forward, type(envoy._module).forward, self.release)
                if isinstance(found, str):
                    reasons.append(found)
                else:
                    labels.update(found)
            if reasons and not labels:
                resolved[path] = "; ".join(reasons)
                continue
            open_source(envoy)
            resolved[path] = labels
        return resolved


def server_labels(forward: PlannedForward, function: Any, client_release: str) -> Labels | str:
    """The labels ``forward``'s sites have in ``function``, the forward at hand: the client's where it reads as the
    client's did on the same release; else what the snapshot store records for this release; else why not."""
    here = release()
    if here == client_release and forward_digest(function) == forward.digest:
        return dict(forward.labels)
    recorded = recorded_labels(forward.stem, here)
    if recorded is not None:
        return recorded
    return (
        f"{forward.stem} here ({here}) is not the forward the client's labels came from ({client_release}), and the "
        f"snapshot store has no record of it on {here}: which of its calls each site is cannot be said; run the "
        f"client on {here} (pip install transformers=={here.rpartition('-')[2]}), or record the release (python -m "
        f"maintain.snapshot --update)"
    )


def recorded_labels(stem: str, release_name: str) -> Labels | None:
    """The labels the snapshot store records for forward ``stem`` on ``release_name`` (its sites line), or None."""
    recorded = _store()
    if recorded is None or release_name not in recorded.releases:
        return None
    stored = recorded.path(release_name, f"{stem}")
    if stored is None or not stored.endswith(".py"):
        return None
    try:
        return site_labels((REPOSITORY_STORE / stored).read_text(encoding="utf-8"))
    except ValueError:  # no sites line
        return None


def _store() -> Recorded | None:
    """The snapshot store's manifest, read once per process; None where it cannot be read."""
    try:
        return recorded(REPOSITORY_STORE)
    except StoreError:
        return None


def module_at(root: Any, path: str) -> torch.nn.Module | None:
    """The module at nnsight envoy path ``path`` under ``root``'s model, or None."""
    name = path.removeprefix(root.path).lstrip(".")
    try:
        return root._module.get_submodule(name) if name else root._module
    except AttributeError:
        return None


def envoy_at(root: Any, path: str) -> Any:
    """The envoy at nnsight envoy path ``path`` under ``root``, or None."""
    envoy = root
    for part in path.removeprefix(root.path).lstrip(".").split(".") if path != root.path else ():
        found = next((child for child in envoy._children if child.path == f"{envoy.path}.{part}"), None)
        if found is None:
            return None
        envoy = found
    return envoy


def open_source(envoy: Any) -> None:
    """Open nnsight's ``.source`` on ``envoy``'s module (its forward's every call becomes a site, named as ours are)."""
    state = envoy._module.__dict__.get(STATE)
    if state is None or not state.sourced:
        _ = envoy.source


def relabelled(location: str, labels: Labels) -> str:
    """``location`` (``{module}.source.{label}.{rest}``) with its site's label replaced by ``labels``' entry for it,
    where it has one (a drilled call's inner label is left as it is: `PlannedForward`)."""
    module, marker, rest = location.partition(".source.")
    if not marker:
        return location
    label, dot, tail = rest.partition(".")
    return f"{module}.source.{labels.get(label, label)}{dot}{tail}"


def served_location(envoy: Any, location: str) -> str:
    """``location`` as the forward at hand serves it: on a stock model, a site's served label replaced by nnsight's
    label there (a release that numbers the call otherwise); unchanged elsewhere, and on the library's rewrite."""
    module, marker, _ = location.partition(".source.")
    if not marker:
        return location
    root = getattr(envoy, "root", None)
    resolved = vars(root).get("_stock_sites") if root is not None else None
    labels = resolved.get(module) if resolved is not None else None
    return relabelled(location, labels) if isinstance(labels, dict) else location


def stock_labels(envoy: Any) -> Labels | str | None:
    """On a stock model inside a trace: the labels of ``envoy``'s module (or why it has none); None elsewhere (the
    library's rewrite serves its sites)."""
    resolved = envoy.root.__dict__.get("_stock_sites")
    if resolved is None:
        return None
    return resolved.get(envoy.path, f"the client planned no site on {envoy.path}")
