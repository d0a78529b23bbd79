"""The Qwen ViT (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Qwen3.5): a packed tower with its merger inside.

The tower (``model.visual``, standard ``model.vision``) runs on
``[patches, vision_hidden_size]``: every image of the call, image after image,
each image's patches in merge-block order (``spatial_merge_size`` x
``spatial_merge_size`` blocks, each block's patches consecutive), so
``image_grid_thw`` (``[t, h, w]`` per image, in patches) splits it. Its stream
values are `PackedPatches`, ``[1, patches, vision_hidden_size]``
(a view: an in-place edit reaches the model). Its merger (``model.projector``)
folds each merge block into one image token inside the tower's forward, so
projector values are read before ``tower_output``.

The attention splits queries, keys and values at ``cu_seqlens`` and calls
the kernel once per image (once per window on Qwen2.5-VL's windowed blocks),
so the interior is served whole around those calls (`QwenVisionAttention`),
and the pattern, under eager, is every call's on the diagonal of one tensor
(`envoys.towers.per_image`).

Qwen2.5-VL permutes the stream into attention windows at the tower's entry:
its blocks' values, ``tower_output`` and the merger's output are in window
order (``vision.window_index`` says which merge unit is where); the tower
restores merge-block order after the merger, so ``image_features`` is in the
order the image tokens are scattered.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import transformers
from packaging.version import Version

try:
    from transformers.utils.generic import is_flash_attention_requested
except ImportError:  # transformers 4.x: flash attention is asked for by name

    def is_flash_attention_requested(config: Any) -> bool:
        return "flash" in (getattr(config, "_attn_implementation", None) or "")

from rewrites.qwen_vit_attention import FLASH_SITE, JOIN_SITE, PER_IMAGE_SITE, SPLIT_SITE
from rewrites.qwen_vit_windows import INDEX_SITE, WINDOW_SITE

from ..core.layouts import HeadOutputs, Keys, Layout, PackedPatches, Queries, Values
from ..core.pinning import pinned_value
from ..core.standard import missing_site
from ..core.values import Argument, EProperty, Field, Item, Selector, value
from ..image.frames import check_video, frames_raster
from ..image.grids import Grid, GridError, ImageInputs, check_image, raster, value_named
from ..text.blocks import either
from ..vision.tower import PackedVision, PackedVisionAttention, as_patches, from_patches, no_images, no_patch_embed, variable_resolution
from .per_image import PerCall, kernel_calls, per_call_pattern

#: The native names of the Qwen ViT's tower and blocks under the standard ones, shared by every family on it (and
#: by the GLM ViT's, which names them alike).
QWEN_VIT_RENAME = {
    "model.language_model.embed_tokens": "embed_tokens",
    "model.language_model.layers": "layers",
    "model.language_model.norm": "norm",
    "model.visual": "vision",
    "model.visual.merger": "projector",
    "blocks": "layers",
    "attn": "self_attn",
    "norm1": "input_layernorm",
    "norm2": "post_attention_layernorm",
    "attn.proj": "attn.o_proj",
}

SPLITS = 3  # the split's calls (SPLIT_SITE) in one forward of the attention: queries, keys, values


class WindowIndex(Layout):
    """[merge_units] long: which merge unit (of every image of the call) each window-order position holds."""


# -- the attention ---------------------------------------------------------------------------------


def flash(attention: Any) -> bool:
    """Whether this attention runs flash attention (one varlen call, no per-image split)."""
    return is_flash_attention_requested(attention._module.config)


@dataclass(frozen=True)
class Whole(Selector):
    """The whole tensor: argument 0 of the per-image split (``torch.split(tensor, lengths, dim=2)``), or
    argument ``index`` / ``name`` of the flash call (``attention_interface(self, query, key, value, ...)``),
    whichever call was served."""

    index: int
    name: str

    def _which(self, raw: Any) -> Argument:
        args, _ = raw
        return Argument(0, "tensor") if args and isinstance(args[0], torch.Tensor) else Argument(self.index, self.name)

    def get(self, raw: Any) -> Any:
        return self._which(raw).get(raw)

    def put(self, raw: Any, part: Any) -> Any:
        return self._which(raw).put(raw, part)


def whole_site(attention: Any) -> str:
    """Where the whole queries, keys and values are served: the split's input, or flash's call."""
    return f"{attention.path}.source.{FLASH_SITE if flash(attention) else SPLIT_SITE}.input"


def no_whole_site(attention: Any) -> str | None:
    return missing_site(attention, FLASH_SITE if flash(attention) else SPLIT_SITE)


def no_join(attention: Any) -> str | None:
    """Why the Qwen ViT's attention_head_outputs is unavailable, or None: flash attention takes the other branch."""
    if flash(attention):
        return (
            f"this model runs {attention._module.config._attn_implementation!r}: one varlen kernel call over every "
            f"image (attention_interface_1), so the per-image outputs are never joined (torch_cat_0 does not run); "
            f"load it with attn_implementation='eager' or 'sdpa' for attention_head_outputs"
        )
    return missing_site(attention, JOIN_SITE)


