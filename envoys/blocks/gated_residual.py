"""Gated-residual blocks (Muse Spark's text model): each sublayer's normed output joins the stream through a residual
gate that scales the stream and the output per channel.

Such a block computes::

    a   = post_attention_layernorm(self_attn(input_layernorm(x)))
    h   = alpha_a * x + beta_a * a                      # post_attention_residual_gate(x, a)
    m   = post_feedforward_layernorm(mlp(pre_feedforward_layernorm(h)))
    out = alpha_m * h + beta_m * m                      # post_feedforward_residual_gate(h, m)

with ``alpha`` and ``beta`` learned vectors of ``hidden_size`` per gate
(``beta = sigmoid(w)``, ``alpha = sqrt(max(sigmoid(-w) * (1 + beta), eps))``,
``w`` the gate's parameter over its temperature). The stream is rescaled at
every sublayer, so no values make ``layer_input + attention_output +
mlp_output == layer_output`` hold: what the attention adds is ``beta_a * a``
and the stream it adds to is ``alpha_a * x``, products the gate makes inside
the one expression that adds them, which no call site holds. So the identity
is stated with the gates, exactly (the same products and sums, in float32)::

    stream_after_attention == attention_gate.residual_scale * layer_input + attention_gate.output_scale * attention_output
    layer_output == mlp_gate.residual_scale * stream_after_attention + mlp_gate.output_scale * mlp_output

``attention_output`` and ``mlp_output`` are the post-norms' outputs, what
each sublayer hands its gate (the same values answer on the sublayers,
``self_attn.attention_output`` and ``mlp.mlp_output``; the sublayers' own
outputs, before the norms, stay at ``self_attn.output`` and ``mlp.output``);
``stream_after_attention`` is the attention gate's output, the stream the MLP's
norm receives. ``attention_gate`` and ``mlp_gate`` (`ResidualGate`: native
``post_attention_residual_gate`` and ``post_feedforward_residual_gate``) serve
the scales as values, read where the gate computes them (`rewrites.residual_gate`),
``output_scale`` (beta) before ``residual_scale`` (alpha), as the gate's forward
computes them; alpha is computed from beta, so a write to ``output_scale`` moves
``residual_scale`` too, and a write to ``residual_scale`` moves it alone.
``model.support()`` lists them under the gates' native names
(``post_attention_residual_gate.output_scale``, ...).

The identity is the gate's own arithmetic on the values it receives, so it
holds bit for bit on every CPU (elementwise products and one sum a channel).
Why not the other layout: ``attention_output`` and
``mlp_output`` defined as the gated contributions (``beta * normed``) would
not make ``layer_input + attention_output + mlp_output == layer_output`` hold
either, since the stream itself is scaled by ``alpha``; so the identity is
stated with the gates, and the plain sum is not claimed.
"""

from __future__ import annotations

from typing import Any

from rewrites.residual_gate import OUTPUT_SCALE_SITE, RESIDUAL_SCALE_SITE

from ..core.layouts import Hidden, Layout
from ..core.standard import Standard, child, missing_site, site_label
from ..core.values import Argument, First, value
from ..text.blocks import Attention, Layer, Mlp, lacks
from .moe import RoutedMlp

#: The norm after each sublayer, whose output the sublayer's gate receives.
ATTENTION_POST_NORM = "post_attention_layernorm"
MLP_POST_NORM = "post_feedforward_layernorm"
#: The gate after each sublayer.
ATTENTION_GATE = "post_attention_residual_gate"
MLP_GATE = "post_feedforward_residual_gate"


class ChannelScale(Layout):
    """[hidden_size]: one factor per channel of the stream (float32, the gate's own dtype)."""


def _scale(name: str, site: str, what: str, doc: str) -> Any:
    return value(
        name, ChannelScale, description=what,
        key=lambda gate: f"{gate.path}.source.{site_label(gate, site)}.output", select=None,
        unavailable=lambda gate: missing_site(gate, site), doc=doc,
    )


class ResidualGate(Standard):
    """A residual gate (``post_attention_residual_gate``, ``post_feedforward_residual_gate``): its output is
    ``residual_scale * residual + output_scale * sublayer_output``, channel by channel, the stream after its sublayer.

    The scales depend on the gate's parameter alone (the same on every token and every prompt); they are served
    where the gate's forward computes them, so a write changes what the gate adds in this forward.
    """

    output_scale = _scale(
        "output_scale", OUTPUT_SCALE_SITE, "the gate's scale of the sublayer's output (beta)",
        "The gate's scale of its sublayer's normed output, ``[hidden_size]`` (beta, ``sigmoid(gate / temperature)``). "
        "Read before ``residual_scale``, which the gate computes from it: a write here moves both.",
    )
    residual_scale = _scale(
        "residual_scale", RESIDUAL_SCALE_SITE, "the gate's scale of the stream entering its sublayer (alpha)",
        "The gate's scale of the stream that entered its sublayer, ``[hidden_size]`` (alpha, "
        "``sqrt(max(sigmoid(-gate / temperature) * (1 + beta), eps))``). A write here moves alpha alone.",
    )


