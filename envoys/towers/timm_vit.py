"""A timm vision transformer inside transformers' ``TimmWrapperModel``: PerceptionLM's Perception Encoder.

The wrapper (``model.vision``) holds timm's model at ``timm_model``: an
``Eva`` built with ``attn_type='rope'`` (timm's ``vit_pe_*``). Its
``forward_features`` embeds each tile with ``patch_embed`` (a convolution,
flattened: ``[tiles, patches, vision_hidden_size]``), puts a CLS token first and
adds an absolute position embedding, applies ``norm_pre``, runs its
``blocks`` with a 2D rotary embedding passed to each, and ends with ``norm``
(an identity where the tower has no final norm, as PerceptionLM's, built with
``use_post_transformer_norm=False``); that is the wrapper's
``last_hidden_state`` (``tower_output``, ``[tiles, 1 + patches,
vision_hidden_size]``, the CLS row first).

A block (``EvaBlock``) is pre-norm: ``x + drop_path1(gamma_1 * attn(norm1(x)))``,
then the MLP alike, the layer scales ``gamma_1`` and ``gamma_2`` where the
tower has them (PerceptionLM's does: ``init_values``) and the drop paths
identities in eval. So the standard identity ``layer_input + attention_output
+ mlp_output == layer_output`` holds with ``attention_output`` and
``mlp_output`` read at the drop paths' outputs, after the layer scales.

The attention (``timm.layers.attention.AttentionRope``) is not on
transformers' shared interface: timm chooses its kernel per instance, by the
module's ``fused_attn``: torch's fused kernel, or the eager one inline.
transformers does not pass ``attn_implementation`` on to timm (it warns so);
this library does (`envoys.towers.timm_eager`): on a model loaded with
``attn_implementation="eager"`` every timm module of the tower runs its eager
branch, set on each instance (another model, or timm's global default, is
left as it was). Under any other implementation the fused kernel runs, and
the scores and probabilities are `Unavailable`, saying to load eager.

Its interior (`TimmRopeAttention`), in the forward's order: the values are
part 2 of the ``qkv`` linear's output (read first: the projection runs before
the rotary embedding); the queries and keys are what the two ``torch.cat``
calls return after rotating every row but the CLS row (the sites
`rewrites.timm_attention.QUERIES_SITE` and ``KEYS_SITE``); the scores are the
output of ``maybe_add_mask`` on the eager branch (the scaled products; no mask
is given), the probabilities the output of ``attn.softmax``; the head outputs
what the attention's ``norm`` (an identity unless the tower normalises them)
receives, the heads joined.
"""

from __future__ import annotations

from typing import Any

import torch
from timm.layers.attention import AttentionRope
from timm.layers.mlp import Mlp
from timm.models.eva import EvaBlock
from transformers import TimmWrapperModel
from transformers.models.timm_wrapper.modeling_timm_wrapper import TimmWrapperPreTrainedModel

from rewrites.timm_attention import KEYS_SITE, QUERIES_SITE, SCORES_SITE, SOFTMAX_SITE

from ..core.backends import stock_labels
from ..core.layouts import HeadOutputs, Keys, Patches, Pattern, Queries, Values
from ..core.standard import child, missing_site
from ..core.values import Argument, EProperty, value
from ..text.blocks import either
from ..vision.tower import Vision, VisionAttention, VisionLayer, VisionMlp, no_images, no_patch_embed, norm_output


def timm_model(envoy: Any) -> torch.nn.Module:
    """The timm model of the tower ``envoy`` belongs to (an attention's, a block's, or the tower's own)."""
    module = envoy._module
    for tower in envoy.root._module.modules():
        if isinstance(tower, TimmWrapperPreTrainedModel) and any(part is module for part in tower.modules()):
            return tower.timm_model
    raise LookupError(f"{type(module).__qualname__} is in no TimmWrapper tower")