def whole(name: str, layout: type, what: str, argument: str, index: int, occurrence: int) -> EProperty:
    """Queries, keys or values, whole, at the split (its ``occurrence``-th call) or the flash call."""
    return pinned_value(
        name, layout, description=f"every image's {what} before the per-image split", shape="[1, heads, patches, head_dim]",
        key=whole_site, select=Whole(index, argument), unavailable=either(no_images, no_whole_site),
        occurrence=lambda attention: None if flash(attention) else occurrence, per_forward=lambda attention: SPLITS,
        doc=f"Every image's {what}, ``[1, heads, patches, head_dim]``, before the per-image split"
        + ("; after the 2D rotary embedding" if name != "attention_values" else "")
        + "; assign or edit in place.",
    )


class QwenVisionAttention(PackedVisionAttention):
    """The Qwen ViT's attention: one kernel call per image (or window), its interior read whole around them.

    ``attention_queries``, ``attention_keys`` and ``attention_values`` are the
    whole ``[1, heads, patches, head_dim]`` tensors (queries and keys after the
    2D rotary embedding) before the module splits them per image (the three
    calls of ``torch_split_0``, each pinned to its own), and
    ``attention_head_outputs`` is the per-image outputs concatenated back,
    ``[1, patches, heads, head_dim]`` (``torch_cat_0``), under any
    implementation but flash. ``attention_scores`` and
    ``attention_probabilities`` are ``[1, heads, patches, patches]`` under
    eager, each kernel call's pattern a diagonal block, nothing between
    (`envoys.towers.per_image.BlockDiagonal`); ``kernel_calls[k]`` is call
    ``k`` alone (image ``k``; its window on Qwen2.5-VL's windowed blocks,
    whose values are all in window order).
    """

    per_call = PerCall(call=PER_IMAGE_SITE, split=SPLIT_SITE, splits=SPLITS)
    kernel_calls = property(kernel_calls)

    attention_queries = whole("attention_queries", Queries, "queries", "query", 1, 0)
    attention_keys = whole("attention_keys", Keys, "keys", "key", 2, 1)
    attention_values = whole("attention_values", Values, "values", "value", 3, 2)

    attention_scores, attention_probabilities = per_call_pattern()

    attention_head_outputs = value(
        "attention_head_outputs", HeadOutputs, description="every image's per-head outputs joined back",
        shape="[1, patches, heads, head_dim]", key=lambda a: f"{a.path}.source.{JOIN_SITE}.output",
        unavailable=either(no_images, no_join),
        doc="Every image's per-head outputs concatenated back, ``[1, patches, heads, head_dim]``, before the output "
        "projection; assign or edit in place (the edit reaches the block's output).",
    )


# -- the tower -------------------------------------------------------------------------------------


#: Whether the installed release's Qwen towers return a model output whose ``last_hidden_state`` is the last block's
#: stream (transformers 5); 4.x's return the merger's output alone.
TOWER_RETURNS_ITS_STREAM = Version(transformers.__version__).major >= 5


