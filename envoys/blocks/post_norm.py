"""Blocks that norm each sublayer's output after it or its input before it, as their config says (Molmo 2's text block).

``Molmo2DecoderLayer`` computes, with the text config's ``norm_after`` off
(pre-norm, as Llama's)::

    h   = x + self_attn(input_layernorm(x))
    out = h + mlp(post_attention_layernorm(h))

and with it on (post-norm, as OLMo 2's)::

    h   = x + input_layernorm(self_attn(x))
    out = h + post_attention_layernorm(mlp(h))

One class, both forms, chosen per checkpoint by the block's own
``norm_after``: `PostNormLayer` serves ``attention_output`` and ``mlp_output``
at the sublayers' outputs on a pre-norm block and at the norms after them on a
post-norm one, so ``layer_input + attention_output + mlp_output ==
layer_output`` holds on both. The sublayers' own outputs stay at their native
paths (``layers[i].self_attn.output``, ``layers[i].mlp.output``); the same values answer on
the sublayers too (`PostNormAttention`, `PostNormMlp`), as on every block.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..core.layouts import Hidden
from ..core.standard import child
from ..core.values import Argument, EProperty, First, value
from ..text.blocks import Attention, Layer, Mlp, lacks

#: The native names of (the sublayer, the norm after it on a post-norm block), for each value a sublayer adds.
ADDED = {"attention_output": ("self_attn", "input_layernorm"), "mlp_output": ("mlp", "post_attention_layernorm")}


def norms_after(block: Any) -> bool:
    """Whether ``block`` norms each sublayer's output (its module's ``norm_after``) rather than its input."""
    return bool(getattr(block._module, "norm_after", False))


def added_at(name: str) -> Callable[[Any], str]:
    """The location of what the sublayer of ``name`` adds to the stream: its output, or its post-norm's."""
    sublayer, norm = ADDED[name]
    return lambda block: f"{child(block, norm if norms_after(block) else sublayer).path}.output"


def added_reason(name: str) -> Callable[[Any], str | None]:
    """Why the block lacks what ``name``'s location needs, or None."""
    sublayer, norm = ADDED[name]
    return lambda block: lacks(norm if norms_after(block) else sublayer)(block)


def added(name: str, what: str) -> EProperty:
    """``attention_output`` or ``mlp_output``: what the sublayer adds, after its norm where the block norms after."""
    sublayer, norm = ADDED[name]
    return value(
        name, Hidden, description=f"what the {what} adds to the stream", key=added_at(name), select=First(),
        unavailable=added_reason(name),
        doc=f"What the {what} adds to the stream, ``{Hidden.shape()}``: ``{sublayer}``'s output, or, on a block "
        f"whose config's ``norm_after`` is on, ``{norm}``'s output after it (``{sublayer}.output`` is before that norm).",
    )


class PostNormLayer(Layer):
    """A text block that norms its sublayers' inputs (pre-norm) or their outputs (``norm_after``):
    ``layer_input + attention_output + mlp_output == layer_output``, each ``[batch, seq, hidden_size]``."""

    layer_input = value("layer_input", Hidden, description="the stream entering the block", key="input",
                        select=Argument(0, "hidden_states"))
    attention_output = added("attention_output", "attention")
    mlp_output = added("mlp_output", "MLP")
    layer_output = value("layer_output", Hidden, description="the stream leaving the block", key="output", select=First())


def part_added(name: str, what: str) -> EProperty:
    """``name`` answered on the sublayer itself: the block's value (`added`), read where the block's is."""
    return value(name, Hidden, description=f"what the {what} adds to the stream",
                 key=lambda part: added_at(name)(part.parent), select=First(),
                 unavailable=lambda part: added_reason(name)(part.parent))


class PostNormAttention(Attention):
    """The attention of a `PostNormLayer`: ``attention_output`` is the block's (after ``input_layernorm`` where the
    block norms after); the interior is `Attention`'s."""

    attention_output = part_added("attention_output", "attention")


class PostNormMlp(Mlp):
    """The MLP of a `PostNormLayer`: ``mlp_output`` is the block's (after ``post_attention_layernorm`` where the
    block norms after)."""

    mlp_output = part_added("mlp_output", "MLP")