def no_rotary(attention: Any) -> str | None:
    """Why the queries and keys after the rotary embedding are not served, or None: the tower passes no ``rope``."""
    if getattr(timm_model(attention), "rope", None) is None:
        return "this timm tower has no rotary embedding (its rope is None), so no call forms the rotated queries and keys"
    return None


def fused(attention: Any) -> str | None:
    """Why the eager branch's scores and probabilities are not served, or None: the module runs the fused kernel (on
    a server's stock model, the server's module, which this library did not load)."""
    if not attention._module.fused_attn:
        return None
    ran = ("the scores and probabilities exist only on timm's eager branch, and this attention runs torch's fused "
           "kernel (its fused_attn is set)")
    if stock_labels(attention) is not None:  # a server's stock model: loaded without this library
        return (f"{ran}: a stock model keeps timm's choice whatever attn_implementation it was loaded with "
                "(transformers does not pass it on to timm); the pattern needs a model this library loads with "
                "attn_implementation='eager'")
    return f"{ran}; load the model with attn_implementation='eager', which this library passes on to the timm tower"


def site(name: str) -> Any:
    """Why ``name``, a site of the attention's rule, is not served on an attention envoy, or None."""
    return lambda attention: missing_site(attention, name)


def split_qkv(attention: Any, projected: torch.Tensor) -> torch.Tensor:
    """The ``qkv`` linear's output ``[tiles, tokens, 3 * heads * head_dim]`` as ``[3, tiles, heads, tokens, head_dim]``:
    a view, as the forward splits it."""
    module = attention._module
    rows, tokens, _ = projected.shape
    return projected.reshape(rows, tokens, 3, module.num_heads, module.head_dim).permute(2, 0, 3, 1, 4)


def with_values(attention: Any, written: torch.Tensor, current: torch.Tensor) -> torch.Tensor:
    """The ``qkv`` linear's output with its values part replaced by ``written``."""
    whole = current.clone()
    split_qkv(attention, whole)[2] = written
    return whole


def no_fused_qkv(attention: Any) -> str | None:
    """Why the values are not served, or None: the attention projects with separate linears (no ``qkv``)."""
    if child(attention, "qkv") is None or attention._module.qkv is None:
        return "this timm attention projects queries, keys and values apart (no fused qkv linear)"
    return None


def heads_apart(attention: Any, joined: torch.Tensor) -> torch.Tensor:
    """The heads joined, ``[tiles, tokens, heads * head_dim]``, as ``[tiles, tokens, heads, head_dim]`` (a view)."""
    return joined.unflatten(-1, (attention._module.num_heads, -1))


def reshaped_back(attention: Any, written: torch.Tensor, current: torch.Tensor) -> torch.Tensor:
    """A written value in the shape of the module's own tensor ``current``."""
    return written.reshape(current.shape)


def site_output(name: str) -> Any:
    """The location of the output of the attention's site ``name``."""
    return lambda attention: f"{attention.path}.source.{name}.output"


def added(block: Any, which: int) -> str:
    """Where what sublayer ``which`` (1 the attention, 2 the MLP) adds to ``block``'s stream is: its drop path's output
    (an identity in eval), after the layer scale (``gamma_1``, ``gamma_2``) where the block has one."""
    return f"{child(block, f'drop_path{which}').path}.output"


ADDED_DOC = (
    "What the {part} adds to the block's stream, ``[tiles, tokens, vision_hidden_size]``: its output times the layer "
    "scale ``gamma_{which}`` where the block has one (PerceptionLM's Perception Encoder does), read at ``drop_path{which}`` "
    "(an identity in eval). Assign or edit in place."
)