def tower_output_at(vision: Any) -> tuple[str, Selector]:
    """Where the last block's stream is served: the tower's output's ``last_hidden_state``, or, where the tower
    returns only the merger's output (transformers 4.x), the merger's input."""
    if TOWER_RETURNS_ITS_STREAM:
        return f"{vision.path}.output", Field("last_hidden_state")
    return f"{vision.path}.merger.input", Argument(0, "x")


def window_index_at(vision: Any) -> tuple[str, Selector]:
    """Where the tower's window index is served, under its path: argument 1 of the permutation into windows, or,
    on a release that permutes inline, item 0 of the call computing the index."""
    if missing_site(vision, WINDOW_SITE) is None:
        return f"{WINDOW_SITE}.input", Argument(1, "window_index")
    return f"{INDEX_SITE}.output", Item(0)


def no_windows(vision: Any) -> str | None:
    """Why ``vision.window_index`` is unavailable, or None: only Qwen2.5-VL's tower attends in windows."""
    reason = no_images(vision)
    if reason is not None:
        return reason
    if vision.window_size is None:
        return f"this tower attends per image, not in windows: its blocks' values are in {vision.stream_order}"
    if missing_site(vision, INDEX_SITE) is None:
        return None
    return missing_site(vision, WINDOW_SITE)


class QwenVision(PackedVision):
    """The Qwen ViT (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Qwen3.5): packed, its merger inside, at ``model.visual``.

    The tower runs on ``[patches, vision_hidden_size]``, every image's patches
    concatenated, so its stream values are `PackedPatches`, 1 in the images axis,
    ``[1, patches, vision_hidden_size]``, and its blocks' attention is a
    `QwenVisionAttention`.

    The processor cuts each image into ``patch_size`` squares (two frames
    deep), and lays them out in ``spatial_merge_size`` x ``spatial_merge_size``
    blocks, each block's patches consecutive, images one after another; the
    merger folds each block into one image token. So ``patches`` runs over
    every image of the invoke, ``image_grid_thw`` (``[t, h, w]`` per image, in
    patches) splits it, and an image's patches are in merge-block order, not
    raster order. Qwen2.5-VL's tower further permutes them into attention
    windows at entry: its blocks' values, ``tower_output`` and the merger's
    output are in window order (``window_index``), and the tower restores the
    merge-block order after the merger, so ``image_features`` is in scatter
    order.

    The tower has no final norm, so ``tower_output`` is the last block's
    stream, the merger's input. It is served at the tower's output, after the
    merger has run, so ``projector.input`` and ``projector.output`` are read
    before ``tower_output``.

    Sizes, off the vision config: ``vision_hidden_size`` is the tower's width
    (``embed_dim`` on Qwen2-VL, whose config's ``hidden_size`` is the merger's
    output width), ``num_heads``, ``intermediate_size`` (Qwen2-VL's is
    ``embed_dim * mlp_ratio``), ``patch_size``, ``spatial_merge_size`` and
    ``window_size`` (Qwen2.5-VL's, in pixels; None on the others).
    ``image_size`` is Unavailable: the tower takes any resolution.
    """

    #: The order of each image's patches in the blocks' values (`no_windows` says it).
    stream_order = "merge-block order"

    image_sizes_are = (
        "each image's size is the processor's image_grid_thw, [t, h, w] in patches of patch_size pixels, "
        "which is also the tower's grid_thw argument"
    )

    patch_embeddings = value(
        "patch_embeddings", PackedPatches, description="every image's patch embeddings, before any position embedding",
        key=lambda v: f"{v.patch_embed.path}.output", select=None, unavailable=no_patch_embed, view=as_patches, inverse=from_patches,
        doc="Every image's patch embeddings, ``[1, patches, vision_hidden_size]``, image after image, each in "
        "merge-block order (the processor's), before any position embedding or window permutation. "
        "Assign a tensor of the same shape to replace it, or edit it in place.",
    )

    tower_output = value(
        "tower_output", PackedPatches, description="the last block's stream, the merger's input (there is no final norm)",
        key=lambda v: tower_output_at(v)[0], select=lambda v: tower_output_at(v)[1], unavailable=no_images, view=as_patches,
        inverse=from_patches,
        doc="The last block's stream, ``[1, patches, vision_hidden_size]``: the tower has no final norm, so this "
        "is what the merger (``model.projector``) reads. Served at the tower's output (its ``last_hidden_state``), "
        "after the merger has run: read projector values first. transformers 4.x's towers return the merger's "
        "output alone, so there it is served at the merger's input: read it before the projector values. In "
        "window order on Qwen2.5-VL.",
    )

    window_index = value(
        "window_index", WindowIndex, description="which merge unit each window-order position holds", shape="[merge_units]",
        key=lambda v: f"{v.path}.source.{window_index_at(v)[0]}", select=lambda v: window_index_at(v)[1],
        unavailable=no_windows,
        read_only="it is computed from image_grid_thw; the tower's other steps do not read it from here",
        doc="""Qwen2.5-VL: which merge unit (``spatial_merge_size**2`` consecutive patches, counted over every image of the
        call) sits at each position of the window order, ``[merge_units]``. The blocks' values are
        ``patches.reshape(units, merge**2, -1)[window_index]``, flattened back; ``torch.argsort(window_index)``
        restores merge-block order, as the tower does after the merger.

        Read it before the blocks' values. It is served where the forward has it: at the permutation into
        windows, after the patch embedding; on releases that permute inline (before transformers 5.17), at the
        call computing it, which transformers 5.9 to 5.16 make before the patch embedding, so there it is read
        before ``patch_embeddings``.""",
    )

    # -- sizes, off the vision config -------------------------------------------------------------

    @property
    def vision_hidden_size(self) -> int:
        """The tower's width: ``embed_dim`` where the config has one (Qwen2-VL), else ``hidden_size``."""
        config = self.vision_config
        return getattr(config, "embed_dim", None) or config.hidden_size

    @property
    def num_heads(self) -> int:
        return self.vision_config.num_heads

    @property
    def intermediate_size(self) -> int:
        """The MLP's width: the config's ``intermediate_size``, else ``embed_dim * mlp_ratio`` (Qwen2-VL)."""
        config = self.vision_config
        size = getattr(config, "intermediate_size", None)
        return size if size is not None else int(config.embed_dim * config.mlp_ratio)

    @property
    def spatial_merge_size(self) -> int:
        """The side, in patches, of the square block the merger folds into one image token."""
        return self.vision_config.spatial_merge_size

    @property
    def window_size(self) -> int | None:
        """Qwen2.5-VL's attention window side, in pixels; None on a tower that attends per image."""
        return getattr(self.vision_config, "window_size", None)

    image_size = property(variable_resolution, doc="Unavailable: the tower takes any resolution (variable_resolution).")


