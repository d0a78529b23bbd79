"""The helper every inserted site calls, one per module instance.

``__vlm_site__(label, fn, *args, **kwargs)`` runs ``fn(*args, **kwargs)``.
Outside a trace that is all it does. Inside an nnsight trace of a model that
wraps this module, it hands the call to nnsight's own operation bracket
(`nnsight.intervention.source.run_op`) at
``{the module's envoy path}.source.{label}``: ``.input`` (the call's
``(args, kwargs)``) is served before the call, ``.output`` after it, each
occurrence in turn, and a value written there replaces what the model uses.
That is the location nnsight's ``.source`` op of the same call uses, so values
bound to it work whichever body runs.

Which trace is running is read, on every call, off the state nnsight keeps on
the module (``module.__dict__["__nnsight__"]``, present once an envoy wraps
it); the helper holds the module weakly, so it keeps nothing alive.

A site costs nothing more than the call when nothing can ever ask for it: when
no worker of the running trace is parked anywhere (``interleaver.parked`` is
empty: every worker has finished, since a live one always waits on some
location while the model runs) and no cache observes any location, the call
runs as it is, with no visit to the interleaver. That is an empty trace, and the
rest of a trace once its last read is served. While any worker waits, every
fire is handed to nnsight and counted, even one at a location nobody waits on
now: a worker parked elsewhere may ask for this location later, at an
occurrence (``.next()``, ``tracer.iter``) that the count decides.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping
from types import MethodType
from typing import Any

import torch
from nnsight.intervention.source import STATE, run_op


def site_for(
    module: torch.nn.Module,
    prefix: str = "source",
    substitutes: Mapping[str, tuple[Callable[..., Any], Callable[..., Any]]] | None = None,
) -> Callable[..., Any]:
    """The site helper for a rewritten function running on behalf of ``module``.

    Sites are served at ``{the module's path}.{prefix}.{label}``. ``substitutes``
    maps a label to ``(original, replacement)``: when that site's callee is
    ``original``, ``replacement`` runs in its place (a drilled rule's rewritten
    function, whose own sites use a longer prefix); when it is ``original``
    bound to an object (a method the forward calls, ``self._merge_visual_features``),
    ``replacement`` bound to the same object.
    """
    module_ref = weakref.ref(module)

    def site(label: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        state = module_ref().__dict__.get(STATE)
        if state is not None:
            interleaver, path, _ = state.active()
            if interleaver is not None and (interleaver.parked or interleaver.observers):
                return run_op(interleaver, f"{path}.{prefix}.{label}", fn, args, kwargs)
        return fn(*args, **kwargs)

    if not substitutes:
        return site

    def drilling_site(label: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        substitute = substitutes.get(label)
        if substitute is not None and fn is substitute[0]:
            fn = substitute[1]
        elif substitute is not None and getattr(fn, "__func__", None) is substitute[0]:
            fn = MethodType(substitute[1], fn.__self__)
        return site(label, fn, *args, **kwargs)

    return drilling_site
