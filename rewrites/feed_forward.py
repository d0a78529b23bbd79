"""A text block whose feed-forward is viewed back into the stream's shape: what it adds to the stream.

Found from the forward's shape (`TEMPLATES`, through `rewrites.found`): a
block forward that calls ``self.feed_forward`` once and ``hidden_states.view``
once. Llama 4's ``Llama4TextDecoderLayer.forward`` has it: it runs
``self.feed_forward`` (a MoE on the layers in ``moe_layers``, a dense MLP on
the others). The MoE flattens the
tokens and returns ``(out [batch * seq, hidden], router_logits)``, so the
module's own output is not the stream's shape; the block adds
``hidden_states.view(residual.shape)`` (``hidden_states_view_0``), whose
output is what the feed-forward adds to the stream, ``[batch, seq, hidden]``,
on either kind of layer.
"""

from .found import Template

#: The block's view of its feed-forward's output in the stream's shape: its output is what the block adds.
FEED_FORWARD_SITE = "hidden_states_view_0"

TEMPLATES = (
    Template(
        "text-block",
        {"hidden_states.view": (FEED_FORWARD_SITE,)},
        "the feed-forward's output (MoE or dense) viewed in the stream's shape, as the block adds it",
        shape={"self.feed_forward": 1},
    ),
)
