"""A sandwich-normed text block with a per-layer input branch, scaled by its ``layer_scalar`` (Gemma 4's and its kin's)."""

from __future__ import annotations

from typing import Any

from ..core.layouts import Hidden, Layout
from ..core.standard import child
from ..core.values import Argument, value
from .sandwich import SandwichLayer


class PerLayerInput(Layout):
    """[batch, seq, hidden_size_per_layer_input]: the per-layer input a text block receives."""


def no_per_layer_input(block: Any) -> str | None:
    """Why this block has no per-layer input branch, or None."""
    if child(block, "post_per_layer_input_norm") is not None:
        return None
    return (
        "this model has no per-layer inputs (its text config's hidden_size_per_layer_input is 0 or absent), so its blocks "
        "add nothing after the MLP: layer_output == (layer_input + attention_output + mlp_output) * layer_scalar"
    )


class Gemma4TextLayer(SandwichLayer):
    """A Gemma 4 text block: sandwich-normed, with an optional per-layer input branch, scaled by ``layer_scalar``.

    ``attention_output`` and ``mlp_output`` are the outputs of
    ``post_attention_layernorm`` and ``post_feedforward_layernorm`` (on a MoE
    block the MLP's and the experts' sum, normed), ``per_layer_output`` what
    the per-layer input branch adds after them, and the block multiplies the
    sum by its ``layer_scalar`` buffer, so, exactly::

        layer_output == (layer_input + attention_output + mlp_output + per_layer_output) * layer_scalar

    (without per-layer inputs the third term is absent). Each ``[batch, seq,
    hidden_size]``.
    """

    per_layer_input = value(
        "per_layer_input", PerLayerInput, description="the per-layer input this block receives", key="input",
        select=Argument(1, "per_layer_input"), unavailable=no_per_layer_input,
        doc="The per-layer input this block receives, ``[batch, seq, hidden_size_per_layer_input]``: the text model's "
        "per-layer embedding of the tokens (image positions embedded as the pad token) combined with its projection "
        "of the input embeddings, this block's slice.",
    )

    per_layer_output = value(
        "per_layer_output", Hidden, description="what the per-layer input branch adds to the stream",
        key=lambda block: f"{child(block, 'post_per_layer_input_norm').path}.output", select=None, unavailable=no_per_layer_input,
        doc="What the per-layer input branch adds to the stream after the MLP, ``[batch, seq, hidden_size]`` "
        "(``post_per_layer_input_norm``'s output), before the block scales the stream by ``layer_scalar``.",
    )
