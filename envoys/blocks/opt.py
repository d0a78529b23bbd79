"""OPT's block (BLIP-2's text model): its MLP runs inline, so the block serves no ``mlp_output``."""

from __future__ import annotations

from typing import Any

from ..core.layouts import Hidden
from ..core.values import value
from ..text.blocks import Layer


def no_inline_mlp(block: Any) -> str:
    return (
        "OPT's block has no MLP module: it runs final_layer_norm, fc1, the activation and fc2 inline, on the tokens "
        "flattened to [batch * seq, hidden_size], so no module's output is what the MLP adds in the stream's shape; "
        "read layers[i].fc2.output and view it as [batch, seq, hidden_size]"
    )


class OptLayer(Layer):
    """An OPT text block (BLIP-2's): ``layer_input``, ``attention_output`` and ``layer_output`` as on any block;
    ``mlp_output`` is Unavailable, the MLP being inline (`no_inline_mlp`)."""

    mlp_output = value("mlp_output", Hidden, description="what the MLP adds to the stream",
                       key=lambda block: f"{block.path}.fc2.output", select=None, unavailable=no_inline_mlp)
