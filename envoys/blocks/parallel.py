"""Parallel blocks (Cohere 2, Aya Vision's and Cohere 2 Vision's text model, Cohere Compass's): the attention and the
MLP both read the one ``input_layernorm``'s output, and the block adds both to its input.

Cohere 2 has sliding-window layers with rotary position embeddings and
global layers without (`CohereAttention`), and a LayerNorm without bias.
"""

from __future__ import annotations

from typing import Any

from transformers.models.cohere2.modeling_cohere2 import Cohere2Attention, Cohere2DecoderLayer

from ..core.standard import child
from ..text.blocks import Attention, Layer


class ParallelLayer(Layer):
    """A Cohere 2 text block, parallel: the attention and the MLP read the same normed input.

    ``hidden = input_layernorm(layer_input)``, then ``layer_output =
    layer_input + self_attn(hidden) + mlp(hidden)``, so ``layer_input +
    attention_output + mlp_output == layer_output`` holds as on a sequential
    block (the MLP does not see the attention's output). The block has one
    norm: ``post_attention_layernorm`` answers as ``input_layernorm``, since
    what the MLP receives is that norm's output.
    """

    @property
    def post_attention_layernorm(self) -> Any:
        """The norm whose output the MLP receives: this block's one norm, ``input_layernorm``."""
        return child(self, "input_layernorm")


class CohereAttention(Attention):
    """A Cohere 2 text block's attention: the interior at the kernel call, causal, sliding-window or global.

    On a sliding layer (``layer_types``) the queries and keys carry rotary
    position embeddings and no query sees a key ``sliding_window`` or more
    positions before it; a global layer applies no position embedding at all,
    so its queries and keys are the projections as they are.
    """


#: The Cohere 2 text model's envoys.
COHERE2_ENVOYS = {Cohere2DecoderLayer: ParallelLayer, Cohere2Attention: CohereAttention}
