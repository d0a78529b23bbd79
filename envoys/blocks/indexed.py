"""Text blocks that hand a sparse-attention indexer's choice on to the next block (Mistral Large 4).

A DeepSeek sparse-attention block returns ``(hidden_states, topk_indices)``:
the stream, and the keys its attention's indexer chose for each query, which
the text model's loop passes to the next block as ``prev_topk_indices`` (a
block whose indexer is ``"shared"`` attends to those keys instead of choosing
its own). The stream values are `Layer`'s, the first item of that output.
"""

from __future__ import annotations

from typing import Any

from ..text.blocks import Layer

#: Why an invoke's text values may differ from its prompt alone on a text model whose attention keeps each query's
#: top keys by an indexer's scores (DeepSeek sparse attention: Mistral Large 4, Dots 3), several invokes in one trace
#: (`Batching.invokes_differ`, `envoys.invokes`).
INDEXER_TOP_K = (
    "its attention keeps each query's top-k keys by an indexer's scores, and a left-padded row's scores are summed "
    "in another order than its prompt's alone: where two keys nearly tie, the choice flips, and that query's "
    "attention output with it (beyond float reassociation); its tower values and image_features are its own, exactly"
)

#: The keyword under which the text model's loop hands a block the previous block's choice of keys.
PREVIOUS_CHOICE = "prev_topk_indices"


class IndexedLayer(Layer):
    """A block returning ``(hidden_states, topk_indices)``; skipped, it passes on both the stream and the choice it got."""

    def skipped_output(self, output: Any) -> tuple[Any, Any]:
        """What the block returns when skipped with ``output`` as its stream: ``(output, the prev_topk_indices it
        received)``, so a later block that reuses a choice gets the one before the skipped block (None before the
        first block)."""
        return output, self.inputs[1].get(PREVIOUS_CHOICE)
