"""Blocks whose sublayers join the stream through a tanh gate: ``stream + tanh(gate) * sublayer``.

Mllama's global tower blocks bind ``hidden_states = self.gate_attn.tanh() *
hidden_states`` (and the MLP's with ``gate_ffn``) before adding it to the
stream; its text model's cross-attention blocks add
``self.cross_attn_attn_gate.tanh() * cross_attention`` and
``self.cross_attn_mlp_gate.tanh() * masked_mlp``, where ``masked_mlp`` is the
binding ``hidden_states = full_text_row_masked_out_mask[:, 0] * hidden_states``
(0 on a text token that attends to no tile). The blocks run nnsight's
instrumented body (`envoys.core.bindings.SourcedBlock`), which labels those
assignments and the gates' ``tanh`` calls, so a block's ``attention_output``
and ``mlp_output`` are what the forward adds to the stream and ``layer_input +
attention_output + mlp_output == layer_output`` holds exactly:

- a gated term the forward binds (the tower's) is read at its binding:
  writable, with the gradient of the tensor the stream receives;
- a gated term the forward adds without binding it (the cross-attention
  block's ``tanh(g) * h`` inside ``residual + tanh(g) * h``) is the two values it
  multiplies, read in forward order and multiplied as the forward does:
  read-only, with no gradient of its own (write the sublayer's output, or the
  gate).

``attention_gate`` and ``mlp_gate`` are the factors, ``tanh(gate)``, ``[1]``,
at the ``tanh`` calls: writable. On a block of the same class whose gates are
off (Mllama's local tower blocks, ``is_gated`` false), the terms are the
sublayers' outputs, as on any block, and the gates are `Unavailable`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from nnsight.intervention.interleaver import Mediator

from instrument.calls import label_stem

from ..core.backends import served_location
from ..core.bindings import SourcedBlock, binding_reason, bound_label, label_reason
from ..core.layouts import Layout
from ..core.standard import child
from ..core.values import EProperty, First, _label, explained, read_only, value

#: Why a gated term the forward never binds takes no write.
GATED_READ_ONLY = (
    "it is the sublayer's output times its gate as the forward multiplies them inside the sum it adds to the stream, "
    "a product the forward never binds; write the sublayer's own output (its .output, before the gate) or the gate "
    "(attention_gate / mlp_gate) instead"
)


class GateValue(Layout):
    """[1]: a gate's factor, ``tanh(gate)``, as the forward computes it."""


def gated(block: Any) -> bool:
    """Whether ``block``'s gates are on (a block class that holds gates on some instances only says ``is_gated``)."""
    return bool(getattr(block._module, "is_gated", True))


class GatedBlock(SourcedBlock):
    """A block with tanh gates: it runs nnsight's instrumented body where its gates are on. Mixed in before the
    block's envoy class."""

    def sourced(self) -> bool:
        return gated(self)


def tanh_label(gate: str) -> str:
    """nnsight's label of the gate's one ``tanh`` call: ``self_gate_attn_tanh_0``."""
    return f"{label_stem(f'self.{gate}.tanh')}_0"


def gate_location(block: Any, gate: str) -> str:
    """The location of the gate's ``tanh`` output on ``block``."""
    return f"{block.path}.source.{tanh_label(gate)}.output"


def gated_product(gate: str) -> Any:
    """``self.<gate>.tanh() * anything`` (a libcst matcher)."""
    from libcst import matchers as m

    tanh = m.Call(func=m.Attribute(value=m.Attribute(value=m.Name("self"), attr=m.Name(gate)), attr=m.Name("tanh")))
    return m.BinaryOperation(left=tanh, operator=m.Multiply())


def masked_product(mask: str) -> Any:
    """``<mask>[...] * anything`` (a libcst matcher)."""
    from libcst import matchers as m

    return m.BinaryOperation(left=m.Subscript(value=m.Name(mask)), operator=m.Multiply())