def _gate_output(block: Any) -> str:
    return f"{child(block, ATTENTION_GATE).path}.output"


def _post_norm(norm: str) -> Any:
    return lambda block: f"{child(block, norm).path}.output"


class GatedResidualLayer(Layer):
    """A gated-residual text block (module docstring): each value ``[batch, seq, hidden_size]``, exactly,

    ``stream_after_attention == attention_gate.residual_scale * layer_input + attention_gate.output_scale *
    attention_output`` and ``layer_output == mlp_gate.residual_scale * stream_after_attention +
    mlp_gate.output_scale * mlp_output``.
    """

    #: the children whose values `support` lists: the sublayers and the gates
    parts = ("self_attn", "mlp", ATTENTION_GATE, MLP_GATE)

    layer_input = value(
        "layer_input", Hidden, description="the stream entering the block", key="input",
        select=Argument(0, "hidden_states"), doc="The stream entering the block, ``[batch, seq, hidden_size]``.",
    )
    attention_output = value(
        "attention_output", Hidden, description=f"the attention's output after {ATTENTION_POST_NORM}, before its gate",
        key=_post_norm(ATTENTION_POST_NORM), select=First(), unavailable=lacks(ATTENTION_POST_NORM),
        doc=f"The attention's output after ``{ATTENTION_POST_NORM}``, ``[batch, seq, hidden_size]``: what it hands its "
        "gate, which adds it to the stream times ``attention_gate.output_scale`` (``self_attn.output`` is before the norm).",
    )
    stream_after_attention = value(
        "stream_after_attention", Hidden, description="the stream leaving the attention's gate, entering the MLP's norm",
        key=_gate_output, select=None, unavailable=lacks(ATTENTION_GATE),
        doc="The stream between the sublayers, ``[batch, seq, hidden_size]``: the attention gate's output, "
        "``attention_gate.residual_scale * layer_input + attention_gate.output_scale * attention_output``.",
    )
    mlp_output = value(
        "mlp_output", Hidden, description=f"the MLP's output after {MLP_POST_NORM}, before its gate",
        key=_post_norm(MLP_POST_NORM), select=First(), unavailable=lacks(MLP_POST_NORM),
        doc=f"The MLP's output after ``{MLP_POST_NORM}``, ``[batch, seq, hidden_size]``: what it hands its gate, which "
        "adds it to the stream times ``mlp_gate.output_scale`` (``mlp.output`` is before the norm).",
    )
    layer_output = value(
        "layer_output", Hidden, description="the stream leaving the block", key="output", select=First(),
        doc="The stream leaving the block, ``[batch, seq, hidden_size]``: the MLP gate's output, "
        "``mlp_gate.residual_scale * stream_after_attention + mlp_gate.output_scale * mlp_output``.",
    )

    @property
    def attention_gate(self) -> Any:
        """The gate after the attention (native ``post_attention_residual_gate``): its scales are `ResidualGate`'s."""
        return child(self, ATTENTION_GATE)

    @property
    def mlp_gate(self) -> Any:
        """The gate after the MLP (native ``post_feedforward_residual_gate``): its scales are `ResidualGate`'s."""
        return child(self, MLP_GATE)


def _handed_to_gate(name: str, what: str, norm: str) -> Any:
    return value(
        name, Hidden, description=f"the {what}'s output after {norm}, before its gate",
        key=lambda part: f"{child(part.parent, norm).path}.output", select=First(),
    )


class GatedResidualAttention(Attention):
    """A gated-residual block's attention: ``attention_output`` is the block's, its output after
    ``post_attention_layernorm``; the interior is `Attention`'s."""

    attention_output = _handed_to_gate("attention_output", "attention", ATTENTION_POST_NORM)


class GatedResidualMlp(Mlp):
    """A gated-residual block's MLP: ``mlp_output`` is the block's, its output after ``post_feedforward_layernorm``."""

    mlp_output = _handed_to_gate("mlp_output", "MLP", MLP_POST_NORM)


class GatedResidualRoutedMlp(GatedResidualMlp, RoutedMlp):
    """A gated-residual block's mixture of experts: ``mlp_output`` after ``post_feedforward_layernorm``, as on a dense
    block, and the router's logits (`envoys.blocks.moe`)."""