class TimmRopeAttention(VisionAttention):
    """timm's rotary attention (``AttentionRope``): queries and keys after the rotary embedding, the eager branch's
    pattern, one row per tile, no mask; ``tokens`` below is a tile's CLS row and patches."""

    attention_output = value(
        "attention_output", Patches, description="what the attention adds to the stream, after the layer scale",
        key=lambda attention: added(attention.parent, 1), unavailable=no_images,
        doc=ADDED_DOC.format(part="attention", which=1),
    )

    attention_values = value(
        "attention_values", Values, description="the values", shape="[tiles, heads, tokens, head_dim]",
        key=lambda a: f"{child(a, 'qkv').path}.output", unavailable=either(no_images, no_fused_qkv),
        view=lambda attention, projected: split_qkv(attention, projected)[2], inverse=with_values, needs_envoy=True,
        doc="The values, ``[tiles, heads, tokens, head_dim]``: part 2 of the ``qkv`` linear's output, a view. Read "
        "before the queries and keys (the projection runs before the rotary embedding); assign or edit in place.",
    )
    attention_queries = value(
        "attention_queries", Queries, description="the queries after the rotary embedding",
        shape="[tiles, heads, tokens, head_dim]", key=site_output(QUERIES_SITE),
        unavailable=either(no_images, either(site(QUERIES_SITE), no_rotary)),
        doc="The queries, ``[tiles, heads, tokens, head_dim]``, after the rotary embedding (the CLS row unrotated), "
        "before the eager branch scales them; assign or edit in place.",
    )
    attention_keys = value(
        "attention_keys", Keys, description="the keys after the rotary embedding", shape="[tiles, heads, tokens, head_dim]",
        key=site_output(KEYS_SITE), unavailable=either(no_images, either(site(KEYS_SITE), no_rotary)),
        doc="The keys, ``[tiles, heads, tokens, head_dim]``, after the rotary embedding (the CLS row unrotated); "
        "assign or edit in place.",
    )
    attention_scores = value(
        "attention_scores", Pattern, description="the scores entering the softmax", shape="[tiles, heads, tokens, tokens]",
        key=site_output(SCORES_SITE), unavailable=either(no_images, either(site(SCORES_SITE), fused)),
        doc="The scores entering the softmax, ``[tiles, heads, tokens, tokens]``: the queries times ``scale`` times "
        "the keys (no mask). Eager only; assign or edit in place.",
    )
    attention_probabilities = value(
        "attention_probabilities", Pattern, description="the softmax's output", shape="[tiles, heads, tokens, tokens]",
        key=site_output(SOFTMAX_SITE), unavailable=either(no_images, either(site(SOFTMAX_SITE), fused)),
        doc="The softmax's output, ``[tiles, heads, tokens, tokens]``, before it weights the values (dropout is off "
        "in eval). Eager only; assign or edit in place.",
    )
    attention_head_outputs = value(
        "attention_head_outputs", HeadOutputs, description="each head's output", shape="[tiles, tokens, heads, head_dim]",
        key=lambda a: f"{child(a, 'norm').path}.input", select=Argument(0, "input"), unavailable=no_images,
        view=heads_apart, inverse=reshaped_back, needs_envoy=True,
        doc="Each head's output, ``[tiles, tokens, heads, head_dim]``, as the attention's ``norm`` receives them "
        "joined (before it, the gate where there is one, and the output projection); a view.",
    )


class TimmBlock(VisionLayer):
    """A timm ``EvaBlock``: ``x + drop_path1(gamma_1 * attn(norm1(x)))``, then the MLP alike, so
    ``layer_input + attention_output + mlp_output == layer_output``, ``[tiles, tokens, vision_hidden_size]`` (the CLS
    row first), the sublayers' outputs after the layer scale."""

    layer_input, layer_output = VisionLayer.layer_input, VisionLayer.layer_output
    attention_output = value(
        "attention_output", Patches, description="what the attention adds to the stream, after the layer scale",
        key=lambda block: added(block, 1), unavailable=no_images, doc=ADDED_DOC.format(part="attention", which=1),
    )
    mlp_output = value(
        "mlp_output", Patches, description="what the MLP adds to the stream, after the layer scale",
        key=lambda block: added(block, 2), unavailable=no_images, doc=ADDED_DOC.format(part="MLP", which=2),
    )


