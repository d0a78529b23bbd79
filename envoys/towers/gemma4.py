"""Gemma 4: a tower whose patch axis is padded to a fixed row count, and Gemma's sandwich-normed blocks.

The tower (``model.vision_tower``, standard ``model.vision``) takes the image
processor's pre-patchified pixels, ``[images, rows, 3 * patch_size**2]``: each
image resized (aspect ratio kept) to at most ``max_soft_tokens *
pooling_kernel_size**2`` patches, cut into flat patches in raster order, then
padded with zero patches to exactly that many ``rows`` (the processor's
soft-token budget times the pooling area: 70 * 3**2 = 630 rows at the
smallest budget of a real checkpoint). Which rows are real is read off the
processor's ``image_position_ids`` (``[images, rows, 2]``, the patch's (x, y),
``(-1, -1)`` on a padded row): `Gemma4Vision.patch_mask` serves it. Padding
shows the same way on every tower value: an image's real patches are its
first rows, the rest are padding, which the blocks compute like any row but
mask as keys, so no real row attends to them; the pooler zeroes them and
they never reach the text model.

A linear patch embedder (``patch_embed.input_proj``) projects each flat patch,
then adds a learned 2D position embedding (zero on padded rows). The blocks
attend under a bidirectional mask that hides the padded keys (every query,
real or padded, attends to the image's real patches only), with 2D rotary
embeddings on queries and keys. After the last block (there is no final norm)
the pooler zeroes the padded rows, averages each ``pooling_kernel_size`` x
``pooling_kernel_size`` block of real patches into one soft token, scales by
``sqrt(vision_hidden_size)`` and drops the padding: every image's soft tokens,
``[image_tokens, vision_hidden_size]``, concatenated, are what the projector
(``embed_vision``) receives, and the tower's own ``last_hidden_state``.

Gemma's blocks (tower and text) are sandwich-normed: the block adds
``post_attention_layernorm(self_attn(...))`` and
``post_feedforward_layernorm(mlp(...))`` to the stream, so
``attention_output`` and ``mlp_output`` are those norms' outputs, not the
attention's and the MLP's own. A text block may further add a per-layer
input branch and scales its output by ``layer_scalar`` (`envoys.blocks.per_layer_input`).
"""

from __future__ import annotations

from typing import Any

import torch

from ..blocks.sandwich import ATTENTION_POST_NORM, MLP_POST_NORM, SandwichNorms, post_norm_output, sandwich_stream_values
from ..core.layouts import Patches, PatchMask
from ..core.standard import Standard, child
from ..core.values import Field, Unavailable, documented, value
from ..image.frames import check_video
from ..image.grids import Grid, GridError, ImageInputs, check_image
from ..vision.tower import FIRST_STEP_ONLY, VISION_ORDER, Vision, VisionAttention, VisionMlp, no_images, variable_resolution

#: How the padded patch axis shows, said once for every tower value's docstring.
PADDING = (
    "Each image's real patches are its first rows, in raster order; the rows after them, up to the processor's "
    "fixed row count (max_soft_tokens * pooling_kernel_size**2), are padding: vision.patch_mask, off the "
    "processor's image_position_ids ((-1, -1) on a padded row), says which."
)


def real_patches(image_position_ids: torch.Tensor) -> torch.Tensor:
    """``[images, patches]`` bool, True on the rows that hold a real patch: the processor pads with ``(-1, -1)``."""
    return ~(image_position_ids == -1).all(dim=-1)


def patch_cells(image_position_ids: torch.Tensor) -> torch.Tensor:
    """long ``[height, width]``: for each patch of one image, its row on the padded patch axis; -1 where none is.

    ``image_position_ids`` is the processor's ``[patches, 2]`` for the image,
    each real patch's (x, y), ``(-1, -1)`` on a padded row; the grid is as
    tall and wide as the real patches reach.
    """
    real = real_patches(image_position_ids[None])[0]
    x, y = image_position_ids[real, 0], image_position_ids[real, 1]
    cells = torch.full((int(y.max()) + 1, int(x.max()) + 1), -1, dtype=torch.long)
    cells[y, x] = real.nonzero().squeeze(1).cpu()
    return cells


