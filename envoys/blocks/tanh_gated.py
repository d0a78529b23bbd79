"""Blocks whose sublayers join the stream through a tanh gate: ``stream + tanh(gate) * sublayer``.

Mllama's global tower blocks add ``tanh(gate_attn) * attention`` and
``tanh(gate_ffn) * mlp``; its text model's cross-attention blocks add
``tanh(cross_attn_attn_gate) * cross_attention`` and
``tanh(cross_attn_mlp_gate) * row_mask * mlp``, where the row mask
(``full_text_row_masked_out_mask``, the block's keyword input) is 0 on a text
token that attends to no tile and 1 elsewhere. Each gate's ``tanh`` call is a
site (`rewrites.tanh_gates`), so a block's ``attention_output`` and
``mlp_output`` are what the forward adds to the stream: the sublayer's output
times the gate (and the row mask) as the forward multiplies them, so
``layer_input + attention_output + mlp_output == layer_output`` holds exactly.

Those two are products the forward never names, computed from the values it
does: they are read-only (write the sublayer's own output, before its gate,
or the gate's value ``attention_gate`` / ``mlp_gate``) and have no gradient
of their own (read the sublayer's output's). On a block of the same class
whose gates are off (Mllama's local tower blocks, ``is_gated`` false), they
are the sublayer's output itself, writable, as on any block.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from nnsight.intervention.interleaver import Mediator, OutOfOrderError

from ..core.backends import served_location
from ..core.layouts import Layout
from ..core.standard import child, missing_site, site_label
from ..core.values import Argument, EProperty, First, _label, explained, read_only, value

#: Where each mediator keeps a gated block's keyword inputs, read once per forward (the row mask).
BLOCK_INPUTS = "_tanh_gated_block_inputs"

#: Why a gated term takes no write.
GATED_READ_ONLY = (
    "it is the sublayer's output times its gate as the forward multiplies them, a product the forward never names; "
    "write the sublayer's own output (its .output, before the gate) or the gate (attention_gate / mlp_gate) instead"
)


class GateValue(Layout):
    """[1]: a gate's factor, ``tanh(gate)``, as the forward computes it."""


def gated(block: Any) -> bool:
    """Whether ``block``'s gates are on (a block class that holds gates on some instances only says ``is_gated``)."""
    return bool(getattr(block._module, "is_gated", True))


def gate_location(block: Any, site: str) -> str:
    """The location of the gate's ``tanh`` call in ``block``'s forward."""
    return served_location(block, f"{block.path}.source.{site_label(block, site)}.output")


def block_inputs(block: Any, sublayer: str, if_ahead: bool = False) -> tuple[tuple, dict] | None:
    """The block's ``(args, kwargs)`` in the forward the worker is in, requested once per forward: a later read of the
    same forward (the MLP's term, after the attention's) reuses it. The forward is the one whose call of the block's
    ``sublayer`` comes next (one call a block call). `OutOfOrderError` where the forward already passed the block's
    input and nothing of this block read it (None then, with ``if_ahead``)."""
    location = served_location(block, f"{block.path}.input")
    mediator = Mediator.current(location)
    forward = mediator.wanted(served_location(block, f"{child(block, sublayer).path}.output"))
    cached = vars(mediator).setdefault(BLOCK_INPUTS, {})
    if (location, forward) in cached:
        return cached[(location, forward)]
    if mediator.occurrence(location) > forward:
        if if_ahead:
            return None
        raise OutOfOrderError(
            f"{location!r} (the block's inputs, whose row mask its mlp_output is multiplied by) was requested but the "
            f"model already ran past it; on a cross-attention block read layer_input, attention_output or mlp_output "
            f"before the values inside its sublayers"
        )
    previous, mediator.iteration = mediator.iteration, forward
    try:
        raw = Mediator.value(location)
    finally:
        mediator.iteration = previous
    cached[(location, forward)] = raw
    return raw


class BlockInput(EProperty):
    """``layer_input`` of a block whose masked term reads the block's inputs later in the same forward: the read
    keeps them (`block_inputs`), so ``layer_input`` then ``mlp_output`` both work."""

    def __init__(self, sublayer: str, **eproperty: Any) -> None:
        super().__init__(**eproperty)
        self.sublayer = sublayer

    def _request(self, obj: Any, location: str) -> Any:
        mediator = Mediator.current(location)
        forward = mediator.wanted(served_location(obj, f"{child(obj, self.sublayer).path}.output"))
        raw = super()._request(obj, location)
        vars(mediator).setdefault(BLOCK_INPUTS, {})[(location, forward)] = raw
        return raw


