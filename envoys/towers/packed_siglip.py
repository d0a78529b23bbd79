"""A SigLIP-shaped tower run packed, its attention split per image as the Qwen ViT's is (PaddleOCR-VL, VideoLLaMA 3).

The tower's blocks are SigLIP's (``layer_norm1``, ``self_attn`` with
``out_proj``, ``layer_norm2``, ``mlp`` with ``fc1`` / ``fc2``) under
``encoder.layers``, but the tower runs as the Qwen ViT does (`envoys.towers.qwen`):
every image's patches in one stream ``[patches, vision_hidden_size]``, image
after image, split by the processor's ``image_grid_thw`` (``[t, h, w]`` per
image, in patches), with a 2D rotary embedding in the attention. Its stream
values are `PackedPatches`, 1 in the images axis, ``[1, patches,
vision_hidden_size]`` (a view: an in-place edit reaches the model).

The patch embedding is a convolution run on every patch alone (``[patches,
channels, patch, patch]`` in, ``[patches, width, 1, 1]`` out), so
``patch_embeddings`` is its output as one packed row. The tower ends in a
final LayerNorm (``post_layernorm``, the tower's ``norm``), so
``tower_output`` is that norm's output, read after the blocks and before
anything the host or the tower does with it (VideoLLaMA 3 resamples each
image's grid inside the tower after it; PaddleOCR-VL's projector norms and
folds it).

The attention splits queries, keys and values at ``cu_seqlens`` and calls the
kernel once per image under every implementation but flash, the Qwen ViT's
forward to the names (`rewrites.qwen_vit_attention`), so its interior is
`QwenVisionAttention`'s, whole, its pattern under eager one tensor with each
image's call's on the diagonal, and each call alone at ``kernel_calls[k]``
(`envoys.towers.per_image`).
"""

from __future__ import annotations

import torch

from ..core.layouts import PackedPatches
from ..core.values import value
from ..vision.tower import PackedVision, as_patches, from_patches, no_images, no_patch_embed, norm_output, variable_resolution
from .qwen import QwenVisionAttention


class PackedSiglipAttention(QwenVisionAttention):
    """A packed SigLIP tower's attention: the Qwen ViT's forward (`QwenVisionAttention`), one kernel call per image.

    ``attention_queries``, ``attention_keys`` and ``attention_values`` are
    the whole ``[1, heads, patches, head_dim]`` tensors (queries and keys after
    the 2D rotary embedding) before the per-image split;
    ``attention_head_outputs`` the per-image outputs joined back, ``[1,
    patches, heads, head_dim]``; ``attention_scores`` and
    ``attention_probabilities`` are ``[1, heads, patches, patches]`` under
    eager, each image's kernel call's pattern a diagonal block
    (`envoys.towers.per_image.BlockDiagonal`); ``kernel_calls[k]`` is image
    ``k``'s call alone.
    """


def one_row(embedded: torch.Tensor) -> torch.Tensor:
    """The convolution's ``[patches, width, 1, 1]`` as one packed row, ``[1, patches, width]`` (a view)."""
    return embedded.flatten(1).unsqueeze(0)


class PackedSiglipVision(PackedVision):
    """A SigLIP-shaped tower run packed (PaddleOCR-VL's, VideoLLaMA 3's): every image's patches in one row.

    ``patch_embeddings`` is the patch convolution's output as ``[1, patches,
    vision_hidden_size]``, before the learned position embeddings
    PaddleOCR-VL's tower adds (VideoLLaMA 3's adds none: its positions are
    the attention's rotary embedding); ``tower_output`` is the final norm's
    output (``post_layernorm``, ``vision.norm``), ``[1, patches,
    vision_hidden_size]``. Each image's patches are in the processor's
    order: raster order on PaddleOCR-VL's; merge-block order at the image's
    ``merge_size`` on VideoLLaMA 3's, which is raster order at the stock
    image ``merge_size`` 1.

    Sizes, off the tower's config (SigLIP's spellings): ``vision_hidden_size``,
    ``num_heads``, ``head_dim``, ``intermediate_size``, ``patch_size``;
    ``image_size`` is Unavailable: the tower takes any resolution.
    """

    image_sizes_are = (
        "each image's size is the processor's image_grid_thw, [t, h, w] in patches of patch_size pixels, "
        "which is also the tower's grid_thw argument"
    )

    patch_embeddings = value(
        "patch_embeddings", PackedPatches, description="every image's patch embeddings, before any position embedding",
        key=lambda v: f"{v.patch_embed.path}.output", select=None, unavailable=no_patch_embed, view=one_row, inverse=from_patches,
        doc="Every image's patch embeddings, ``[1, patches, vision_hidden_size]``, image after image, each in the "
        "processor's order: the patch convolution's output (``[patches, vision_hidden_size, 1, 1]``) as one row, "
        "before any position embedding. Assign a tensor of the same shape to replace it, or edit it in place.",
    )

    tower_output = value(
        "tower_output", PackedPatches, description="the last block's stream after the final norm (post_layernorm)",
        key=norm_output, select=None, unavailable=no_images, view=as_patches, inverse=from_patches,
        doc="The last block's stream after the tower's final norm (``post_layernorm``, ``vision.norm``), "
        "``[1, patches, vision_hidden_size]``, image after image: read it after the blocks' values and before the "
        "projector's.",
    )

    image_size = property(variable_resolution, doc="Unavailable: the tower takes any resolution (variable_resolution).")


__all__ = ["PackedSiglipAttention", "PackedSiglipVision", "one_row"]