def pooled_cells(image_position_ids: torch.Tensor, kernel: int) -> torch.Tensor:
    """long ``[height // kernel, width // kernel]``: for each pooled cell of one image, its soft token; -1 where none.

    The pooler averages the real patches of each ``kernel x kernel`` cell into
    one soft token and keeps the cells that hold a patch, in raster order.
    """
    real = real_patches(image_position_ids[None])[0]
    x, y = image_position_ids[real, 0].cpu() // kernel, image_position_ids[real, 1].cpu() // kernel
    present = torch.zeros(int(y.max()) + 1, int(x.max()) + 1, dtype=torch.bool)
    present[y, x] = True
    order = present.reshape(-1).long().cumsum(0).reshape(present.shape) - 1
    return torch.where(present, order, -1)


def grid_from(cells: torch.Tensor, start: int, length: int, stream: int | None = None) -> Grid:
    """The `Grid` of an image whose ``length`` rows begin at ``start``, ``cells`` counting from its first (-1 kept),
    in a value of ``stream`` rows where known."""
    return Grid(torch.where(cells >= 0, cells + start, cells), slice(start, start + length), stream)


class Gemma4Grids:
    """Where each image's rows are on Gemma 4's tower: padded rows dropped, soft tokens on the pooled grid.

    The stream is ``[images, patches, vision_hidden_size]`` over the padded
    patch axis (`PADDING`): each real patch's row is where the processor's
    ``image_position_ids`` puts it (`patch_cells`), the padded rows belong to
    no cell. The image tokens are the pooler's soft tokens, one per
    ``pooling_kernel_size``-square cell of real patches, raster order over
    the pooled grid (`pooled_cells`), image after image.
    """

    stream_dims = 2  # [images, patches, ...]

    def patch_grid(self, inputs: ImageInputs, image: int) -> Grid:
        """Image ``image``'s patch grid over the stream's rows (images by padded patches, flattened)."""
        positions = self._positions(inputs, image)
        rows = positions.shape[1]
        return grid_from(patch_cells(positions[image]), image * rows, rows, positions.shape[0] * rows)

    def token_grid(self, inputs: ImageInputs, image: int) -> Grid:
        """Image ``image``'s pooled grid over the image tokens (the soft tokens, image after image)."""
        positions = self._positions(inputs, image)
        kernel = self.token_kernel(inputs)
        start = sum(int((pooled_cells(positions[before], kernel) >= 0).sum()) for before in range(image))
        cells = pooled_cells(positions[image], kernel)
        return grid_from(cells, start, int((cells >= 0).sum()))

    def video_token_grid(self, inputs: ImageInputs, video: int, mask: torch.Tensor) -> Grid:
        """Video ``video``'s grids over the video tokens, ``[frames, h, w]``: each sampled frame pooled as an image
        is (``video_position_ids``, one row of frames for every video's, ``num_frames_per_video`` of them each),
        frame after frame, video after video."""
        per_video = inputs["num_frames_per_video"].cpu().long()
        check_video(video, per_video.shape[0])
        positions, kernel = inputs["video_position_ids"], self.token_kernel(inputs)
        frames = [pooled_cells(positions[frame], kernel) for frame in range(int(per_video.sum()))]
        counts = [int((cells >= 0).sum()) for cells in frames]
        first = int(per_video[:video].sum())
        mine = frames[first:first + int(per_video[video])]
        if len({tuple(cells.shape) for cells in mine}) != 1:
            raise GridError(f"video {video}'s frames were pooled to grids of different shapes")
        start = sum(counts[:first])
        offsets = [start + sum(counts[first:first + index]) for index in range(len(mine))]
        rows = torch.stack([grid_from(cells, offset, 0).rows for cells, offset in zip(mine, offsets)])
        return Grid(rows, slice(start, start + sum(counts[first:first + len(mine)])))

    def token_kernel(self, inputs: ImageInputs) -> int:
        """The side, in patches, of the square block of real patches that makes one image token: the pooler's."""
        return inputs.config.vision_config.pooling_kernel_size

    @staticmethod
    def _positions(inputs: ImageInputs, image: int) -> torch.Tensor:
        positions = inputs["image_position_ids"]
        check_image(image, positions.shape[0])
        return positions


