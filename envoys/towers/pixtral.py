"""Pixtral's tower (Mistral 3, Llava-Pixtral): packed, every image's patches in one row, one attention call.

The tower (``model.vision_tower``, standard ``model.vision``) takes the
images padded to the largest of the batch, ``[images, channels, height,
width]``, and runs its convolution (``patch_conv``, standard
``patch_embed``) on that padded batch. It then crops each image's grid to its
own size (the processor's ``image_sizes``, ``[height, width]`` in pixels),
flattens each in raster order and concatenates them, image after image, into
one row, ``[1, all patches, vision_hidden_size]``, which enters ``ln_pre``
and the blocks. So its stream values are `PackedPatches`, and image
``i`` holds ``(height_i // patch_size) * (width_i // patch_size)``
consecutive rows of it.

Positions are a 2D rotary embedding inside the attention, so nothing is
added to the patches between ``ln_pre`` and the first block. The blocks
attend over the packed row with one kernel call under a block-diagonal mask
(``finfo.min`` between images), so the whole interior, probabilities
included, is served at that call: ``[1, heads, all patches, all patches]``,
exactly zero between images under eager attention. The tower has no final
norm: ``tower_output`` is the last block's stream.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from transformers.models.pixtral.modeling_pixtral import (
    PixtralAttention,
    PixtralAttentionLayer,
    PixtralMLP,
    PixtralVisionModel,
)

from ..core.layouts import PackedPatches
from ..core.standard import child
from ..core.values import Argument, Field, value
from ..image.grids import Grid, ImageInputs, check_image, packed_raster
from ..text.blocks import interior_values
from ..vision.tower import PackedVision, PackedVisionAttention, PackedVisionLayer, PackedVisionMlp, no_images, variable_resolution

#: The tower's norm over the packed row, where the patch embeddings enter the tower proper.
LN_PRE = "ln_pre"


def no_ln_pre(vision: Any) -> str | None:
    """Why ``vision.patch_embeddings`` is unavailable, or None: it is read where the packed row enters ``ln_pre``."""
    reason = no_images(vision)
    if reason is not None:
        return reason
    if child(vision, LN_PRE) is None:
        return f"this tower has no {LN_PRE}, where the packed patch embeddings are read"
    return None


class PixtralVisionAttention(PackedVisionAttention):
    """A Pixtral block's attention: one kernel call over every image's patches, under a block-diagonal mask.

    The interior is whole, one row holding every image: queries, keys and
    values ``[1, heads, all patches, head_dim]`` (queries and keys after the 2D
    rotary embedding), ``attention_scores`` and ``attention_probabilities``
    ``[1, heads, all patches, all patches]`` (eager attention), and
    ``attention_head_outputs`` ``[1, all patches, heads, head_dim]``. The mask
    adds ``finfo.min`` where a query and a key are in different images, so
    each query's probabilities are exactly zero outside its own image and sum
    to 1 over it; the processor's ``image_sizes`` say where each image's
    square block is.
    """

    (
        attention_queries,
        attention_keys,
        attention_values,
        attention_scores,
        attention_probabilities,
        attention_head_outputs,
    ) = interior_values("call, every image's patches packed in it", no_images)


class PixtralVision(PackedVision):
    """Pixtral's tower (Mistral 3, Llava-Pixtral): packed, every image's patches in one row.

    The convolution runs on the batch padded to its largest image, each image
    is cropped to its own grid, and the grids are flattened and concatenated
    into ``[1, all patches, vision_hidden_size]`` before ``ln_pre``; the blocks
    attend under a block-diagonal mask, so no patch sees another image's. So
    its stream values are `PackedPatches`, and ``patch_embeddings`` is that packed
    row as it enters ``ln_pre`` (the convolution's own output,
    ``patch_embed.output``, is still the padded grid,
    ``[images, vision_hidden_size, rows, columns]`` of the largest image). The
    processor's ``image_sizes`` split the row per image: ``(height //
    patch_size) * (width // patch_size)`` patches each, in order. The
    attention interior is whole (`PixtralVisionAttention`): one interface
    call over the packed row, so ``attention_probabilities`` is ``[1, heads,
    all patches, all patches]``, zero between images. ``image_size`` is
    Unavailable: the config's is the largest side the processor resizes to,
    not one size every image has.
    """

    image_sizes_are = (
        "its config's image_size is the longest side the processor keeps, not one size every image has. Each "
        "image's size is the processor's image_sizes ([height, width] in pixels, the tower's image_sizes "
        "argument), which splits the packed row into (height // patch_size) * (width // patch_size) patches "
        "per image, image after image"
    )

    patch_embeddings = value(
        "patch_embeddings", PackedPatches, description="every image's patch embeddings, cropped to its grid and packed in one row",
        key=lambda v: f"{child(v, LN_PRE).path}.input", select=Argument(0, "hidden_states"), unavailable=no_ln_pre,
        doc="Every image's patch embeddings, ``[1, all patches, vision_hidden_size]``, image after image, each in "
        "raster order. What enters ``ln_pre``: the convolution's output (``patch_embed.output``, the padded grid) "
        "cropped to each image's ``image_sizes`` and concatenated. Assign a tensor of the same shape to replace "
        "it, or edit it in place.",
    )

    tower_output = value(
        "tower_output", PackedPatches, description="the last block's stream, every image packed in one row (there is no final norm)",
        key="output", select=Field("last_hidden_state"), unavailable=no_images,
        doc="The last block's stream, ``[1, all patches, vision_hidden_size]``, image after image: the tower has no "
        "final norm. The host's projector reads the block its ``vision_feature_layer`` names from the tower's "
        "hidden states (Mistral 3: the last block, without the leading 1; Llava-Pixtral: the last block, as it "
        "is). For the last block that is this very tensor, so an in-place edit here reaches the projector, but an "
        "assignment replaces only the tower's output: assign ``vision.layers[-1].layer_output`` to replace what the "
        "projector reads. LightOnOCR's projector reads this output itself, so there an assignment reaches it too.",
    )

    image_size = property(variable_resolution, doc="Unavailable: each image keeps its own size (variable_resolution).")


#: The Pixtral tower's native names under the standard ones (relative to the tower), for every family that has it.
PIXTRAL_RENAME = {
    "transformer.layers": "layers",
    "patch_conv": "patch_embed",
    "attention": "self_attn",
    "feed_forward": "mlp",
    "attention_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}

#: The Pixtral tower's envoys, for every family that has it.
PIXTRAL_ENVOYS = {
    PixtralVisionModel: PixtralVision,
    PixtralAttentionLayer: PackedVisionLayer,
    PixtralAttention: PixtralVisionAttention,
    PixtralMLP: PackedVisionMlp,
}


# -- the grids (`envoys.image.grids`) --------------------------------------------------------------------


@dataclass(frozen=True)
class PixtralGrids:
    """Where each image's rows are on the Pixtral tower (Mistral 3, Llava-Pixtral).

    The stream is packed, ``[1, all patches, vision_hidden_size]``: image
    ``i``'s ``(height // patch_size) x (width // patch_size)`` patches (the
    processor's ``image_sizes``, in pixels), raster order, image after image;
    ``patch_embeddings`` (what enters ``ln_pre``) is laid out the same.
    The image tokens are one per ``merge x merge`` square of patches, raster
    order over the merged grid, image after image (``merge`` is
    ``spatial_merge_size`` on Mistral 3's projector, 1 on Llava-Pixtral's,
    which merges nothing); the ``[IMG_BREAK]`` and ``[IMG_END]`` tokens
    between and after the rows are not image tokens.
    """

    merge_of: Any = None  #: the host's merge side off its config; None: no merge (one token per patch)
    stream_dims: int = 2  # [1, all patches, ...]

    def patch_grid(self, inputs: ImageInputs, image: int) -> Grid:
        """Image ``image``'s patch grid over the packed row: raster order, after the images before it."""
        patches = self._grids(inputs, image, 1)
        return packed_raster(patches, image, stream=int(patches.prod(dim=1).sum()))

    def token_grid(self, inputs: ImageInputs, image: int) -> Grid:
        """Image ``image``'s merged grid over the image tokens: raster order, after the images before it."""
        merge = 1 if self.merge_of is None else self.merge_of(inputs.config)
        return packed_raster(self._grids(inputs, image, merge), image)

    @staticmethod
    def _grids(inputs: ImageInputs, image: int, merge: int) -> torch.Tensor:
        """long ``[images, 2]``: each image's grid of ``merge x merge`` squares of patches, off ``image_sizes``."""
        sizes = inputs["image_sizes"].cpu().long()
        check_image(image, sizes.shape[0])
        return sizes // (inputs.config.vision_config.patch_size * merge)


#: The grids of a host whose projector merges each ``spatial_merge_size`` x ``spatial_merge_size`` square of patches
#: into one image token (Mistral 3's patch merger, and its kin's).
MERGED_PIXTRAL_GRIDS = PixtralGrids(merge_of=lambda config: config.spatial_merge_size)