# -- the grids (`envoys.image.grids`) --------------------------------------------------------------------

#: Which value a Qwen grid is over (``of=``): the tower's rows are in window order on Qwen2.5-VL between the
#: tower's permutation into windows and the merger's inverse, in merge-block order outside it.
PATCH_VALUES = ("stream", "patch_embeddings")
TOKEN_VALUES = ("image_features", "projector_output")


def merge_block_rows(height: int, width: int, merge: int, units: torch.Tensor | None = None) -> torch.Tensor:
    """long ``[height, width]``: each patch's row among its image's, the processor's merge-block order.

    The processor lays an image's ``height x width`` patches out in ``merge x
    merge`` blocks, blocks in raster order over the ``(height / merge, width
    / merge)`` merged grid, each block's patches consecutive, in raster order
    within it. ``units`` (long ``[height / merge, width / merge]``) puts each
    block elsewhere: block ``(a, b)`` at position ``units[a, b]`` (window
    order); by default block ``(a, b)`` is ``a * (width / merge) + b``.
    """
    r = torch.arange(height).unsqueeze(1)
    c = torch.arange(width).unsqueeze(0)
    if units is None:
        units = torch.arange((height // merge) * (width // merge)).reshape(height // merge, width // merge)
    return units[r // merge, c // merge] * merge * merge + (r % merge) * merge + c % merge


def window_positions(height: int, width: int, side: int) -> torch.Tensor:
    """long ``[height, width]``: where each merge unit of a ``height x width`` merged grid is in window order.

    Qwen2.5-VL's tower cuts the merged grid into ``side x side`` windows
    (``window_size // spatial_merge_size // patch_size`` units; the last row
    and column of windows may be smaller) and lays the units out window by
    window, windows in raster order, units in raster order within each.
    """
    a = torch.arange(height).unsqueeze(1)
    b = torch.arange(width).unsqueeze(0)
    windows_across = -(-width // side)
    window = (a // side) * windows_across + b // side
    order = torch.argsort((window * height * width + a * width + b).reshape(-1))  # the tower's window_index, per image
    return torch.argsort(order).reshape(height, width)


class QwenGrids:
    """Where each image's rows are on the Qwen ViT (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Qwen3.5).

    The tower's stream is packed, ``[1, patches, vision_hidden_size]``: every
    image's ``t * h * w`` patches (the processor's ``image_grid_thw``; an
    image has ``t`` = 1), image after image, each image's in merge-block order
    (`merge_block_rows`). The image tokens are one per merge block, raster
    order over the ``(h / merge, w / merge)`` merged grid, image after image.

    Qwen2.5-VL's tower permutes its stream into attention windows at entry and
    the merger's output back after it, so the blocks' values, ``tower_output``
    and the merger's input (``projector.input``) and output
    (``projector.output``) are in window order (`window_positions`), while
    ``patch_embeddings`` and ``image_features`` (and the text's image tokens)
    are in merge-block order. A grid says which value it is over with ``of=``:
    ``vision.patch_grid(value, image=i)`` is over the blocks' stream (window
    order on Qwen2.5-VL), ``of="patch_embeddings"`` over the patch
    embeddings; ``vision.token_grid(value, image=i)`` is over the image
    tokens (``image_features``, the text's values), ``of="projector_output"``
    over the merger's output (window order on Qwen2.5-VL). On the towers that
    attend per image both orders are the same. Where the projector is a module
    after the tower (HyperCLOVAX's, ``merger_is_projector`` False), it reads the
    tower's output after the merge-block order is restored, so
    ``projector_output`` is in merge-block order there (the merger's own output,
    ``vision.merger.output``, is still in window order).
    """

    stream_dims = 2  # [1, patches, ...]

    def __init__(self, merger_is_projector: bool = True, frame_prefix: int = 0) -> None:
        self.merger_is_projector = merger_is_projector
        #: rows the blocks' stream holds before each frame's patches (LLaVA-OneVision-1.5's CLS row), which
        #: ``patch_embeddings`` and ``tower_output`` lack
        self.frame_prefix = frame_prefix

    def patch_grid(self, inputs: ImageInputs, image: int, of: str = "stream") -> Grid:
        """Image ``image``'s patch grid over the tower's packed rows: ``of`` "stream" (the blocks' values, in window
        order on Qwen2.5-VL, each frame's prefix rows before its patches where the tower has them) or
        "patch_embeddings" (merge-block order, no prefix rows: also ``tower_output`` where the tower drops them)."""
        stream = value_named(of, PATCH_VALUES, "Qwen ViT per-patch") == "stream"
        merge, units, sizes = self._image(inputs, image)
        height, width = (int(size) for size in sizes[image, 1:])
        prefix = self.frame_prefix if stream else 0
        rows = sizes.prod(dim=1) + sizes[:, 0] * prefix  # each image's rows: its frames' patches and prefix rows
        start = int(rows[:image].sum()) + prefix
        order = self._units(inputs, height // merge, width // merge) if stream else None
        grid = start + merge_block_rows(height, width, merge, order)
        return Grid(grid, slice(start - prefix, start + height * width), int(rows.sum()))

    def token_grid(self, inputs: ImageInputs, image: int, of: str = "image_features") -> Grid:
        """Image ``image``'s merged grid over the image tokens: ``of`` "image_features" (the image tokens' rows, the
        text's order) or "projector_output" (the projector's output: the merger's, in window order on Qwen2.5-VL)."""
        windowed = value_named(of, TOKEN_VALUES, "Qwen ViT per-token") == "projector_output" and self.merger_is_projector
        merge, units, sizes = self._image(inputs, image)
        height, width = (int(size) // merge for size in sizes[image, 1:])
        start = int(units[:image].sum())
        cells = self._units(inputs, height, width) if windowed else None
        cells = raster(height, width) if cells is None else cells
        return Grid(start + cells, slice(start, start + height * width))

    def video_token_grid(self, inputs: ImageInputs, video: int, mask: torch.Tensor) -> Grid:
        """Video ``video``'s grids over the video tokens, ``[temporal units, h / merge, w / merge]``: the tower
        encodes each ``temporal_patch_size`` frames as one unit, one token a merge block, raster order over each
        unit's merged grid, unit after unit, video after video (``video_grid_thw``: ``[videos, 3]``)."""
        sizes = inputs["video_grid_thw"].cpu().long()
        check_video(video, sizes.shape[0])
        vision = inputs.config.vision_config
        merge = getattr(vision, "spatial_merge_size", None) or vision.merge_size
        counts = sizes.prod(dim=1) // (merge * merge)
        units, height, width = (int(size) for size in sizes[video])
        start = int(counts[:video].sum())
        return Grid(frames_raster(start, units, height // merge, width // merge),
                    slice(start, start + int(counts[video])))

    def video_patch_grid(self, inputs: ImageInputs, video: int) -> Grid:
        """Video ``video``'s patch grids over the tower's run on the videos, ``[temporal units, h, w]``: every
        video's ``t * h * w`` patches (``video_grid_thw``), video after video, each temporal unit's in merge-block
        order (window order on Qwen2.5-VL, where the blocks attend per window), after its prefix rows where the
        tower has them. The blocks' kernel calls are one per temporal unit (a frame, as the grids count them)."""
        sizes = inputs["video_grid_thw"].cpu().long()
        check_video(video, sizes.shape[0])
        vision = inputs.config.vision_config
        merge = getattr(vision, "spatial_merge_size", None) or vision.merge_size
        frame_rows = sizes[:, 1] * sizes[:, 2] + self.frame_prefix  # a temporal unit's rows, its prefix included
        units, height, width = (int(size) for size in sizes[video])
        start = int((sizes[:, 0] * frame_rows)[:video].sum())
        stride = int(frame_rows[video])
        frame = merge_block_rows(height, width, merge, self._units(inputs, height // merge, width // merge))
        rows = start + self.frame_prefix + torch.arange(units).reshape(units, 1, 1) * stride + frame
        return Grid(rows, slice(start, start + units * stride), int((sizes[:, 0] * frame_rows).sum()))

    @staticmethod
    def _image(inputs: ImageInputs, image: int) -> tuple[int, torch.Tensor, torch.Tensor]:
        """The merge side, each image's merge units and ``image_grid_thw``, checking ``image`` is a still image."""
        sizes = inputs["image_grid_thw"].cpu()
        check_image(image, sizes.shape[0])
        if int(sizes[image, 0]) != 1:
            raise GridError(f"image {image} has {int(sizes[image, 0])} temporal patches (image_grid_thw "
                            f"{sizes[image].tolist()}): a grid is one frame's")
        vision = inputs.config.vision_config
        merge = getattr(vision, "spatial_merge_size", None) or vision.merge_size  # the Muse tower's: merge_size
        return merge, sizes.prod(dim=1) // (merge * merge), sizes

    @staticmethod
    def _units(inputs: ImageInputs, height: int, width: int) -> torch.Tensor | None:
        """Where each merge unit of an image's ``height x width`` merged grid is in the blocks' order: its window-order
        position on a windowed tower (Qwen2.5-VL), None (merge-block order) on the others."""
        vision = inputs.config.vision_config
        window = getattr(vision, "window_size", None)
        if window is None:
            return None
        return window_positions(height, width, window // vision.spatial_merge_size // vision.patch_size)


QWEN_GRIDS = QwenGrids()
