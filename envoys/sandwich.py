"""Sandwich-norm text blocks (Gemma 2, 3 and 4): each sublayer's output is normed again before it joins the stream.

Such a block computes::

    h   = x + post_attention_layernorm(self_attn(input_layernorm(x)))
    out = h + post_feedforward_layernorm(mlp(pre_feedforward_layernorm(h)))

so what the attention adds to the stream is ``post_attention_layernorm``'s
output, and what the MLP adds is ``post_feedforward_layernorm``'s, not the
sublayers' own outputs. `SandwichLayer` serves ``attention_output`` and
``mlp_output`` there, which keeps the block equality of every text block,
``layer_input + attention_output + mlp_output == layer_output``, exact. The
sublayers' own outputs, before their post-norms, stay at their native paths
(``layers[i].self_attn.output``, ``layers[i].mlp.output``); the same values
answer on the sublayers too (`SandwichAttention.attention_output`,
`SandwichMlp.mlp_output`), as on every block.

The MLP's pre-norm keeps its native name, ``pre_feedforward_layernorm``: the
name ``post_attention_layernorm``, the MLP's pre-norm on other blocks, is this
block's norm of the attention's output, and nnsight binds no alias over a
child's own name.
"""

from __future__ import annotations

from .layouts import Hidden
from .standard import child
from .text import Attention, Layer, Mlp, lacks, value
from .values import First

#: The norm after each sublayer, whose output is what the sublayer adds to the stream.
ATTENTION_POST_NORM = "post_attention_layernorm"
MLP_POST_NORM = "post_feedforward_layernorm"


class SandwichLayer(Layer):
    """A sandwich-norm text block: ``layer_input + attention_output + mlp_output == layer_output``, each
    ``[batch, seq, hidden_size]``, where ``attention_output`` and ``mlp_output`` are the post-norms' outputs."""

    attention_output = value(
        "attention_output", Hidden, "what the attention adds to the stream (after post_attention_layernorm)",
        lambda block: f"{child(block, ATTENTION_POST_NORM).path}.output", First(), lacks(ATTENTION_POST_NORM),
    )
    mlp_output = value(
        "mlp_output", Hidden, "what the MLP adds to the stream (after post_feedforward_layernorm)",
        lambda block: f"{child(block, MLP_POST_NORM).path}.output", First(), lacks(MLP_POST_NORM),
    )


def _post_norm(name: str) -> str:
    """``name``'s output location, from a sublayer: its block's post-norm ``name``."""
    return lambda part: f"{child(part.parent, name).path}.output"


class SandwichAttention(Attention):
    """A sandwich-norm block's attention: ``attention_output`` is what it adds to the stream, after
    ``post_attention_layernorm``, the block's ``attention_output``; the interior is `Attention`'s."""

    attention_output = value(
        "attention_output", Hidden, "what the attention adds to the stream (after post_attention_layernorm)",
        _post_norm(ATTENTION_POST_NORM), First(),
    )


class SandwichMlp(Mlp):
    """A sandwich-norm block's MLP: ``mlp_output`` is what it adds to the stream, after
    ``post_feedforward_layernorm``, the block's ``mlp_output``."""

    mlp_output = value(
        "mlp_output", Hidden, "what the MLP adds to the stream (after post_feedforward_layernorm)",
        _post_norm(MLP_POST_NORM), First(),
    )
