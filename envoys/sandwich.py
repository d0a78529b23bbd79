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
(``layers[i].self_attn.output``, ``layers[i].mlp.output``).
"""

from __future__ import annotations

from .layouts import Hidden
from .standard import child
from .text import Layer, lacks, value
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
