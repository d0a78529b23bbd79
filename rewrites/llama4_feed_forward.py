"""Llama 4's text block: what its feed-forward adds to the stream, in the stream's shape.

``Llama4TextDecoderLayer.forward`` runs ``self.feed_forward`` (a MoE on the
layers in ``moe_layers``, a dense MLP on the others). The MoE flattens the
tokens and returns ``(out [batch * seq, hidden], router_logits)``, so the
module's own output is not the stream's shape; the block adds
``hidden_states.view(residual.shape)`` (``hidden_states_view_0``), whose
output is what the feed-forward adds to the stream, ``[batch, seq, hidden]``,
on either kind of layer.
"""

from instrument import Rule

#: The block's view of its feed-forward's output in the stream's shape: its output is what the block adds.
FEED_FORWARD_SITE = "hidden_states_view_0"

RULES = (
    Rule(
        "llama4.text-block",
        "transformers.models.llama4.modeling_llama4:Llama4TextDecoderLayer.forward",
        {"hidden_states.view": (FEED_FORWARD_SITE,)},
        "the feed-forward's output (MoE or dense) viewed in the stream's shape, as the block adds it",
    ),
)
