"""HyperCLOVAX Vision v2 (model_type hyperclovax_vision_v2): Qwen2.5-VL's tower, a linear projector, a HyperCLOVAX
text model (Peri-LN blocks, MuP scales).

The tower is a ``Qwen2_5_VisionTransformerPretrainedModel`` at
``model.vision_model`` (a `QwenVision`, as on Qwen2.5-VL: packed, permuted
into attention windows at entry, the kernel called once per window on its
windowed blocks and once per image on ``fullatt_block_indexes``, its merger
inside it, the merge-block order restored after the merger). The merger keeps
its native path, ``vision.merger``: the projector is ``model.projector``, a
linear from the merger's width (``out_hidden_size``) to the text width, which
``get_image_features`` applies to the tower's ``pooler_output`` (the merger's
output in merge-block order). So, unlike Qwen2.5-VL, the projector runs after
the tower: ``tower_output`` is read before ``projector.input``, and
``projector.output`` is in merge-block order (the grids' ``of="projector_output"``
is; ``vision.merger.output`` is in window order). ``HyperCLOVAXVisionV2Model.forward``
scatters the projector's output, split per image and concatenated back
(``inputs_embeds_masked_scatter_0``, argument 1; ``_1`` is video, left as it is).

The text model multiplies the token embeddings, image features included, by
``embedding_multiplier`` before its first block (MuP), so
``layers[0].input[image_token_mask] == image_features * embedding_multiplier``
(the spec's equality where the multiplier is 1); ``image_features`` is what
is scattered, and an edit there reaches the first block scaled. The root
multiplies the head's output by ``logits_scaling``: ``logits`` is after it, and
``project_on_vocab`` applies it too.

A text block is Peri-LN: each sublayer's output is normed again
(``post_norm1`` after the attention, ``post_norm2`` after the MLP) and
multiplied by ``residual_multiplier`` before it joins the stream::

    h   = x + post_norm1(self_attn(input_layernorm(x))) * residual_multiplier
    out = h + post_norm2(mlp(post_attention_layernorm(h))) * residual_multiplier

Where ``residual_multiplier`` is 1 (the config's default), what each sublayer
adds is its post-norm's output, so ``attention_output`` and ``mlp_output`` are
served there (on the block and on the sublayers) and the block identity holds
exactly; ``attention_output_norm`` and ``mlp_output_norm`` name the two norms.
Where it is not 1, both are Unavailable (`scaled_residual`): the product is
made inside the addition, neither a call nor a binding of its own, so no site
holds what the block adds; ``post_norm1.output`` and ``post_norm2.output`` are
the sublayers' normed outputs before the factor. The text model saved alone
(model_type hyperclovax, ``HyperCLOVAXForCausalLM``) loads with the same names.
"""

from __future__ import annotations

from typing import Any

from transformers.models.hyperclovax.modeling_hyperclovax import (
    HyperCLOVAXAttention,
    HyperCLOVAXDecoderLayer,
    HyperCLOVAXMLP,
)

from ..blocks.sandwich import post_norm_output, sandwich_stream_values
from ..core.layouts import Hidden
from ..core.standard import child
from ..text.blocks import Attention, Layer, Mlp
from ..towers.qwen import QWEN_VIT_RENAME, QwenGrids
from . import Family
from .qwen2_5_vl import ENVOYS as QWEN2_5_VL_ENVOYS

#: The norms after the sublayers, whose outputs (times ``residual_multiplier``) are what the block adds.
ATTENTION_POST_NORM = "post_norm1"
MLP_POST_NORM = "post_norm2"

RENAME = {
    **{key: name for key, name in QWEN_VIT_RENAME.items() if not key.startswith("model.visual")},
    "model.vision_model": "vision",
    "model.projector": "projector",
}


def scaled_residual(envoy: Any) -> str | None:
    """Why a HyperCLOVAX block's ``attention_output`` and ``mlp_output`` are unavailable, or None: its sublayers'
    post-norm outputs are multiplied by ``residual_multiplier`` inside the addition to the stream."""
    block = envoy if isinstance(envoy._module, HyperCLOVAXDecoderLayer) else envoy.parent
    multiplier = block._module.residual_multiplier
    if multiplier == 1:
        return None
    return (
        f"this block adds each sublayer's post-norm output times residual_multiplier ({multiplier}) to the stream "
        f"(hidden_states = residual + hidden_states * self.residual_multiplier), a product made inside the addition, "
        f"neither a call nor a binding of its own, so no site holds what the sublayer adds; "
        f"{ATTENTION_POST_NORM}.output and {MLP_POST_NORM}.output are the normed outputs before the multiplier"
    )


class PeriNormLayer(Layer):
    """A HyperCLOVAX text block: ``attention_output`` and ``mlp_output`` are ``post_norm1``'s and ``post_norm2``'s
    outputs, what the block adds where ``residual_multiplier`` is 1 (`scaled_residual` says why not otherwise)."""

    layer_input, attention_output, mlp_output, layer_output = sandwich_stream_values(
        Hidden, attention_norm=ATTENTION_POST_NORM, mlp_norm=MLP_POST_NORM, added_gate=scaled_residual
    )

    @property
    def attention_output_norm(self) -> Any:
        """The norm of the attention's output (``post_norm1``): its output is ``attention_output``."""
        return child(self, ATTENTION_POST_NORM)

    @property
    def mlp_output_norm(self) -> Any:
        """The norm of the MLP's output (``post_norm2``): its output is ``mlp_output``."""
        return child(self, MLP_POST_NORM)


class PeriNormAttention(Attention):
    """A HyperCLOVAX block's attention: ``attention_output`` is the block's, after ``post_norm1``; the interior is
    `Attention`'s (its scores scaled by ``attention_multiplier``, the kernel's ``scaling``)."""

    attention_output = post_norm_output("attention_output", Hidden, "attention", ATTENTION_POST_NORM, scaled_residual)


class PeriNormMlp(Mlp):
    """A HyperCLOVAX block's MLP: ``mlp_output`` is the block's, after ``post_norm2``."""

    mlp_output = post_norm_output("mlp_output", Hidden, "MLP", MLP_POST_NORM, scaled_residual)


ENVOYS = {
    HyperCLOVAXDecoderLayer: PeriNormLayer,
    HyperCLOVAXAttention: PeriNormAttention,
    HyperCLOVAXMLP: PeriNormMlp,
    **QWEN2_5_VL_ENVOYS,
}

FAMILY = Family(
    "hyperclovax_vision_v2", RENAME, ENVOYS, "model.language_model.layers", text_model_types=("hyperclovax",),
    grid_layout=QwenGrids(merger_is_projector=False),
)