GEMMA4_GRIDS = Gemma4Grids()


# -- Gemma's sandwich-normed block ----------------------------------------------------------------


# -- the tower ------------------------------------------------------------------------------------


class Gemma4VisionLayer(SandwichNorms, Standard):
    """A Gemma 4 tower block, sandwich-normed: ``layer_input + attention_output + mlp_output == layer_output``.

    Every value is ``[images, patches, vision_hidden_size]`` over the padded
    patch axis (`PADDING`); ``attention_output`` and ``mlp_output`` are the
    outputs of ``post_attention_layernorm`` and ``post_feedforward_layernorm``.
    """

    order_hint = VISION_ORDER
    first_step_only = FIRST_STEP_ONLY

    layer_input, attention_output, mlp_output, layer_output = sandwich_stream_values(Patches, no_images, PADDING)


_KEYS = "padded keys are masked: every query's probabilities are zero on them and sum to 1 over the image's real patches"
_INTERIOR_DOCS = {
    "attention_queries": "The queries the kernel receives, ``[images, heads, patches, head_dim]``, after the 2D rotary "
    "embedding, over the padded patch axis (padded rows are queries too).",
    "attention_keys": f"The keys the kernel receives, ``[images, key_value_heads, patches, head_dim]``, after the 2D "
    f"rotary embedding, over the padded patch axis; {_KEYS}.",
    "attention_values": "The values the kernel receives, ``[images, key_value_heads, patches, head_dim]``, over the "
    "padded patch axis (a padded row's value gets weight zero).",
    "attention_scores": "The scores entering the softmax, mask added, ``[images, heads, patches, patches]``: the "
    "padded keys' columns hold the mask's minimum.",
    "attention_probabilities": f"The softmax's output, ``[images, heads, patches, patches]``; {_KEYS}.",
    "attention_head_outputs": "Each head's output, ``[images, patches, heads, head_dim]``, before the output "
    "projection, over the padded patch axis.",
}


class Gemma4VisionAttention(VisionAttention):
    """A Gemma 4 tower block's attention: one kernel call over the padded patch axis, padded keys masked.

    The interior is the text attention's, one row per image, read at the
    kernel call; queries and keys are after q_norm / k_norm and the 2D
    rotary embedding, values after v_norm. The mask hides the padded keys
    from every query (`PADDING`), so ``attention_probabilities`` is zero on
    them and each row sums to 1 over the image's real patches; the padded
    queries' rows are computed too, and are as meaningless as the rows.
    """

    attention_output = post_norm_output("attention_output", Patches, "attention", ATTENTION_POST_NORM, no_images)
    attention_queries = documented(VisionAttention.attention_queries, _INTERIOR_DOCS["attention_queries"])
    attention_keys = documented(VisionAttention.attention_keys, _INTERIOR_DOCS["attention_keys"])
    attention_values = documented(VisionAttention.attention_values, _INTERIOR_DOCS["attention_values"])
    attention_scores = documented(VisionAttention.attention_scores, _INTERIOR_DOCS["attention_scores"])
    attention_probabilities = documented(
        VisionAttention.attention_probabilities, _INTERIOR_DOCS["attention_probabilities"]
    )
    attention_head_outputs = documented(VisionAttention.attention_head_outputs, _INTERIOR_DOCS["attention_head_outputs"])


class Gemma4VisionMlp(VisionMlp):
    """A Gemma 4 tower block's MLP: ``mlp_output`` is what it adds to the stream, after
    ``post_feedforward_layernorm``, the block's ``mlp_output``."""

    mlp_output = post_norm_output("mlp_output", Patches, "MLP", MLP_POST_NORM, no_images)


def real_rows(inputs: Any) -> torch.Tensor:
    """Which rows of the padded patch axis are real, off the root's ``(args, kwargs)``: its ``image_position_ids``."""
    args, kwargs = inputs
    positions = kwargs.get("image_position_ids")
    if positions is None:
        raise ValueError(
            "vision.patch_mask reads the processor's image_position_ids, and this forward was given none "
            "(a forward without an image, such as a decode step under generate)"
        )
    return real_patches(positions)


