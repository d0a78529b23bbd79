"""ERNIE-4.5-VL (model_type ernie4_5_vl_moe): a packed ViT attending per image, a variable-resolution resampler, a
mixture-of-experts text model whose experts are split by modality.

- ``Ernie4_5_VLMoeModel.forward`` scatters the resampled image features
  (``inputs_embeds_masked_scatter_0``, argument 1, found; ``_1`` is video,
  left as it is).
- The tower (``model.vision_tower``, ``vision``; an `ErnieVision`) is laid out
  as the Qwen ViT's: a linear patch embedding (``patch_embed``) of the
  processor's patches, every image's patches packed ``[patches,
  vision_hidden_size]``, image after image, each image's in merge-block order,
  split by ``image_grid_thw``; axial 2D rotary embeddings; the blocks
  ``blocks`` (``attn`` with ``qkv`` and ``proj``, ``mlp`` with ``fc1`` /
  ``fc2``, ``norm1``, ``norm2``), whose attention splits at ``cu_seqlens`` and
  calls the kernel once per image under every implementation but flash
  (``ernie4_5_vl_moe.vision-attention``; under eager, each image's pattern on
  the diagonal of one tensor: `envoys.towers.per_image`), then a final LayerNorm
  (``ln``, ``vision.norm``), so ``tower_output`` is its output, the tower's
  ``last_hidden_state``. There is no merger inside the tower.
- The projector (``model.resampler_model``, ``projector``, outside the tower)
  reads ``tower_output`` with ``image_grid_thw``: it folds each merge block's
  ``spatial_merge_size**2`` consecutive patches into one row
  (``spatial_linear``), pairs each row with the next frame's (an image's with
  itself: ``temporal_merge_size`` 2 over one frame) (``temporal_linear``),
  maps it to the text width (``mlp``) and RMS-norms it (``after_norm``). Its
  output, one row per image token in raster order over each image's merged
  grid, image after image, is what ``get_image_features`` splits per image and
  the host concatenates back: ``projector.output == image_features``.
- The text blocks (``model.language_model.layers``) are plain pre-norm blocks,
  found as every plain block is. ``mlp_layer_types`` says which are dense
  (``Ernie4_5_VLMoeMLP``) and which sparse: an ``Ernie4_5_VLMoeMoeBlock``
  holding two sets of routed experts, each with its own router (``gate``):
  ``text_moe`` for the text tokens and ``vision_moe`` for the vision tokens
  (the image tokens and the image start and end tokens: the processor's
  ``moe_mm_token_type_ids``, which the root passes to every block), plus
  always-on shared experts (``shared_experts``) on every token. The block
  returns ``(out, router_logits)`` and the decoder block adds ``out``, ``[batch,
  seq, hidden_size]``, to the stream, so ``mlp_output`` is item 0 of its output
  and ``layer_input + attention_output + mlp_output == layer_output`` holds on
  either kind of block. Where no token is a vision token (a text-only prompt,
  every step of generate after the first) the text experts take every token.

The router (`ErnieMoeMlp`). Each token is routed by its own modality's
router: the router's ``F.linear`` on float32 (``F_linear_0`` in
``Ernie4_5_VLMoeMoeTopKRouter.forward``, found) gives ``[tokens of that
modality, experts]``; its softmax, plus a score-correction bias
(``moe_statics.e_score_correction_bias``), picks the top ``moe_k``. The block
then writes each router's logits into one ``[tokens, experts]`` tensor at its
tokens' rows (the batch's tokens flattened, row-major) and returns it beside
``out``, which the decoder block discards. ``layers[i].mlp.router_logits`` is
that tensor, item 1 of the block's output: every token's logits from the
router that routed it, exactly. It is read-only: the block assembles it after
both routers have chosen, so a write there would change nothing. The logits
a write does reach are each router's own:
``layers[i].mlp.text_moe.router_logits`` (the text tokens' rows) and
``layers[i].mlp.vision_moe.router_logits`` (the vision tokens' rows, only on a
forward with a vision token, since the vision experts run only then), at
their ``F_linear_0``; a write there changes which of that set's experts run.
The choice is the router's own output (``gate.output[2]``), the logits' top-k
only where the bias is zero (its init). On a dense block ``router_logits`` is
Unavailable, saying the block is dense.

Unavailable: ``image_size`` (any resolution: ``image_grid_thw`` says each
image's), ``window_index`` (no windows); ``mlp.router_logits`` on the dense
blocks; ``mlp_output`` of one modality's
experts (``mlp.text_moe``, ``mlp.vision_moe``: they return their tokens'
outputs flattened, which the block places). Videos are scattered
(``inputs_embeds_masked_scatter_1``) but no video value is served yet.
transformers has no causal LM for the text model saved alone
(``ernie4_5_vl_moe_text``), so no text-only checkpoint loads.
"""

from __future__ import annotations

from typing import Any

from transformers.models.ernie4_5_vl_moe.modeling_ernie4_5_vl_moe import (
    Ernie4_5_VLMoeMLP,
    Ernie4_5_VLMoeMoeBlock,
    Ernie4_5_VLMoeSparseMoeBlock,
    Ernie4_5_VLMoeVisionAttention,
    Ernie4_5_VLMoeVisionBlock,
    Ernie4_5_VLMoeVisionTransformerPretrainedModel,
    Ernie4_5VLVisionMLP,
)

