"""LFM3-VL (model_type lfm3_vl): a packed hybrid tower (gated 2D convolutions and attention per image), a projector
over merge blocks, an LFM3 hybrid text model.

``Lfm3VlModel.forward`` scatters the projected image features into the token
embeddings (``inputs_embeds_masked_scatter_0``, argument 1; ``_1`` is video,
left as it is). The tower (``model.vision_tower``, an `Lfm3Vision`) runs the
Qwen ViT's layout (`envoys.towers.qwen`): every image's patches in one stream
``[patches, vision_hidden_size]``, image after image, each image's in
merge-block order, split by the processor's ``image_grid_thw``. A linear patch
embedding (``patch_embed``; ``patch_embeddings`` is its output) is RMS-normed
(``embedding_norm``, native name: it is before the blocks, not a final norm),
then the blocks (``layers``) run; there is no final norm, so ``tower_output``
is the last block's output, the tower's ``last_hidden_state``.

Each tower block (``Lfm3VlVisionLayer``) holds one token mixer behind
``operator_norm`` (``input_layernorm``) and an MLP (``feed_forward``, standard
``mlp``) behind ``ffn_norm`` (``post_attention_layernorm``), as LFM2's text
blocks do. The mixer is attention (``self_attn``, grouped-query, q/k
RMS-normed, a 2D axial rotary embedding) on a ``full_attention`` block, a
gated depthwise 2D convolution over each image's patch grid (``conv``) on a
``conv`` block (the vision config's ``layer_types``). The attention splits its
queries, keys and values at ``cu_seqlens`` and calls the kernel once per image
under every implementation but flash, the Qwen ViT's forward to the names
(`rewrites.qwen_vit_attention`, rule ``lfm3_vl.vision-attention``; its calls
are inside a for loop), so its interior is `QwenVisionAttention`'s, whole, its
pattern under eager one tensor with each image's call's on the diagonal, and
each call alone at ``kernel_calls[k]`` (`envoys.towers.per_image`). On a
convolution block ``attention_output`` and every
``self_attn.*`` value are Unavailable, naming ``conv`` (`HybridVisionLayer`):
there ``layer_input + conv.output + mlp_output == layer_output``.

The projector (``model.multi_modal_projector``, outside the tower) reads
``tower_output``, LayerNorms each patch, folds each ``spatial_merge_size``
square block (consecutive in merge-block order) into one row and maps it to
the text width with two linear layers, so ``projector.output`` is one row per
image token, image after image, and ``image_features`` is it, as it is.

The text model (``model.language_model``, LFM3) is a hybrid like LFM2's: each
block (``Lfm3DecoderLayer``) holds a gated short convolution (``conv``) on a
``conv`` block or attention (``self_attn``: q/k RMS-normed, rotary, sliding
window on a ``sliding_attention`` block, a sigmoid output gate per head,
``g_proj``, applied after the kernel, so ``attention_head_outputs`` is before
it) on the others, and a SwiGLU MLP (``feed_forward``, ``mlp``); unlike LFM2's
it is sandwich-normed (``use_sandwich_norm``): each sublayer's output is normed
again (``post_operator_norm``, ``post_ffn_norm``) before it joins the stream,
so ``attention_output`` and ``mlp_output`` are those norms' outputs
(`Lfm3Layer`; ``attention_output_norm`` and ``mlp_output_norm`` name them) and
the block identity holds. On a convolution block ``attention_output`` and the
``self_attn.*`` values are Unavailable; what the convolution adds is
``post_operator_norm``'s output. The final norm is ``embedding_norm``
(``norm``). A checkpoint of the text model alone (``lfm3``,
``Lfm3ForCausalLM``) loads with the same text names.
"""

from __future__ import annotations

from transformers.models.lfm3.modeling_lfm3 import Lfm3Attention, Lfm3DecoderLayer, Lfm3MLP
from transformers.models.lfm3_vl.modeling_lfm3_vl import (
    Lfm3VlVisionAttention,
    Lfm3VlVisionLayer,
    Lfm3VlVisionMLP,
    Lfm3VlVisionModel,
)

from ..blocks.hybrid import HybridLayer, HybridVisionLayer, mixer_attention_output, no_softmax_attention
from ..blocks.sandwich import SandwichNorms, post_norm_output, sandwich_stream_values
from ..core.layouts import Hidden, PackedPatches
from ..core.standard import child
from ..core.values import First, value
from ..text.blocks import Attention, Mlp
from ..towers.encoder_names import WRAPPER_RENAME
from ..towers.qwen import QWEN_GRIDS, QwenVision, QwenVisionAttention, tower_output_at
from ..vision.tower import PackedVisionLayer, PackedVisionMlp, as_patches, from_patches, no_images
from . import Family

#: The norms after a text block's sublayers, whose outputs are what they add to the stream.
ATTENTION_POST_NORM = "post_operator_norm"
MLP_POST_NORM = "post_ffn_norm"

#: The token mixer of a convolution block, tower and text.
CONV = {"conv": "a gated short convolution"}

