"""Gated DeltaNet: the kernel calls of a linear-attention block (Qwen3.5's ``linear_attn``, and its kind).

Found from the forward's shape (`TEMPLATES`, through `rewrites.found`): a
linear-attention block whose forward calls the gated-delta-rule kernels as the
installed release's form of the rule numbers them (the chunked kernel once and
the per-token one once; the per-token one twice from transformers 5.25, both
through the block's attributes before 5.15). Qwen3.5's block reads so, and the
blocks that copy it.

The forward projects and convolves the block's input into queries, keys and
values (``[batch, seq, heads, head_dim]``), computes the decays
(``g = -exp(A_log) * softplus(a + dt_bias)``) and betas (``sigmoid(b)``),
``[batch, seq, value_heads]``, and calls one gated-delta-rule kernel with
``(query, key, value, g=, beta=, initial_state=, output_final_state=, ...)``,
returning ``(output [batch, seq, value_heads, value_head_dim], final state
[batch, value_heads, key_head_dim, value_head_dim] or None)``:

- ``torch_chunk_gated_delta_rule_0``: the chunked kernel, on a forward that
  does not continue a cached state with one token (a prompt pass; every step
  of a generation without a cache);
- ``torch_recurrent_gated_delta_rule_0``: the per-token kernel, on a
  single-token forward against the cached state (a decode step).

One of the two runs per forward. The final state is asked for only when the
forward has a cache (``output_final_state=cache is not None``).

From transformers 5.25 a prompt pass whose cache keeps the recurrent states
of its last n tokens (``cache.get_recurrent_states_to_keep``, 0 unless a
caller asks) runs the chunked kernel on the first ``seq - n`` tokens, then the
per-token kernel once per kept token, in a loop, from the chunk's final state
(``torch_recurrent_gated_delta_rule_1``, `KEPT_STATES_SITE`; `FROM_5_25`).
With no state kept, that loop does not run and the chunk call takes every token.

Before transformers 5.15 the block calls the kernels through attributes
(``self.chunk_gated_delta_rule``, ``self.recurrent_gated_delta_rule``: the
fla kernels when installed, else the torch ones) with the same arguments;
those calls are served under the same labels (`BEFORE_5_15`). Before 5.23
the block, not the kernel, repeats the queries and keys to the value heads,
so there they arrive at the call ``[batch, seq, value_heads, key_head_dim]``.
"""

from instrument import Variant

from .found import Template

CHUNK_SITE = "torch_chunk_gated_delta_rule_0"
RECURRENT_SITE = "torch_recurrent_gated_delta_rule_0"

SITES = {
    "torch_chunk_gated_delta_rule": (CHUNK_SITE,),
    "torch_recurrent_gated_delta_rule": (RECURRENT_SITE,),
}


BEFORE_5_15 = Variant(
    "<5.15",
    sites={
        "self.chunk_gated_delta_rule": ("self_chunk_gated_delta_rule_0",),
        "self.recurrent_gated_delta_rule": ("self_recurrent_gated_delta_rule_0",),
    },
    serve_as={"self_chunk_gated_delta_rule_0": CHUNK_SITE, "self_recurrent_gated_delta_rule_0": RECURRENT_SITE},
    note="the kernels are called through the block's attributes (fla's when installed, else torch's)",
)


#: From 5.25: the per-token kernel once per token whose recurrent state the cache keeps, after the chunk call.
KEPT_STATES_SITE = "torch_recurrent_gated_delta_rule_1"

FROM_5_25 = Variant(
    ">=5.25",
    sites={
        "torch_chunk_gated_delta_rule": (CHUNK_SITE,),
        "torch_recurrent_gated_delta_rule": (RECURRENT_SITE, KEPT_STATES_SITE),
    },
    note="a prompt pass runs the per-token kernel after the chunk call for each token whose state the cache keeps",
)


DELTANET = Template(
    "gated-deltanet", SITES,
    "the gated delta rule kernel calls: queries, keys, values, decays, betas in; output and recurrent state out",
    variants=(BEFORE_5_15, FROM_5_25),
)

TEMPLATES = (DELTANET,)
