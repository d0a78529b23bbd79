"""Hybrid text models: blocks whose token mixer is softmax attention on some layers and something else on others.

Qwen3.5's text model mixes gated DeltaNet blocks (``linear_attn``, linear
attention with a recurrent state) and full-attention blocks (``self_attn``).
A block keeps `Layer`'s values; on a block without ``self_attn`` the values of
the attention it lacks (``attention_output`` and every ``self_attn.*`` value)
are Unavailable, and `HybridLayer.support` says so per block, naming the
mixer the block has instead.
"""

from __future__ import annotations

from typing import Any

from .layouts import Hidden
from .standard import child
from .text import Attention, Layer, value
from .values import First, standard_values

#: The block's token mixers this module knows, other than softmax attention: child name -> what it is.
MIXERS = {"linear_attn": "a gated DeltaNet (linear attention)"}


def no_softmax_attention(block: Any) -> str | None:
    """Why this block has no softmax attention values, or None when it has ``self_attn``."""
    if child(block, "self_attn") is not None:
        return None
    index = block.path.rpartition(".")[2]
    for name, what in MIXERS.items():
        if child(block, name) is not None:
            return (
                f"layers[{index}]'s token mixer is {what}, {name}, not softmax attention, so it has no "
                f"self_attn values; what it adds to the stream is layers[{index}].{name}.output"
            )
    names = ", ".join(c.path.rpartition(".")[2] for c in block._children)
    return f"layers[{index}] has no self_attn (it holds {names})"


class HybridLayer(Layer):
    """A block of a hybrid text model: `Layer`'s values where it has ``self_attn``, the attention's
    Unavailable (with the mixer it has instead) where not."""

    attention_output = value(
        "attention_output", Hidden, "what the attention adds to the stream",
        lambda block: f"{child(block, 'self_attn').path}.output", First(), no_softmax_attention,
    )

    def support(self) -> dict[str, str | None]:
        """This block's values, plus, on a block without ``self_attn``, each attention value with the reason."""
        rows = super().support()
        reason = no_softmax_attention(self)
        if reason is not None:
            rows.update({f"self_attn.{name}": reason for name in standard_values(Attention)})
        return rows
