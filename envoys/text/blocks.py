"""The text model's standard envoys: a block, its attention, its MLP.

A block (`Layer`) is pre-norm attention + MLP on a residual stream, so
``layer_input + attention_output + mlp_output == layer_output`` exactly. The
attention interior is read at the attention kernel's call site
(``attention_interface_1``, exposed by the rewrite rules) and, under eager
attention, inside the eager kernel at its softmax
(``...attention_interface_1.source.nn_functional_softmax_0``): nnsight's own
``.source`` names for both.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nnsight.intervention.source import STATE

from instrument import installed
from rewrites.attention import KERNEL_SITE, SOFTMAX_SITE

from ..core.backends import stock_labels
from ..core.layouts import HeadOutputs, Hidden, Keys, Pattern, Queries, Values
from ..core.standard import Standard, child, missing_site, op_label, site_label
from ..core.values import Argument, EProperty, First, Inverse, View, value


def lacks(name: str) -> Callable[[Any], str | None]:
    """An unavailability check: why a block has no child ``name``, or None when it has one."""

    def reason(block: Any) -> str | None:
        if child(block, name) is not None:
            return None
        names = ", ".join(c.path.rpartition(".")[2] for c in block._children)
        return f"this block has no {name} (it holds {names})"

    return reason


def either(gate: Callable[[Any], str | None] | None, reason: Callable[[Any], str | None] | None) -> Any:
    """An unavailability check: ``gate``'s reason first, then ``reason``'s (either may be None)."""
    checks = [check for check in (gate, reason) if check is not None]
    if not checks:
        return None

    def check(envoy: Any) -> str | None:
        return next((found for found in (c(envoy) for c in checks) if found is not None), None)

    return check


def stream_values(
    layout: type,
    gate: Callable[[Any], str | None] | None = None,
    view: View | None = None,
    inverse: Inverse | None = None,
) -> tuple[EProperty, ...]:
    """A block's stream values in ``layout``: layer_input, attention_output, mlp_output, layer_output.

    ``gate`` is checked before each value's own reason (the tower's `no_images`);
    ``view`` and ``inverse`` map the module's tensors to the layout and back
    (a packed tower's leading 1).
    """
    shape = {"view": view, "inverse": inverse}
    return (
        value("layer_input", layout, description="the stream entering the block", key="input", select=Argument(0, "hidden_states"),
              unavailable=either(gate, None), **shape),
        value("attention_output", layout, description="what the attention adds to the stream",
              key=lambda block: f"{child(block, 'self_attn').path}.output", select=First(), unavailable=either(gate, lacks("self_attn")), **shape),
        value("mlp_output", layout, description="what the MLP adds to the stream",
              key=lambda block: f"{child(block, 'mlp').path}.output", select=First(), unavailable=either(gate, lacks("mlp")), **shape),
        value("layer_output", layout, description="the stream leaving the block", key="output", select=First(),
              unavailable=either(gate, None), **shape),
    )


def own_output(
    name: str,
    layout: type,
    description: str,
    gate: Callable[[Any], str | None] | None = None,
    view: View | None = None,
    inverse: Inverse | None = None,
) -> EProperty:
    """A block part's own output (its first item where it returns a tuple), answered on the part itself:
    ``self_attn.attention_output`` and ``mlp.mlp_output`` are the block's ``attention_output`` and ``mlp_output``."""
    return value(name, layout, description=description, key="output", select=First(), unavailable=either(gate, None), view=view, inverse=inverse)


class Layer(Standard):
    """A text block: ``layer_input + attention_output + mlp_output == layer_output``, each ``[batch, seq, hidden_size]``."""

    layer_input, attention_output, mlp_output, layer_output = stream_values(Hidden)


def kernel(attention: Any) -> str:
    """The location of the attention kernel's call on ``attention`` (at nnsight's label once its ``.source`` is open)."""
    return f"{attention.path}.source.{site_label(attention, KERNEL_SITE)}"


def no_kernel_site(attention: Any) -> str | None:
    """Why the attention kernel's call is not served on this module, or None."""
    return missing_site(attention, KERNEL_SITE)


def not_eager(attention: Any) -> str | None:
    """Why the eager kernel's scores and probabilities are not served here, or None."""
    return eager_only(attention, no_kernel_site(attention))


def eager_only(attention: Any, missing: str | None, calls: str = "") -> str | None:
    """Why scores and probabilities formed inside the eager kernel are not served on ``attention``, or None:
    ``missing`` (why the calls they are read at are not served), else the implementation the model runs (``calls``
    says how the attention calls the kernel), else no rule drilling into the kernel."""
    if missing is not None:
        return missing
    implementation = getattr(attention._module.config, "_attn_implementation", None)
    if implementation != "eager":
        return (
            f"the scores and probabilities exist only inside eager attention{calls}, and this model runs "
            f"{implementation!r}: load it with attn_implementation='eager'"
        )
    if not drills_into_kernel(attention):
        return f"no rewrite rule drills into {type(attention._module).__qualname__}'s eager kernel"
    return None


def drills_into_kernel(attention: Any) -> bool:
    """Whether a rule drills into ``attention``'s eager kernel: one installed on its module, or, on a server's stock
    module, one the client planned there (`envoys.core.backends`)."""
    if any(i.drills for i in installed(attention._module).values()):
        return True
    plan = attention.root.__dict__.get("site_plan")
    return stock_labels(attention) is not None and plan is not None and any(
        forward.drills for forward in plan.forwards.get(attention.path, ()))


def softmax(attention: Any) -> str:
    """The location of the softmax call inside the eager kernel, under the kernel's site."""
    return f"{kernel(attention)}.source.{SOFTMAX_SITE}"


def drill_if_sourced(attention: Any, label: str = KERNEL_SITE) -> None:
    """Ask nnsight to drill into the kernel (the call served as ``label``) when its own ``.source`` body runs this
    module.

    A module whose ``.source`` a user opened runs nnsight's instrumented body,
    which serves the same site names but does not drill into the eager kernel
    by itself; nnsight's own drill (``.source`` of the kernel's op) puts the
    softmax at the same location the rewritten body uses.
    """
    state = attention._module.__dict__.get(STATE)
    if state is not None and state.sourced:
        _ = getattr(attention.source, op_label(attention, label)).source


def interior_values(rows: str, gate: Callable[[Any], str | None] | None = None) -> tuple[EProperty, ...]:
    """The attention interior at the kernel call; ``rows`` names the batch axis (``batch`` or ``images``).

    In order: queries, keys, values, scores, probabilities, head outputs.
    """
    return (
        value(
            "attention_queries", Queries, description=f"the queries the kernel receives, one row per {rows}",
            key=lambda a: f"{kernel(a)}.input", select=Argument(1, "query"), unavailable=either(gate, no_kernel_site),
        ),
        value(
            "attention_keys", Keys, description=f"the keys the kernel receives, one row per {rows}",
            key=lambda a: f"{kernel(a)}.input", select=Argument(2, "key"), unavailable=either(gate, no_kernel_site),
        ),
        value(
            "attention_values", Values, description=f"the values the kernel receives, one row per {rows}",
            key=lambda a: f"{kernel(a)}.input", select=Argument(3, "value"), unavailable=either(gate, no_kernel_site),
        ),
        value(
            "attention_scores", Pattern, description="the scores entering the softmax, mask added",
            key=lambda a: f"{softmax(a)}.input", select=Argument(0, "input"), unavailable=either(gate, not_eager), prepare=drill_if_sourced,
        ),
        value(
            "attention_probabilities", Pattern, description="the softmax's output, before it weights the values",
            key=lambda a: f"{softmax(a)}.output", select=None, unavailable=either(gate, not_eager), prepare=drill_if_sourced,
        ),
        value(
            "attention_head_outputs", HeadOutputs, description="each head's output, before the output projection",
            key=lambda a: f"{kernel(a)}.output", select=First(), unavailable=either(gate, no_kernel_site),
        ),
    )


class Attention(Standard):
    """A text block's attention: its output, and its interior at the kernel call (causal)."""

    attention_output = own_output("attention_output", Hidden, "what the attention adds to the stream")

    (
        attention_queries,
        attention_keys,
        attention_values,
        attention_scores,
        attention_probabilities,
        attention_head_outputs,
    ) = interior_values("sequence")


class Mlp(Standard):
    """A block's MLP: ``mlp_output`` is what it adds to the stream (the block's ``mlp_output``)."""

    mlp_output = own_output("mlp_output", Hidden, "what the MLP adds to the stream")


class TextModel(Standard):
    """The text model (embeddings, blocks, final norm); its values are on the root and the blocks."""
