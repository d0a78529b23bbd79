"""GLM-4's text block (GLM-4.1V's, GLM-4.6V's, GLM-GA's, GLM-OCR's text model): sandwich norms under its own names.

The block norms each sublayer's output before it joins the stream:
``post_self_attn_layernorm`` after the attention and ``post_mlp_layernorm``
after the MLP, while ``post_attention_layernorm`` is, as on a plain block,
the MLP's pre-norm. `GlmLayer` serves the block's ``attention_output`` and
``mlp_output`` at those post-norms (`envoys.blocks.sandwich`), so
``layer_input + attention_output + mlp_output == layer_output`` holds.
"""

from __future__ import annotations

from ..core.layouts import Hidden
from ..text.blocks import Attention, Layer, Mlp
from .sandwich import SandwichNorms, post_norm_output, sandwich_stream_values

#: The native names of GLM-4's norms after the attention and after the MLP (``post_attention_layernorm`` is the MLP's
#: pre-norm, as on a plain block).
ATTENTION_POST_NORM = "post_self_attn_layernorm"
MLP_POST_NORM = "post_mlp_layernorm"



class GlmLayer(SandwichNorms, Layer):
    """A GLM-4 text block: ``layer_input + attention_output + mlp_output == layer_output``, each ``[batch, seq,
    hidden_size]``, where ``attention_output`` is ``post_self_attn_layernorm``'s output and ``mlp_output`` is
    ``post_mlp_layernorm``'s (``attention_output_norm`` and ``mlp_output_norm``); ``post_attention_layernorm`` is the
    MLP's pre-norm, as on a plain block."""

    attention_post_norm = ATTENTION_POST_NORM
    mlp_post_norm = MLP_POST_NORM

    layer_input, attention_output, mlp_output, layer_output = sandwich_stream_values(
        Hidden, attention_norm=ATTENTION_POST_NORM, mlp_norm=MLP_POST_NORM)


class GlmAttention(Attention):
    """A GLM-4 block's attention: ``attention_output`` is what it adds to the stream, after
    ``post_self_attn_layernorm``; the interior is `Attention`'s."""

    attention_output = post_norm_output("attention_output", Hidden, "attention", ATTENTION_POST_NORM)


class GlmMlp(Mlp):
    """A GLM-4 block's MLP (``gate_up_proj`` fused): ``mlp_output`` is what it adds to the stream, after
    ``post_mlp_layernorm``."""

    mlp_output = post_norm_output("mlp_output", Hidden, "MLP", MLP_POST_NORM)


__all__ = ["GlmAttention", "GlmLayer", "GlmMlp"]
