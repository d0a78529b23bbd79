"""The GLM-V families (GLM-4.1V, GLM-4.6V, GLM-GA, GLM-OCR): a packed ViT whose attention runs per image, merged by a
convolution and an MLP, on GLM-4's sandwich-normed text blocks.

The tower (``model.visual``, standard ``model.vision``) is laid out as the
Qwen ViT's (`envoys.towers.qwen`): every image's patches in one packed stream
``[patches, vision_hidden_size]``, image after image, each image's in
merge-block order (the processor's), split by ``image_grid_thw``; its
attention splits queries, keys and values at ``cu_seqlens`` and calls the
kernel once per image under every implementation but flash, so the interior
is served whole (`GlmVisionAttention`, `QwenVisionAttention`'s values), the
pattern under eager as one tensor with each image's call's on the diagonal,
and each call alone at ``kernel_calls[k]`` (`envoys.towers.per_image`).

Where it differs from the Qwen ViT, and what `GlmVision` serves:

- ``patch_embeddings`` is the 3D convolution's output (``patch_embed``);
  GLM-4.1V's tower then RMS-norms it (``post_conv_layernorm``) and adds
  position embeddings learned on a square grid and resampled to each image's
  grid (``embeddings``) before the first block; GLM-OCR's tower has neither,
  so its first block receives ``patch_embeddings``;
- the tower ends in a final RMSNorm over the patches (``post_layernorm``,
  the tower's ``norm``), so ``tower_output`` is its output, read after the
  blocks and before the projector;
- the merge is two steps: a 2D convolution (``downsample``, kernel and stride
  ``spatial_merge_size``) folds each merge block of ``tower_output`` into one
  row of ``out_hidden_size``, and the merger (``merger``, the projector: a
  linear map, a LayerNorm, GELU, a gated MLP) maps it; ``projector.input`` is
  the convolution's output, ``[image_tokens, out_hidden_size]``, one row per
  merge block in merge-block order, which is the order of the image tokens,
  so ``projector.output`` is ``image_features`` as it is.

The text model's blocks are GLM-4's (`envoys.blocks.glm`).
"""

from __future__ import annotations

from ..core.layouts import PackedPatches
from ..core.values import value
from ..vision.tower import as_patches, from_patches, no_images, norm_output
from .qwen import QWEN_VIT_RENAME, QwenVision, QwenVisionAttention


class GlmVisionAttention(QwenVisionAttention):
    """The GLM ViT's attention: the Qwen ViT's layout (`QwenVisionAttention`), one kernel call per image.

    ``attention_queries`` and ``attention_keys`` are the whole ``[1, heads,
    patches, head_dim]`` tensors after the 2D rotary embedding (after the q/k
    RMSNorms on GLM-OCR), before the per-image split; ``attention_scores``
    and ``attention_probabilities`` are ``[1, heads, patches, patches]`` under
    eager, each image's kernel call's pattern a diagonal block
    (`envoys.towers.per_image.BlockDiagonal`); ``kernel_calls[k]`` is image
    ``k``'s call alone.
    """


class GlmVision(QwenVision):
    """The GLM ViT (GLM-4.1V, GLM-4.6V, GLM-GA, GLM-OCR): packed, a final norm, a convolution and the merger after it.

    Packed as the Qwen ViT is (`QwenVision`): its stream values are `PackedPatches`,
    1 in the images axis, ``[1, patches, vision_hidden_size]``, each
    image's patches in merge-block order. ``tower_output`` is the final
    norm's output (``post_layernorm``, the tower's ``norm``), read before the
    projector values; the convolution ``downsample`` then folds each merge
    block into one row and the merger (``model.projector``) maps it, so
    ``projector.input`` is ``downsample``'s output, not ``tower_output``.

    Sizes, off the tower: ``vision_hidden_size`` (``hidden_size``),
    ``num_heads``, ``intermediate_size`` (the blocks' MLP width, read off the
    MLP: GLM-4.1V's release builds it ``out_hidden_size`` wide, GLM-OCR's
    ``intermediate_size``), ``patch_size``, ``spatial_merge_size``;
    ``image_size`` is Unavailable (the tower takes any resolution, resampling
    its learned position grid to each image's), and so is ``window_index``
    (it attends per image).
    """

    tower_output = value(
        "tower_output", PackedPatches, description="the last block's stream after the final norm (post_layernorm)",
        key=norm_output, select=None, unavailable=no_images, view=as_patches, inverse=from_patches,
        doc="The last block's stream after the tower's final norm (``post_layernorm``, ``vision.norm``), "
        "``[1, patches, vision_hidden_size]``, in merge-block order: what the convolution ``downsample`` folds, "
        "before the merger (``model.projector``). Read it before the projector values.",
    )

    @property
    def intermediate_size(self) -> int:
        """The blocks' MLP width, off the MLP itself (GLM-4.1V's is the config's ``out_hidden_size``)."""
        return self._module.blocks[0].mlp.gate_proj.out_features


#: The native names of the GLM ViT and GLM-4 text model under the standard ones, shared by the four families: the Qwen
#: ViT's, and the tower's final norm.
GLM_RENAME = {**QWEN_VIT_RENAME, "post_layernorm": "norm"}

__all__ = ["GLM_RENAME", "GlmVision", "GlmVisionAttention"]
