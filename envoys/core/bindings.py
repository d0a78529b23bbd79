"""Values at an assignment of a block's forward: the label nnsight's ``.source`` gives it, and the block that runs
nnsight's instrumented body so that the label is served.

Some values a block adds to its stream are no call's output but a product the
forward binds to a name (InternViT's ``attention_output = self.lambda_1 *
attention_output``; Mllama's ``hidden_states = self.gate_attn.tanh() *
hidden_states``). nnsight's ``.source`` labels every assignment as it labels
calls (``hidden_states_3``), so such a value is read at ``{block}.source.{label}``
once the block runs nnsight's instrumented body. `bound_label` finds the label
on the forward's syntax tree (libcst, loaded when a value is first located, not
at build); `SourcedBlock` installs the instrumented body on the block when its
envoy is built, so the same body runs from the first trace on.
"""

from __future__ import annotations

import inspect
import textwrap
from collections.abc import Callable
from functools import cache
from typing import Any

import torch
from nnsight.intervention.source import install_source

import instrument
from instrument.calls import innermost
from instrument.decorators import UnknownDecorator

from .values import Unavailable


@cache
def named_operations(block_class: type) -> Any:
    """nnsight's labels of every operation of ``block_class.forward`` (`instrument.source_names`), read off its
    syntax tree (libcst, loaded when first asked); `Unavailable` naming the class when its forward cannot be read."""
    try:
        forward = innermost(block_class.forward)  # under transformers' checkpointing wrapper, as nnsight peels it
    except UnknownDecorator as error:
        raise Unavailable(f"{block_class.__qualname__}.forward cannot be read: {error}") from error
    return instrument.source_names(textwrap.dedent(inspect.getsource(forward)))


def label_reason(envoy: Any, label: str) -> str | None:
    """Why the block ``envoy``'s forward, as nnsight's instrumented body runs it, has no operation ``label``, or None
    (a release that renamed or dropped the call it labels)."""
    try:
        labels = named_operations(type(envoy._module)).order
    except Unavailable as error:
        return str(error)
    if label in labels:
        return None
    return (f"{type(envoy._module).__qualname__}.forward has no operation nnsight labels {label}: the block whose "
            f"values are read there has changed in this transformers release")


@cache
def bound_label(block_class: type, matcher: Callable[[], Any], what: str) -> str:
    """nnsight's label of the one assignment in ``block_class.forward`` whose bound value ``matcher()`` matches (a
    libcst matcher, built when first asked); ``what`` spells that value in messages.

    `Unavailable` naming the class when the forward binds no such value, or
    more than one (a release that rewrote the block).
    """
    from libcst import matchers as m

    pattern = matcher()
    found = [label for bound, label in named_operations(block_class).bindings if m.matches(bound, pattern)]
    if len(found) != 1:
        raise Unavailable(
            f"{block_class.__qualname__}.forward binds {what} {len(found)} times (expected once): the block whose "
            f"values are read at that assignment has changed in this transformers release"
        )
    return found[0]


def binding_reason(envoy: Any, matcher: Callable[[], Any], what: str) -> str | None:
    """Why the block ``envoy`` has no binding of ``what`` (`bound_label`'s reason), or None."""
    try:
        bound_label(type(envoy._module), matcher, what)
    except Unavailable as error:
        return str(error)
    return None


class SourcedBlock:
    """A block envoy whose module runs nnsight's instrumented body from its build on (where `sourced` says so), so
    the assignments its values are read at are served. Mixed in before the envoy class."""

    def sourced(self) -> bool:
        """Whether this block's module runs the instrumented body (every instance, by default)."""
        return True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._install_source()

    def __setstate__(self, state: dict) -> None:
        # a copied or unpickled module runs its plain body again (nnsight's State keeps no instrumented body)
        super().__setstate__(state)
        self._install_source()

    def _update(self, module: torch.nn.Module) -> None:
        # the loaded block that replaces a skeleton's at dispatch runs its plain body until sourced again
        super()._update(module)
        self._install_source()

    def _install_source(self) -> None:
        """Run nnsight's instrumented body on this block; installed before any trace, so the forward that runs is the
        same one from the first trace on."""
        if isinstance(self._module, torch.nn.Module) and self.sourced():
            install_source(self)


__all__ = ["SourcedBlock", "binding_reason", "bound_label", "label_reason", "named_operations"]
