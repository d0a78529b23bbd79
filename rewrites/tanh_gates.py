"""Blocks whose sublayers join the stream through a tanh gate: ``stream + tanh(gate) * sublayer``.

Found from the forward's shape (`TEMPLATES`, through `rewrites.found`):

- a cross-attention block, whose forward calls ``self.cross_attn`` and
  ``self.mlp`` once each and each gate's ``tanh`` once
  (``self.cross_attn_attn_gate.tanh()``, then ``self.cross_attn_mlp_gate.tanh()``):
  Mllama's cross-attention layers;
- a gated tower block, whose forward calls ``self.self_attn`` and
  ``self.mlp`` once each and, when its gates are on, ``self.gate_attn.tanh()``
  then ``self.gate_ffn.tanh()``: Mllama's tower blocks (on its global stack).

Each gate's call is a site, so the factor the forward applies is read where
it applies it: its output is ``tanh(gate)``, ``[1]``.
"""

from .found import Template

#: A cross-attention block's gates: the attention's factor, ``tanh(cross_attn_attn_gate)``, and the MLP's.
ATTENTION_GATE_SITE = "self_cross_attn_attn_gate_tanh_0"
MLP_GATE_SITE = "self_cross_attn_mlp_gate_tanh_0"
#: A gated tower block's gates: ``tanh(gate_attn)`` and ``tanh(gate_ffn)``.
BLOCK_ATTENTION_GATE_SITE = "self_gate_attn_tanh_0"
BLOCK_MLP_GATE_SITE = "self_gate_ffn_tanh_0"

CROSS_ATTENTION_GATES = Template(
    "cross-attention-gates",
    {"self.cross_attn_attn_gate.tanh": (ATTENTION_GATE_SITE,), "self.cross_attn_mlp_gate.tanh": (MLP_GATE_SITE,)},
    "the tanh gates a cross-attention block applies to what its cross-attention and its MLP add to the stream",
    shape={"self.cross_attn": 1, "self.mlp": 1},
)

BLOCK_GATES = Template(
    "block-gates",
    {"self.gate_attn.tanh": (BLOCK_ATTENTION_GATE_SITE,), "self.gate_ffn.tanh": (BLOCK_MLP_GATE_SITE,)},
    "the tanh gates a gated block applies to what its attention and its MLP add to the stream",
    shape={"self.self_attn": 1, "self.mlp": 1},
)

TEMPLATES = (CROSS_ATTENTION_GATES, BLOCK_GATES)
