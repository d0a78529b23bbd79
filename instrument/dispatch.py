"""The forward an instrumented module runs: the rewritten one while its class still has the function rewritten.

A tool may replace a method on the class for a while: transformers' exporter
swaps the Qwen ViT attentions' ``forward`` for an export-friendly one for the
length of a ``torch.export`` (``exporters/utils.py:apply_patches``). The
rewritten forward lives on the instance, where it would shadow that patch, so
the forward installed is `dispatching`'s: on every call it compares the
class's ``forward`` with the function the rule rewrote and, when they differ,
runs the class's current forward instead. Its sites then do not fire; inside
a trace it says so with a `SitesNotServed` warning, because a value read there
would be missed.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from types import FunctionType
from typing import TYPE_CHECKING, Any

import torch
from nnsight.intervention.source import STATE

if TYPE_CHECKING:
    from .compiler import Instrumented


class SitesNotServed(UserWarning):
    """An instrumented module ran its class's replaced forward inside a trace: its sites did not fire."""


def _tracing(module: torch.nn.Module) -> bool:
    state = module.__dict__.get(STATE)
    return state is not None and state.active()[0] is not None


def _say_not_served(module: torch.nn.Module, instrumented: Instrumented, current: Any) -> None:
    rule = instrumented.rule
    where = f"{getattr(current, '__module__', '?')}.{getattr(current, '__qualname__', current)!s}"
    warnings.warn(
        f"{type(module).__qualname__}.forward is no longer the function the rule {rule.name!r} rewrote: the class's "
        f"forward was replaced (now {where}), so this module runs that one, and the rule's sites "
        f"({', '.join(instrumented.site_names)}) do not fire in this trace; values read at them are missed. "
        "Restore the class's forward (leave the patching tool's context) to read them.",
        SitesNotServed,
        stacklevel=3,
    )


def dispatching(instrumented: Instrumented, rewritten: Callable[..., Any]) -> FunctionType:
    """The forward to install (unbound, called with the module): ``rewritten`` while the module's class has
    ``instrumented.target`` as its ``forward``, else the class's current forward."""
    target = instrumented.target

    @functools.wraps(target)  # the target's signature, which generate() inspects
    def forward(module: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        current = type(module).forward
        if current is not target:
            if _tracing(module):
                _say_not_served(module, instrumented, current)
            return current(module, *args, **kwargs)
        return rewritten(module, *args, **kwargs)

    return forward
