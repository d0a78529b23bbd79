"""Sandwich-norm blocks (Gemma 2, 3 and 4, text and Gemma 4's tower): each sublayer's output is normed again
before it joins the stream.

Such a block computes::

    h   = x + post_attention_layernorm(self_attn(input_layernorm(x)))
    out = h + post_feedforward_layernorm(mlp(pre_feedforward_layernorm(h)))

so what the attention adds to the stream is ``post_attention_layernorm``'s
output, and what the MLP adds is ``post_feedforward_layernorm``'s, not the
sublayers' own outputs. `sandwich_stream_values` serves ``attention_output``
and ``mlp_output`` there, which keeps the block equality of every block,
``layer_input + attention_output + mlp_output == layer_output``, exact (a
block that adds more, Gemma 4's per-layer input, says so). The sublayers' own
outputs, before their post-norms, stay at their native paths
(``layers[i].self_attn.output``, ``layers[i].mlp.output``); the same values
answer on the sublayers too (`post_norm_output`: `SandwichAttention`,
`SandwichMlp`), as on every block.

``input_layernorm`` is what the attention receives, as on every block; the
norm before the MLP keeps its native name, ``pre_feedforward_layernorm``,
because ``post_attention_layernorm`` (the MLP's pre-norm on other blocks) is
this block's own norm of the attention's output: nnsight binds no alias over a
child's own name, and answering that name with another module would make
nnsight's native paths (``model.get(...)``, native reads) reach the wrong
module. `SandwichNorms` adds ``attention_output_norm`` and ``mlp_output_norm``,
the norms after the sublayers under names that say so.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..core.layouts import Hidden
from ..core.standard import child
from ..core.values import Argument, EProperty, First, value
from ..text.blocks import Attention, Layer, Mlp, either, lacks

#: The norm after each sublayer, whose output is what the sublayer adds to the stream.
ATTENTION_POST_NORM = "post_attention_layernorm"
MLP_POST_NORM = "post_feedforward_layernorm"

Gate = Callable[[Any], "str | None"] | None


class SandwichNorms:
    """A sandwich block's norms after its sublayers under names that say what they norm (a mixin for a block's
    envoy): ``attention_output_norm`` (Gemma's native ``post_attention_layernorm``) and ``mlp_output_norm``
    (``post_feedforward_layernorm``), whose outputs are ``attention_output`` and ``mlp_output``. A block that spells
    them otherwise (GLM-4's ``post_self_attn_layernorm`` and ``post_mlp_layernorm``) sets the two class attributes."""

    attention_post_norm: str = ATTENTION_POST_NORM  #: the native name of the norm after the attention
    mlp_post_norm: str = MLP_POST_NORM  #: the native name of the norm after the MLP

    @property
    def attention_output_norm(self) -> Any:
        """The norm of the attention's output (Gemma's own ``post_attention_layernorm``): its output is ``attention_output``."""
        return child(self, self.attention_post_norm)

    @property
    def mlp_output_norm(self) -> Any:
        """The norm of the MLP's output (Gemma's ``post_feedforward_layernorm``): its output is ``mlp_output``."""
        return child(self, self.mlp_post_norm)


def _doc(text: str, layout: type, rows: str) -> str:
    return f"{text}, ``{layout.shape()}``. {rows}".strip()


def sandwich_stream_values(
    layout: type,
    gate: Gate = None,
    rows: str = "",
    attention_norm: str = ATTENTION_POST_NORM,
    mlp_norm: str = MLP_POST_NORM,
    added_gate: Gate = None,
) -> tuple[EProperty, ...]:
    """A sandwich-norm block's stream values in ``layout``: layer_input, attention_output, mlp_output, layer_output.

    ``gate`` is checked before each value's own reason (a tower's `no_images`);
    ``rows`` is added to each docstring (what a row is, how padding shows);
    ``attention_norm`` and ``mlp_norm`` are the norms after the sublayers (a
    block that spells them its own way: HyperCLOVAX's ``post_norm1`` and
    ``post_norm2``); ``added_gate`` is checked before ``attention_output`` and
    ``mlp_output`` only (why the norms' outputs are not what the block adds).
    """
    return (
        value("layer_input", layout, description="the stream entering the block", key="input", select=Argument(0, "hidden_states"),
              unavailable=either(gate, None), doc=_doc("The stream entering the block", layout, rows)),
        value("attention_output", layout, description=f"what the attention adds to the stream (after {attention_norm})",
              key=lambda block: f"{child(block, attention_norm).path}.output", select=First(),
              unavailable=either(gate, either(added_gate, lacks(attention_norm))),
              doc=_doc(f"What the attention adds to the stream: its output after ``{attention_norm}`` "
                       "(``self_attn.output`` is before that norm)", layout, rows)),
        value("mlp_output", layout, description=f"what the MLP adds to the stream (after {mlp_norm})",
              key=lambda block: f"{child(block, mlp_norm).path}.output", select=First(),
              unavailable=either(gate, either(added_gate, lacks(mlp_norm))),
              doc=_doc(f"What the MLP adds to the stream: its output after ``{mlp_norm}`` "
                       "(``mlp.output`` is before that norm)", layout, rows)),
        value("layer_output", layout, description="the stream leaving the block", key="output", select=First(), unavailable=either(gate, None),
              doc=_doc("The stream leaving the block", layout, rows)),
    )


def post_norm_output(name: str, layout: type, what: str, norm: str, gate: Gate = None) -> EProperty:
    """A sublayer's ``name`` value: what it adds to the stream, read at its block's post-norm ``norm``."""
    return value(
        name, layout, description=f"what the {what} adds to the stream (after {norm})",
        key=lambda part: f"{child(part.parent, norm).path}.output", select=First(), unavailable=either(gate, None),
    )


class SandwichLayer(SandwichNorms, Layer):
    """A sandwich-norm text block: ``layer_input + attention_output + mlp_output == layer_output``, each
    ``[batch, seq, hidden_size]``, where ``attention_output`` and ``mlp_output`` are the post-norms' outputs."""

    layer_input, attention_output, mlp_output, layer_output = sandwich_stream_values(Hidden)


class SandwichAttention(Attention):
    """A sandwich-norm block's attention: ``attention_output`` is what it adds to the stream, after
    ``post_attention_layernorm``, the block's ``attention_output``; the interior is `Attention`'s."""

    attention_output = post_norm_output("attention_output", Hidden, "attention", ATTENTION_POST_NORM)


class SandwichMlp(Mlp):
    """A sandwich-norm block's MLP: ``mlp_output`` is what it adds to the stream, after
    ``post_feedforward_layernorm``, the block's ``mlp_output``."""

    mlp_output = post_norm_output("mlp_output", Hidden, "MLP", MLP_POST_NORM)