class GatedTerm(EProperty):
    """What one gated sublayer adds to the stream: its output times its gate (times the row mask, ``masked``), as
    the forward multiplies them; read-only. On a block whose gates are off, the sublayer's output (writable)."""

    def __init__(self, sublayer: str, gate_site: str, masked: bool = False, prefetch: bool = False,
                 **eproperty: Any) -> None:
        super().__init__(**eproperty)
        self.sublayer = sublayer
        self.gate_site = gate_site
        self.masked = masked
        self.prefetch = prefetch  # read the block's inputs first, for a masked term read after this one

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        if obj is None or not gated(obj):
            return super().__get__(obj, owner)
        self.check(obj)
        with explained(obj, self.name):
            if self.prefetch:  # for a masked term read after this one, where the block's input is still ahead
                block_inputs(obj, self.sublayer, if_ahead=True)
            mask = block_inputs(obj, self.sublayer)[1].get("full_text_row_masked_out_mask") if self.masked else None
            sublayer = First().get(Mediator.value(served_location(obj, f"{child(obj, self.sublayer).path}.output")))
            gate = Mediator.value(gate_location(obj, self.gate_site))
        if mask is not None:
            sublayer = mask[:, 0] * sublayer
        term = gate * sublayer
        no_gradient = (f"{_label(obj, self.name)} has no gradient: it is computed for you from {self.sublayer}'s "
                       f"output and its gate; read {self.sublayer}.output's")
        return self.handed_out(obj, read_only(term, self._read_only_message(obj), no_gradient))

    def __set__(self, obj: Any, value: Any) -> None:
        if not gated(obj):
            super().__set__(obj, value)
            return
        self.check(obj, writing=True)
        raise AttributeError(self._read_only_message(obj))

    def _read_only_message(self, obj: Any) -> str:
        return f"{super()._read_only_message(obj).rpartition(' is read-only')[0]} is read-only: {GATED_READ_ONLY}"


def gated_term(name: str, layout: type, sublayer: str, gate_site: str, description: str,
               gate: Callable[[Any], str | None] | None = None, masked: bool = False,
               prefetch: bool = False) -> EProperty:
    """A gated block's ``attention_output`` or ``mlp_output`` (`GatedTerm`), in ``layout``: ``masked`` multiplies it
    by the block's row mask; ``prefetch`` reads the block's inputs first, for a masked term read after it."""

    def unavailable(block: Any) -> str | None:
        found = gate(block) if gate is not None else None
        if found is None and child(block, sublayer) is None:
            return f"this block has no {sublayer}"
        if found is None and gated(block):
            found = missing_site(block, gate_site)
        return found

    return value(
        name, layout, description=description, key=lambda block: f"{child(block, sublayer).path}.output",
        select=First(), unavailable=unavailable, kind=partial(GatedTerm, sublayer, gate_site, masked, prefetch),
        doc=f"{description[:1].upper()}{description[1:]}, ``{layout.shape()}``: on a gated block, {sublayer}'s output "
        f"times its gate ``tanh`` as the forward multiplies them{' (and by the row mask)' if masked else ''}, "
        "read-only; on a block whose gates are off, the sublayer's output itself.",
    )


def gate_value(name: str, gate_site: str, what: str, gate: Callable[[Any], str | None] | None = None) -> EProperty:
    """A gate's factor, ``tanh(gate)``, ``[1]``, at its call: writable (what the forward multiplies by)."""

    def unavailable(block: Any) -> str | None:
        found = gate(block) if gate is not None else None
        if found is None and not gated(block):
            return "this block's gates are off (is_gated is false): its sublayers join the stream ungated"
        return found or missing_site(block, gate_site)

    return value(
        name, GateValue, description=f"the factor {what} is multiplied by, tanh of its gate",
        key=lambda block: f"{block.path}.source.{site_label(block, gate_site)}.output", select=None,
        unavailable=unavailable,
    )




def kept_layer_input(layout: type, sublayer: str, gate: Callable[[Any], str | None] | None = None) -> EProperty:
    """A block's ``layer_input`` (`BlockInput`) that keeps the block's inputs for a masked term read later."""
    return value(
        "layer_input", layout, description="the stream entering the block", key="input",
        select=Argument(0, "hidden_states"), unavailable=gate, kind=partial(BlockInput, sublayer),
    )


__all__ = ["BlockInput", "GateValue", "GatedTerm", "gate_value", "gated", "gated_term", "kept_layer_input"]