class TimmMlp(VisionMlp):
    """A timm block's MLP: ``mlp_output`` is what the block adds, after its layer scale (`TimmBlock`)."""

    mlp_output = value(
        "mlp_output", Patches, description="what the MLP adds to the stream, after the layer scale",
        key=lambda mlp: added(mlp.parent, 2), unavailable=no_images, doc=ADDED_DOC.format(part="MLP", which=2),
    )


class TimmVision(Vision):
    """A timm vision transformer in a ``TimmWrapperModel``: its sizes off the timm model itself (the wrapper's config
    holds timm's ``architecture`` and ``model_args``, not the plain spellings)."""

    patch_embeddings: EProperty = value(
        "patch_embeddings", Patches, description="the patch embedding's output, before the CLS token and positions",
        key=lambda v: f"{v.patch_embed.path}.output", unavailable=no_patch_embed,
        doc="The patch embedding's output, ``[tiles, patches, vision_hidden_size]``, raster order over the tile "
        "(timm flattens the convolution's grid), before the CLS token, the position embedding and ``norm_pre``. "
        "Assign or edit in place.",
    )

    tower_output: EProperty = value(
        "tower_output", Patches, description="the last block's stream after the tower's final norm",
        key=norm_output, select=None, unavailable=no_images,
        doc="The timm model's final norm's output (an identity where it has none), ``[tiles, 1 + patches, "
        "vision_hidden_size]`` (the CLS row first): "
        "what the wrapper returns as ``last_hidden_state``, read at the norm (the wrapper's own output, a "
        "``TimmWrapperModelOutput``, cannot be split per invoke). Assign or edit in place.",
    )

    @property
    def _timm(self) -> torch.nn.Module:
        return self._module.timm_model

    @property
    def vision_hidden_size(self) -> int:
        return self._timm.embed_dim

    @property
    def num_heads(self) -> int:
        return self._timm.blocks[0].attn.num_heads

    @property
    def head_dim(self) -> int:
        return self._timm.blocks[0].attn.head_dim

    @property
    def intermediate_size(self) -> int:
        return self._timm.blocks[0].mlp.fc1.out_features

    @property
    def patch_size(self) -> int:
        return self._timm.patch_embed.patch_size[0]

    @property
    def image_size(self) -> int:
        """Side of the square tile the tower is built for, in pixels (timm's ``img_size``)."""
        return self._timm.patch_embed.img_size[0]


def pooling_head(envoy: Any) -> str | None:
    """Why ``envoy`` is not served: it is in the timm model's pooling head (``attn_pool``, whose MLP is the blocks'
    class), not in a block; None elsewhere (`Family`'s ``not_served``)."""
    if "attn_pool" not in envoy.path.split("."):
        return None
    return ("this is the timm model's attention-pooling head (attn_pool), not a block: PerceptionLM reads the blocks' "
            "stream (last_hidden_state), and the wrapper runs the head only under do_pooling, its output unused")


#: The envoys of a timm Perception Encoder in a TimmWrapper.
TIMM_PE_ENVOYS = {
    TimmWrapperModel: TimmVision,
    EvaBlock: TimmBlock,
    AttentionRope: TimmRopeAttention,
    Mlp: TimmMlp,
}

#: The tower's names: timm's blocks, patch embedding and final norm on the wrapper; a block's as a SigLIP block's.
TIMM_PE_RENAME = {
    "timm_model.blocks": "layers",
    "timm_model.patch_embed": "patch_embed",
    "timm_model.norm": "norm",
    "attn": "self_attn",
    "norm1": "input_layernorm",
    "norm2": "post_attention_layernorm",
    "attn.proj": "attn.o_proj",
    "mlp.fc1": "mlp.up_proj",
    "mlp.fc2": "mlp.down_proj",
}