def binding_location(block: Any, matcher: Callable[[], Any], what: str) -> str:
    """The location of the value ``block``'s forward binds where ``matcher`` matches (`bound_label`)."""
    return f"{block.path}.source.{bound_label(type(block._module), matcher, what)}.output"


def bound_term(name: str, layout: type, sublayer: str, gate: str, description: str,
               reason: Callable[[Any], str | None] | None = None) -> EProperty:
    """What a gated sublayer adds to the stream where the forward binds the product (``hidden_states =
    self.<gate>.tanh() * hidden_states``): read and written at that binding; on a block whose gates are off, the
    sublayer's own output."""
    matcher, what = partial(gated_product, gate), f"self.{gate}.tanh() * ..."

    def locate(block: Any) -> str:
        if gated(block):
            return binding_location(block, matcher, what)
        return f"{child(block, sublayer).path}.output"

    def unavailable(block: Any) -> str | None:
        found = reason(block) if reason is not None else None
        return found or (binding_reason(block, matcher, what) if gated(block) else None)

    return value(
        name, layout, description=description, key=locate, select=lambda block: None if gated(block) else First(),
        unavailable=unavailable,
        doc=f"{description[:1].upper()}{description[1:]}, ``{layout.shape()}``: on a gated block, {sublayer}'s output "
        f"times ``tanh({gate})``, as the forward binds it; on a block whose gates are off, {sublayer}'s output.",
    )


class ProductTerm(EProperty):
    """What a gated sublayer adds where the forward multiplies inside a sum without binding the product: its two
    factors read in forward order (the sublayer's output, or a binding of it, then the gate) and multiplied as the
    forward multiplies them; read-only."""

    def __init__(self, factor: Callable[[Any], str], gate: str, **eproperty: Any) -> None:
        super().__init__(**eproperty)
        self.factor = factor  # the location of the gated factor, the forward's right operand
        self.gate = gate

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        if obj is None:
            return self
        self.check(obj)
        with explained(obj, self.name):
            factor = First().get(Mediator.value(served_location(obj, self.factor(obj))))
            gate = Mediator.value(served_location(obj, gate_location(obj, self.gate)))
        no_gradient = (f"{_label(obj, self.name)} has no gradient: it is computed for you from the sublayer's output "
                       f"and its gate; read the sublayer's output's .grad")
        return self.handed_out(obj, read_only(gate * factor, self._read_only_message(obj), no_gradient))

    def __set__(self, obj: Any, value: Any) -> None:
        self.check(obj, writing=True)
        raise AttributeError(self._read_only_message(obj))


def product_term(name: str, layout: type, factor: Callable[[Any], str], gate: str, description: str,
                 reason: Callable[[Any], str | None] | None = None, doc: str = "") -> EProperty:
    """A `ProductTerm`: ``tanh(gate)`` times the value at ``factor(block)`` (a location)."""

    def unavailable(block: Any) -> str | None:
        return (reason(block) if reason is not None else None) or label_reason(block, tanh_label(gate))

    return value(
        name, layout, description=description, key=factor, unavailable=unavailable, read_only=GATED_READ_ONLY,
        kind=partial(ProductTerm, factor, gate), doc=doc or None,
    )


def gate_value(name: str, gate: str, what: str, reason: Callable[[Any], str | None] | None = None) -> EProperty:
    """A gate's factor, ``tanh(gate)``, ``[1]``, at its call: writable (what the forward multiplies by)."""

    def unavailable(block: Any) -> str | None:
        found = reason(block) if reason is not None else None
        if found is None and not gated(block):
            return "this block's gates are off (is_gated is false): its sublayers join the stream ungated"
        return found or label_reason(block, tanh_label(gate))

    return value(
        name, GateValue, description=f"the factor {what} is multiplied by, tanh of its gate",
        key=lambda block: gate_location(block, gate), select=None, unavailable=unavailable,
    )


__all__ = ["GateValue", "GatedBlock", "ProductTerm", "bound_term", "gate_value", "gated", "masked_product",
           "product_term"]
