"""Kimi K2.5 (model_type kimi_k25): MoonViT, a packed ViT attending per image, and a projector on a DeepSeek-V3 MoE
text model.

``Kimi_K25Model.forward`` scatters the projected image features into the
token embeddings (``inputs_embeds_masked_scatter_0``, argument 1, found;
``_1`` is video, left as it is). The tower is MoonViT at
``model.vision_tower`` (standard ``model.vision``, a `KimiVision`): every
image's patches in one packed stream ``[patches, vision_hidden_size]``, image
after image, each image's in raster order (the processor's), split by
``image_grid_thw``; its blocks ``layers`` (``attn``, ``mlp``, ``norm1``,
``norm2``), whose attention splits queries, keys and values at
``cu_seqlens`` and calls the kernel once per image under every
implementation but flash, as the Qwen ViT's does (`KimiVisionAttention`,
``kimi_k25.vision-attention``), so under eager ``attention_scores`` and
``attention_probabilities`` hold each image's pattern on the diagonal of one
tensor, ``kernel_calls[k]`` is image ``k``'s call alone
(`envoys.towers.per_image`), and the queries (after the 2D rotary embedding),
keys and values are served whole.

- ``patch_embeddings`` is the convolution's output, one row per patch, as it
  enters the position embedding (``patch_embed.pos_emb``'s input: a learned
  grid resampled to each image's grid, added inside ``patch_embed``).
- The tower ends in a final LayerNorm (``final_layernorm``, ``vision.norm``):
  ``tower_output`` is its output. The tower then gathers each 2x2 merge block
  of it (``temporal_merge``, no weights: one frame, weight 1) into
  ``[image_tokens, 4, vision_hidden_size]``, its ``pooler_output``.
- The projector (``model.mm_projector``, ``model.projector``) runs after the
  tower, in ``get_image_features``: ``projector.input`` is that gathered
  ``[image_tokens, 4, vision_hidden_size]`` (each block's patches in raster
  order within the block), ``projector.output`` ``[image_tokens, 1,
  hidden_size]``, which the host squeezes, splits per image and concatenates
  back: ``image_features`` is ``projector.output`` flattened.

The text model is DeepSeek-V3's (``model.language_model``): multi-head latent
attention on the shared interface, a dense MLP on the first
``first_k_dense_replace`` blocks and a ``DeepseekV3MoE`` after them (routed
experts weighted by ``gate``'s top-k plus ``shared_experts``), whose output is
what the block adds, so ``mlp_output`` is it and the block identity holds on
either kind; ``mlp.router_logits`` is the output of ``gate``'s ``F.linear``
(float32, `envoys.blocks.moe`), whose sigmoid (plus the correction bias) picks the
experts; on the dense blocks it is Unavailable, saying so.

``vision.patch_grid`` and ``vision.token_grid`` put each image's patches and
image tokens on its grids, both in raster order (`envoys.image.grids.RasterGrids`).

Unavailable: ``image_size`` (any resolution: ``image_grid_thw`` says each
image's), ``window_index`` (no windows); ``mlp.router_logits`` on the dense
blocks. Videos are scattered (``_1``) but no video value is served yet.
"""

from __future__ import annotations

from typing import Any

from transformers.models.kimi_k25.modeling_kimi_k25 import (
    Kimi_K25VisionAttention,
    Kimi_K25VisionEncoderLayer,
    Kimi_K25VisionMLP,
    Kimi_K25VisionModel,
)

from ..core.layouts import PackedPatches
from ..core.values import Argument, value
from ..image.grids import RasterGrids
from ..towers.glm import GlmVision
from ..towers.qwen import QwenVisionAttention
from ..vision.tower import PackedVisionLayer, PackedVisionMlp, as_patches, from_patches, no_patch_embed
from . import Family


class KimiVisionAttention(QwenVisionAttention):
    """MoonViT's attention: the Qwen ViT's layout (`QwenVisionAttention`), one kernel call per image; the queries and
    keys whole after the 2D rotary embedding, ``attention_scores`` and ``attention_probabilities`` each image's
    pattern on the diagonal of one tensor under eager (`envoys.towers.per_image.BlockDiagonal`), ``kernel_calls[k]``
    image ``k``'s call alone."""


class KimiVision(GlmVision):
    """MoonViT: packed (`QwenVision`'s stream, ``[1, patches, vision_hidden_size]``), each image's patches in raster
    order, a final LayerNorm whose output is ``tower_output`` (`GlmVision`'s), the projector after the tower.

    Sizes, off the vision config: ``vision_hidden_size`` (``hidden_size``),
    ``num_heads`` (``num_attention_heads``), ``intermediate_size``,
    ``patch_size``, ``spatial_merge_size`` (the side of
    ``merge_kernel_size``); ``image_size`` is Unavailable (any resolution).
    """

    stream_order = "raster order"

    patch_embeddings = value(
        "patch_embeddings", PackedPatches, description="every image's patch embeddings, before the position embedding",
        key=lambda v: f"{v.patch_embed.pos_emb.path}.input", select=Argument(0, "hidden_states"), unavailable=no_patch_embed,
        view=as_patches, inverse=from_patches,
        doc="Every image's patch embeddings, ``[1, patches, vision_hidden_size]``, image after image, each in raster "
        "order: the convolution's output as it enters the position embedding (``patch_embed.pos_emb``). Assign a "
        "tensor of the same shape to replace it, or edit it in place.",
    )

    @property
    def num_heads(self) -> int:
        return self.vision_config.num_attention_heads

    @property
    def intermediate_size(self) -> int:
        return self.vision_config.intermediate_size

    @property
    def spatial_merge_size(self) -> int:
        """The side, in patches, of the block the tower gathers into one image token (``merge_kernel_size``'s height;
        Kimi's blocks are square)."""
        return self.vision_config.merge_kernel_size[0]


RENAME: dict[str | type, str] = {
    "model.language_model.embed_tokens": "embed_tokens",
    "model.language_model.layers": "layers",
    "model.language_model.norm": "norm",
    "model.vision_tower": "vision",
    "model.mm_projector": "projector",
    "attn": "self_attn",
    "norm1": "input_layernorm",
    "norm2": "post_attention_layernorm",
    "attn.proj": "attn.o_proj",
    "mlp.fc1": "mlp.up_proj",
    "mlp.fc2": "mlp.down_proj",
    "final_layernorm": "norm",
}

ENVOYS: dict[type, Any] = {
    Kimi_K25VisionModel: KimiVision,
    Kimi_K25VisionEncoderLayer: PackedVisionLayer,
    Kimi_K25VisionAttention: KimiVisionAttention,
    Kimi_K25VisionMLP: PackedVisionMlp,
}

FAMILY = Family("kimi_k25", RENAME, ENVOYS, "model.language_model.layers",
                grid_layout=RasterGrids(lambda config: config.vision_config.merge_kernel_size[0]))