def no_patch_embedder(vision: Any) -> str | None:
    """Why ``vision.patch_embeddings`` is unavailable, or None."""
    reason = no_images(vision)
    if reason is not None:
        return reason
    embed = child(vision, "patch_embed")
    return None if embed is not None and child(embed, "input_proj") is not None else "this tower names no patch_embed.input_proj"


class Gemma4Vision(Vision):
    """Gemma 4's tower: a linear patch embedder on pre-patchified pixels, the patch axis padded to a fixed row count.

    Its stream values are `Patches`, ``[images, patches, vision_hidden_size]``,
    where ``patches`` is the processor's fixed row count
    (``max_soft_tokens * pooling_kernel_size**2``, `patch_rows`) whatever the
    image's size: an image's real patches come first, in raster order, and
    the rest is padding (`PADDING`; `patch_mask` says which rows are real,
    and ``patch_grid`` puts an image's real rows back on its patch grid,
    `Gemma4Grids`).
    The blocks mask the padded keys (`Gemma4VisionAttention`). There is no
    final norm: ``tower_output`` is the last block's stream, padding
    included; the pooler then makes one soft token of each
    ``pooling_kernel_size``-square block of real patches and drops the
    padding, so ``projector.input`` (``embed_vision``'s) is
    ``[image_tokens, vision_hidden_size]``, every image's soft tokens
    concatenated. ``image_size`` is Unavailable: the processor resizes each
    image to its own size within the patch budget.
    """

    image_sizes_are = (
        "each image is resized, keeping its aspect ratio, to fill the processor's patch budget "
        "(max_soft_tokens * pooling_kernel_size**2 patches of patch_size pixels); its real patches are the rows "
        "of vision.patch_mask (the processor's image_position_ids hold each patch's (x, y))"
    )

    patch_mask = value(
        "patch_mask", PatchMask, description="which patch rows are real", key=lambda v: f"{v.root.path}.input",
        unavailable=no_images, read_only="it is where the processor padded the patch axis; change the images instead",
        view=real_rows,
        doc="""Which rows of the padded patch axis hold a real patch, ``[images, patches]`` bool.

        Read off the root's ``image_position_ids`` (the processor's; ``(-1, -1)``
        marks a padded row) before anything runs, so read it first, as
        ``image_token_mask``. Each image's True rows come first.
        """,
    )

    patch_embeddings = value(
        "patch_embeddings", Patches, description="every image's projected patches before the position embedding",
        key=lambda v: f"{v.patch_embed.path}.input_proj.output", select=None, unavailable=no_patch_embedder,
        doc="Every image's flat patches projected by the linear patch embedder (``patch_embed.input_proj``), "
        "``[images, patches, vision_hidden_size]``, before the 2D position embedding is added. " + PADDING
        + " A padded row is the projection of the processor's zero patch (rescaled to -1), the same for every "
        "padded row; its position embedding is zero.",
    )

    tower_output = value(
        "tower_output", Patches, description="the last block's stream, padding included (there is no final norm)",
        key=lambda v: f"{v.encoder.path}.output", select=Field("last_hidden_state"), unavailable=no_images,
        doc="The last block's stream, ``[images, patches, vision_hidden_size]`` (the tower has no final norm), "
        "before the pooler. " + PADDING + " The pooler zeroes the padded rows, averages each "
        "pooling_kernel_size-square block of real patches, scales by sqrt(vision_hidden_size) and drops the "
        "padding (then standardises, on a checkpoint configured to): that is projector.input.",
    )

    # -- sizes, off the vision config (image_size: variable resolution) -----------------------------

    @property
    def pooling_kernel_size(self) -> int:
        """The side, in patches, of the square block the pooler averages into one soft token."""
        return self.vision_config.pooling_kernel_size

    @property
    def patch_rows(self) -> int:
        """The padded patch axis' length: the processor's ``max_soft_tokens * pooling_kernel_size**2``."""
        reason = no_images(self)
        if reason is not None:
            raise Unavailable(f"vision.patch_rows is the processor's: {reason}")
        image_processor = self.root.processor.image_processor
        return image_processor.max_soft_tokens * image_processor.pooling_kernel_size**2

    image_size = property(variable_resolution, doc="Unavailable: each image keeps its aspect ratio (variable_resolution).")


# -- the text block -------------------------------------------------------------------------------