from ..blocks.moe import RoutedMlp, not_routed
from ..core.layouts import Hidden, PackedPatches, RouterLogits
from ..core.values import Item, value
from ..towers.qwen import QWEN_GRIDS, QWEN_VIT_RENAME, QwenVision, QwenVisionAttention
from ..vision.tower import PackedVisionLayer, PackedVisionMlp, as_patches, from_patches, no_images, norm_output
from . import Family

#: Why the block's assembled router_logits takes no write.
ASSEMBLED = (
    "the block writes each router's logits into this tensor after both routers have chosen their experts and "
    "returns it beside its output, which the decoder block discards, so a write here would change nothing; write "
    "mlp.text_moe.router_logits or mlp.vision_moe.router_logits, each router's own logits, to change which experts run"
)

RENAME = {
    **{key: name for key, name in QWEN_VIT_RENAME.items() if not key.startswith("model.visual")},
    "model.vision_tower": "vision",
    "vision_tower.ln": "vision_tower.norm",
    "model.resampler_model": "projector",
    "mlp.fc1": "mlp.up_proj",
    "mlp.fc2": "mlp.down_proj",
}


class ErnieVisionAttention(QwenVisionAttention):
    """The ERNIE ViT's attention: the Qwen ViT's layout (`QwenVisionAttention`), one kernel call per image; its
    ``attention_scores`` and ``attention_probabilities`` are each image's pattern on the diagonal of one tensor under
    eager (`envoys.towers.per_image.BlockDiagonal`), ``kernel_calls[k]`` image ``k``'s call alone."""


class ErnieVision(QwenVision):
    """The ERNIE ViT: packed as the Qwen ViT is (`QwenVision`), a final LayerNorm (``ln``, ``vision.norm``), no merger
    inside: the resampler (``model.projector``) runs after the tower."""

    tower_output = value(
        "tower_output", PackedPatches, description="the last block's stream after the final norm (ln)",
        key=norm_output, select=None, unavailable=no_images, view=as_patches, inverse=from_patches,
        doc="The last block's stream after the tower's final LayerNorm (``ln``, ``vision.norm``), ``[1, patches, "
        "vision_hidden_size]``, in merge-block order: the tower's ``last_hidden_state``, what the resampler "
        "(``model.projector``) reads. Read it after the blocks' values and before the projector's.",
    )


def not_assembled(mlp: Any) -> str | None:
    """Why ``mlp`` has no assembled router_logits (a dense MLP, or the shared experts inside a sparse block), or None."""
    return None if isinstance(mlp._module, Ernie4_5_VLMoeMoeBlock) else not_routed(mlp)


class ErnieMoeMlp(RoutedMlp):
    """A text block's MLP (dense, or the modality-split mixture): `RoutedMlp`'s ``mlp_output`` (item 0 of the
    mixture's output), and ``router_logits`` the mixture's assembled ``[tokens, experts]``, read-only (`ASSEMBLED`)."""

    router_logits = value(
        "router_logits", RouterLogits, description="every token's router logits, from its modality's router",
        key=lambda mlp: f"{mlp.path}.output", select=Item(1), unavailable=not_assembled, read_only=ASSEMBLED,
        doc="Every token's logits from the router that routed it, ``[tokens, experts]`` (the batch's tokens flattened, "
        "row-major): the text router's on the text tokens, the vision router's on the vision tokens (the image tokens "
        "and the image start and end tokens). Read-only: write ``text_moe.router_logits`` or "
        "``vision_moe.router_logits``.",
    )

    def gradient_reason(self, name: str) -> str | None:
        """Why the value ``name`` has no gradient: the assembled logits are returned and discarded."""
        if name != "router_logits":
            return None
        return ("the block returns it beside its output and the decoder block discards it, so nothing the logits "
                "depend on is computed from it; text_moe.router_logits and vision_moe.router_logits, each router's "
                "own, have the gradients of the routing")


def one_modality(experts: Any) -> str:
    """Why one modality's experts have no mlp_output of their own."""
    return (
        f"{experts.path} is one modality's experts inside the block's mixture: it returns its tokens' outputs "
        "flattened, which the block places at those tokens and adds the shared experts to; read the block's mlp_output"
    )


class ModalityExperts(RoutedMlp):
    """One modality's experts (``mlp.text_moe`` or ``mlp.vision_moe``): ``router_logits`` is its router's own,
    ``[tokens of the modality, experts]``, at the router's ``F_linear_0`` (a write changes which of its experts run);
    ``mlp_output`` is Unavailable (`one_modality`)."""

    mlp_output = value(
        "mlp_output", Hidden, description="one modality's experts' outputs, flattened", shape="", key="output",
        select=Item(0), unavailable=one_modality, doc="Unavailable: `one_modality`.",
    )


ENVOYS = {
    Ernie4_5_VLMoeVisionTransformerPretrainedModel: ErnieVision,
    Ernie4_5_VLMoeVisionBlock: PackedVisionLayer,
    Ernie4_5_VLMoeVisionAttention: ErnieVisionAttention,
    Ernie4_5VLVisionMLP: PackedVisionMlp,
    Ernie4_5_VLMoeMoeBlock: ErnieMoeMlp,
    Ernie4_5_VLMoeMLP: ErnieMoeMlp,
    Ernie4_5_VLMoeSparseMoeBlock: ModalityExperts,
}

FAMILY = Family("ernie4_5_vl_moe", RENAME, ENVOYS, "model.language_model.layers", grid_layout=QWEN_GRIDS)
