"""Dots 3 Note (model_type dots3_note): a packed ViT attending per image whose blocks hold mixture-of-experts MLPs,
an audio tower, and a mixture-of-experts DeepSeek-V3.2-shaped text model.

``Dots3NoteModel.forward`` scatters the merged image features into the token
embeddings (``inputs_embeds_masked_scatter_0``, argument 1, found; ``_1`` is
video and ``_2`` audio, not served yet: their
values say so, naming the ``.source`` site that reads them). The tower is at
``model.vision_tower`` (standard ``model.vision``, a `DotsVision`), laid out
as the Qwen ViT's (`envoys.towers.qwen`): every image's patches in one packed stream
``[patches, vision_hidden_size]``, image after image, each image's in
merge-block order (the processor's, a stock `Qwen2VLImageProcessor` one
frame deep), split by ``image_grid_thw``; its blocks ``blocks`` (``attn``,
``mlp``, ``norm1``, ``norm2``), whose attention is GLM-OCR's (q/k RMSNorms per
head, then the 2D rotary embedding) and calls the kernel once per image under
every implementation but flash (``dots3_note.vision-attention``), so under
eager ``attention_scores`` and ``attention_probabilities`` hold each image's
pattern on the diagonal of one tensor, ``kernel_calls[k]`` is image ``k``'s
call alone (`envoys.towers.per_image`), and the queries and keys are served
whole.

- ``patch_embeddings`` is the patch convolution's output, one row per patch,
  as it enters the RMSNorm inside the patch embedding (``patch_embed.norm``);
  the first block receives that norm's output (there are no learned position
  embeddings: positions are the attention's rotary embedding).
- A block's MLP is a dense gated MLP (``Dots3NoteVisionMLP``) on the blocks
  the config's ``mlp_layer_types`` calls dense, and on the others a mixture of
  routed experts without a shared expert (``Dots3NoteVisionMoE``: a router
  ``mlp.gate`` scores every expert, the top ``num_experts_per_tok`` run on
  each patch, weighted), whose output, ``[patches, vision_hidden_size]``, is
  what the block adds to the stream; so ``mlp_output`` is it and
  ``layer_input + attention_output + mlp_output == layer_output`` holds on
  either kind of block.
- The tower ends in a final RMSNorm (``norm``, ``vision.norm``):
  ``tower_output`` is its output (the tower's ``last_hidden_state``), which the
  merger (``merger``, the projector, inside the tower: a LayerNorm and an MLP
  over each 2x2 merge block) reads as it is: ``projector.input`` is
  ``tower_output`` and ``projector.output``, one row per image token in
  merge-block order, is ``image_features``.

The text model (``model.language_model``) is DeepSeek-V3.2's shape: multi-head
latent attention on the shared interface (a sparse-attention indexer masks
all but each query's top keys on ``indexed_attention`` blocks, in the mask the
eager kernel receives, and a sigmoid gate per head scales the kernel's output
before ``o_proj``), a dense MLP on the first ``first_k_dense_replace`` blocks
and a ``Dots3NoteTextMoE`` after them (routed experts weighted by ``gate``'s
top-k plus ``shared_experts``), whose output is what the block adds, so
``mlp_output`` is it and the block identity holds on either kind;
``mlp.router_logits`` is the output of ``gate``'s ``F.linear`` (float32,
`envoys.blocks.moe`), whose sigmoid plus the correction bias (``e_score_correction_bias``)
picks the experts in each token's best ``topk_group`` of ``n_group`` groups;
on the dense blocks it is Unavailable, saying so.

The audio tower (``model.audio_tower``) keeps its native names.

Unavailable: ``image_size`` (any resolution: ``image_grid_thw`` says each
image's), ``window_index`` (no windows); ``mlp.router_logits`` on the dense
text blocks. The tower's routers (``vision.layers[i].mlp.gate``) keep their
native names: their logits are the output of ``F_linear_0`` in
``Dots3NoteVisionTopKRouter.forward``, served at nnsight's ``.source``. Videos
and audio are scattered (``_1``, ``_2``) but no video or audio value is served
yet.
"""

from __future__ import annotations

from typing import Any

from transformers.models.dots3_note.modeling_dots3_note import (
    Dots3NoteVisionAttention,
    Dots3NoteVisionBlock,
    Dots3NoteVisionMLP,
    Dots3NoteVisionModel,
    Dots3NoteVisionMoE,
)

from ..blocks.indexed import INDEXER_TOP_K
from ..core.layouts import PackedPatches
from ..core.values import Argument, value
from ..towers.glm import GlmVision
from ..towers.qwen import QWEN_GRIDS, QWEN_VIT_RENAME, QwenVisionAttention
from ..vision.tower import PackedVisionLayer, PackedVisionMlp, as_patches, from_patches, no_patch_embed
from . import Batching, Family


class DotsVisionAttention(QwenVisionAttention):
    """The Dots 3 tower's attention: the Qwen ViT's layout (`QwenVisionAttention`), one kernel call per image; the
    queries and keys whole after their RMSNorms and the 2D rotary embedding, ``attention_scores`` and
    ``attention_probabilities`` each image's pattern on the diagonal of one tensor under eager
    (`envoys.towers.per_image.BlockDiagonal`), ``kernel_calls[k]`` image ``k``'s call alone."""


class DotsVision(GlmVision):
    """The Dots 3 tower: packed (`QwenVision`'s stream, ``[1, patches, vision_hidden_size]``, merge-block order), a
    final RMSNorm whose output is ``tower_output`` (`GlmVision`'s), the merger inside the tower reading it.

    Sizes, off the vision config: ``vision_hidden_size`` (``hidden_size``),
    ``num_heads`` (``num_attention_heads``), ``intermediate_size`` (the dense
    blocks' MLP width; a sparse block's experts are ``moe_intermediate_size``
    wide), ``patch_size``, ``spatial_merge_size``; ``image_size`` is
    Unavailable (any resolution).
    """

    patch_embeddings = value(
        "patch_embeddings", PackedPatches, description="every image's patch embeddings, before the patch embedding's norm",
        key=lambda v: f"{v.patch_embed.norm.path}.input", select=Argument(0, "hidden_states"), unavailable=no_patch_embed,
        view=as_patches, inverse=from_patches,
        doc="Every image's patch embeddings, ``[1, patches, vision_hidden_size]``, image after image, each in "
        "merge-block order: the convolution's output as it enters the RMSNorm inside the patch embedding "
        "(``patch_embed.norm``), whose output the first block receives. Assign a tensor of the same shape to "
        "replace it, or edit it in place.",
    )

    @property
    def num_heads(self) -> int:
        return self.vision_config.num_attention_heads

    @property
    def intermediate_size(self) -> int:
        """The dense blocks' MLP width (the config's ``intermediate_size``)."""
        return self.vision_config.intermediate_size


RENAME: dict[str | type, str] = {
    **{key.replace("model.visual", "model.vision_tower"): name for key, name in QWEN_VIT_RENAME.items()},
}

ENVOYS: dict[type, Any] = {
    Dots3NoteVisionModel: DotsVision,
    Dots3NoteVisionBlock: PackedVisionLayer,
    Dots3NoteVisionAttention: DotsVisionAttention,
    Dots3NoteVisionMLP: PackedVisionMlp,
    Dots3NoteVisionMoE: PackedVisionMlp,
}

FAMILY = Family("dots3_note", RENAME, ENVOYS, "model.language_model.layers", grid_layout=QWEN_GRIDS,
                text_model_types=("dots3_note_text",),
                batching=Batching(invokes_differ=INDEXER_TOP_K))