RENAME = {
    **{key: name for key, name in WRAPPER_RENAME.items() if key != "model.language_model.norm"},
    "model.language_model.embedding_norm": "norm",
    "operator_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "feed_forward": "mlp",
    "self_attn.out_proj": "self_attn.o_proj",
}


class Lfm3VisionAttention(QwenVisionAttention):
    """LFM3-VL's tower attention: the Qwen ViT's layout (`QwenVisionAttention`), one kernel call per image;
    ``attention_queries`` and ``attention_keys`` after the q/k norms and the 2D rotary embedding,
    ``attention_scores`` and ``attention_probabilities`` each image's pattern on the diagonal of one tensor under eager
    (`envoys.towers.per_image.BlockDiagonal`), ``kernel_calls[k]`` image ``k``'s call alone."""


class Lfm3VisionLayer(HybridVisionLayer, PackedVisionLayer):
    """An LFM3-VL tower block: attention (``self_attn``) or a gated 2D convolution (``conv``), then the MLP;
    ``layer_input + attention_output + mlp_output == layer_output`` on an attention block, ``conv.output`` in
    ``attention_output``'s place on a convolution block, whose attention values are Unavailable. Packed:
    every value `PackedPatches`, ``[1, patches, vision_hidden_size]``."""

    mixers = {"conv": "a gated 2D convolution over each image's patch grid"}
    attention_output = mixer_attention_output(PackedPatches)


class Lfm3Vision(QwenVision):
    """LFM3-VL's tower: packed (`QwenVision`'s stream, ``[1, patches, vision_hidden_size]``), each image's patches in
    merge-block order, ``patch_embeddings`` the linear patch embedding's output before ``embedding_norm``, no final
    norm; the projector runs after it, so ``tower_output`` is read before ``projector.input``.

    Sizes, off the vision config: ``vision_hidden_size`` (``hidden_size``),
    ``num_heads`` (``num_attention_heads``), ``intermediate_size``,
    ``patch_size``, ``spatial_merge_size``; ``image_size`` is Unavailable (any
    resolution), ``window_index`` too (it attends per image).
    """

    tower_output = value(
        "tower_output", PackedPatches, description="the last block's stream, the projector's input (there is no final norm)",
        key=lambda v: tower_output_at(v)[0], select=lambda v: tower_output_at(v)[1], unavailable=no_images, view=as_patches,
        inverse=from_patches,
        doc="The last block's stream, ``[1, patches, vision_hidden_size]``, image after image, each in merge-block "
        "order: the tower has no final norm, so this is what the projector (``model.projector``, after the tower) "
        "reads. Read it before the projector's values.",
    )

    @property
    def num_heads(self) -> int:
        return self.vision_config.num_attention_heads


class Lfm3Layer(SandwichNorms, HybridLayer):
    """An LFM3 text block: attention (``self_attn``) or a gated short convolution (``conv``), then the MLP, each
    output normed again before it joins the stream.

    ``layer_input + attention_output + mlp_output == layer_output``, each
    ``[batch, seq, hidden_size]``: ``attention_output`` is
    ``post_operator_norm``'s output (Unavailable on a convolution block, whose
    addition is that norm's output too) and ``mlp_output`` is
    ``post_ffn_norm``'s.
    """

    mixers = CONV
    attention_post_norm = ATTENTION_POST_NORM
    mlp_post_norm = MLP_POST_NORM
    mixer_post_norm = ATTENTION_POST_NORM

    layer_input, _, mlp_output, layer_output = sandwich_stream_values(
        Hidden, attention_norm=ATTENTION_POST_NORM, mlp_norm=MLP_POST_NORM
    )
    attention_output = value(
        "attention_output", Hidden, description=f"what the attention adds to the stream (after {ATTENTION_POST_NORM})",
        key=lambda block: f"{child(block, ATTENTION_POST_NORM).path}.output", select=First(), unavailable=no_softmax_attention,
        doc=f"What the attention adds to the stream: its output after ``{ATTENTION_POST_NORM}`` "
        f"(``self_attn.output`` is before that norm), ``{Hidden.shape()}``.",
    )


class Lfm3TextAttention(Attention):
    """An LFM3 attention: ``attention_output`` is what it adds to the stream, after ``post_operator_norm``."""

    attention_output = post_norm_output("attention_output", Hidden, "attention", ATTENTION_POST_NORM)


class Lfm3Mlp(Mlp):
    """An LFM3 MLP: ``mlp_output`` is what it adds to the stream, after ``post_ffn_norm``."""

    mlp_output = post_norm_output("mlp_output", Hidden, "MLP", MLP_POST_NORM)


ENVOYS = {
    Lfm3VlVisionModel: Lfm3Vision,
    Lfm3VlVisionLayer: Lfm3VisionLayer,
    Lfm3VlVisionAttention: Lfm3VisionAttention,
    Lfm3VlVisionMLP: PackedVisionMlp,
    Lfm3DecoderLayer: Lfm3Layer,
    Lfm3Attention: Lfm3TextAttention,
    Lfm3MLP: Lfm3Mlp,
}

FAMILY = Family("lfm3_vl", RENAME, ENVOYS, "model.language_model.layers", text_model_types=("lfm3",),
                grid_layout=QWEN_GRIDS)
