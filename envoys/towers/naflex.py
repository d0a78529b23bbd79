"""SigLIP2's NaFlex tower: a linear patch embedding on pre-patchified pixels, each image's row padded, padded keys masked.

``Siglip2VisionModel`` takes the image processor's flat patches, ``[images,
rows, 3 * patch_size**2]``: each image resized, aspect ratio kept, to a grid
of ``spatial_shapes[i]`` = (height, width) patches, cut into patches in raster
order and padded with zero patches to the processor's fixed row count. Which
rows are real is the processor's ``pixel_attention_mask`` (``[images, rows]``,
1 on a real patch): `NaflexVision.patch_mask` serves it. The embedding
(``embeddings``) projects each flat patch (``patch_embedding``, a Linear),
then adds the learned square position table resized (bilinear, antialiased)
to the image's grid, its first position repeated on the padded rows. The
blocks are SigLIP's, under a bidirectional mask that hides the padded keys
from every query, and ``post_layernorm`` normalises every row.
"""

from __future__ import annotations

from typing import Any

from ..core.layouts import Patches, PatchMask
from ..core.values import Field, documented, value
from ..vision.tower import Vision, VisionAttention, no_images, no_patch_embed, variable_resolution

#: How the padded patch axis shows, said once for every tower value's docstring.
PADDING = (
    "Each image's real patches are its first rows, in raster order over its spatial_shapes grid; the rows after "
    "them, up to the processor's fixed row count, are padding: vision.patch_mask (the processor's "
    "pixel_attention_mask) says which."
)

_KEYS = "padded keys are masked: every query's probabilities are zero on them and sum to 1 over the image's real patches"


class NaflexAttention(VisionAttention):
    """A NaFlex tower block's attention: SigLIP's, one kernel call over the padded patch axis, padded keys masked.

    The interior is the text attention's, one row per image, read at the
    kernel call; the mask hides the padded keys from every query (`PADDING`),
    so ``attention_probabilities`` is zero on them and each row sums to 1 over
    the image's real patches; the padded queries' rows are computed too, and
    are as meaningless as the rows they belong to.
    """

    attention_keys = documented(
        VisionAttention.attention_keys,
        f"The keys the kernel receives, ``[images, heads, patches, head_dim]``, over the padded patch axis; {_KEYS}.",
    )
    attention_scores = documented(
        VisionAttention.attention_scores,
        "The scores entering the softmax, mask added, ``[images, heads, patches, patches]``: the padded keys' "
        "columns hold the mask's minimum.",
    )
    attention_probabilities = documented(
        VisionAttention.attention_probabilities,
        f"The softmax's output, ``[images, heads, patches, patches]``; {_KEYS}.",
    )


def real_rows(inputs: Any) -> Any:
    """Which rows of the padded patch axis are real, off the root's ``(args, kwargs)``: its ``pixel_attention_mask``."""
    args, kwargs = inputs
    mask = kwargs.get("pixel_attention_mask")
    if mask is None:
        raise ValueError(
            "vision.patch_mask reads the processor's pixel_attention_mask, and this forward was given none "
            "(a forward without an image, such as a decode step under generate)"
        )
    return mask.bool()


class NaflexVision(Vision):
    """SigLIP2's NaFlex tower: each image on its own grid of patches, its row padded to a fixed count.

    Its stream values are `Patches`, ``[images, patches, vision_hidden_size]``,
    ``patches`` the processor's fixed row count whatever the image's size
    (`PADDING`; `patch_mask` says which rows are real). ``tower_output`` is
    ``post_layernorm``'s output over every row, padding included.
    ``image_size`` is Unavailable: each image keeps its aspect ratio.
    """

    image_sizes_are = (
        "the processor resizes each image, keeping its aspect ratio, to a grid of patches within its budget; "
        "spatial_shapes holds each image's (height, width) in patches, and vision.patch_mask its real rows"
    )

    patch_mask = value(
        "patch_mask", PatchMask, description="which patch rows are real", key=lambda v: f"{v.root.path}.input",
        unavailable=no_images, read_only="it is where the processor padded the patch axis; change the images instead",
        view=real_rows,
        doc="""Which rows of the padded patch axis hold a real patch, ``[images, patches]`` bool.

        The root's ``pixel_attention_mask`` (the processor's, 1 on a real
        patch) as booleans, read before anything runs, so read it first, as
        ``image_token_mask``. Each image's True rows come first.
        """,
    )

    patch_embeddings = value(
        "patch_embeddings", Patches, description="every image's projected patches before the position embedding",
        key=lambda v: f"{v.patch_embed.path}.output", select=None, unavailable=no_patch_embed,
        doc="Every image's flat patches projected by the linear patch embedding (``patch_embed``), ``[images, "
        "patches, vision_hidden_size]``, before the resized position embedding is added. " + PADDING
        + " A padded row is the projection of the processor's zero patch, the same for every padded row.",
    )

    tower_output = value(
        "tower_output", Patches, description="the last block's stream after post_layernorm, padding included", key="output",
        select=Field("last_hidden_state"), unavailable=no_images,
        doc="The tower's ``last_hidden_state``: the last block's stream after ``post_layernorm`` (the tower's "
        "norm), ``[images, patches, vision_hidden_size]``. " + PADDING,
    )

    image_size = property(variable_resolution, doc="Unavailable: each image keeps its aspect ratio (variable_resolution).")
