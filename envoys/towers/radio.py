"""RADIO (C-RADIO; the tower of Nemotron-H Omni): packed, cls and register tokens per image, per-image attention.

The wrapper hands the tower every image of the call as one row of patches
(``pixel_values`` ``[all patches, channels * patch_size**2]``, the processor's
``image_grid_hw`` giving each image's ``[h, w]`` grid in patches). The patch
projection (``vision.patch_embed``, a linear layer) embeds them, and the
embedder adds each image's position embedding and puts ``num_cls_tokens`` cls
then ``num_registers`` register tokens before each image's patches, so the
blocks run on ``[1, tokens, vision_hidden_size]`` where image ``i`` holds
``num_prefix_tokens + h_i * w_i`` consecutive rows: its cls tokens, its
registers, then its patches in raster order.

The attention calls the kernel once over the row for a single image and once
per image when several are packed (``cu_seqlens``, from the encoder), so the
queries, keys and values are served whole, at the projections, on every
branch (`RadioVisionAttention`), and under eager the pattern is every call's
on the diagonal of one tensor (`envoys.towers.per_image`). A block scales what its attention and its MLP add
(``layer_scale1``, ``layer_scale2``) before the residual, so those scaled
outputs are its ``attention_output`` and ``mlp_output`` (`RadioVisionLayer`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from rewrites.radio_attention import ONE_IMAGE_SITE, PER_IMAGE_SITE, PROJECTION_SITES, SPLIT_SITE

from ..core.layouts import HeadOutputs, Keys, PackedPatches, Queries, Values
from ..core.standard import child, missing_site
from ..core.values import Argument, EProperty, Field, value
from ..image.grids import Grid, ImageInputs, check_image, packed_raster, raster, value_named
from ..text.blocks import either, lacks
from ..vision.tower import PackedVision, PackedVisionAttention, PackedVisionLayer, as_patches, from_patches, no_images, no_patch_embed
from .per_image import PerCall, kernel_calls, per_call_pattern
from .qwen import variable_resolution


def projected(name: str, layout: type, what: str, site: str) -> EProperty:
    """Queries, keys or values, whole, ``[1, heads, tokens, head_dim]``, as the projection's transpose returns them."""
    return value(
        name, layout, description=f"every image's {what}, cls and register tokens included, before any per-image split",
        key=lambda attention: f"{attention.path}.source.{site}.output", select=None,
        unavailable=either(no_images, lambda attention: missing_site(attention, site)),
        doc=f"Every image's {what}, ``[1, heads, tokens, head_dim]``, each image's cls and register tokens then its "
        f"patches, image after image (no rotary embedding): what the kernel receives whole for a single image and "
        f"split at ``cu_seqlens`` for several. Assign or edit in place; the write reaches every branch.",
    )


def per_head(attention: Any, joined: torch.Tensor) -> torch.Tensor:
    """The output projection's input, ``[1, tokens, heads * head_dim]``, as ``[1, tokens, heads, head_dim]`` (a view)."""
    return joined.unflatten(-1, (attention._module.num_attention_heads, attention._module.head_dim))


class RadioVisionAttention(PackedVisionAttention):
    """RADIO's attention: the interior whole, around one kernel call for one image or one per image for several.

    ``attention_queries``, ``attention_keys`` and ``attention_values`` are read
    where the projections return them (``transpose_0..2``), which every branch
    runs (dense for one image, flash varlen, or one call per image), so they
    are the same value whatever the image count or implementation.
    ``attention_head_outputs`` is what the output projection receives, every
    image's heads joined back. Under eager, ``attention_scores`` and
    ``attention_probabilities`` are ``[1, heads, tokens, tokens]``: the dense
    call's pattern for one image, each image's call's on the diagonal for
    several (`envoys.towers.per_image.BlockDiagonal`); ``kernel_calls[k]`` is
    image ``k``'s call alone.
    """

    attention_queries = projected("attention_queries", Queries, "queries", PROJECTION_SITES[0])
    attention_keys = projected("attention_keys", Keys, "keys", PROJECTION_SITES[1])
    attention_values = projected("attention_values", Values, "values", PROJECTION_SITES[2])

    per_call = PerCall(call=PER_IMAGE_SITE, split=SPLIT_SITE, one_call=ONE_IMAGE_SITE)
    kernel_calls = property(kernel_calls)
    attention_scores, attention_probabilities = per_call_pattern()

    def takes_one_call(self) -> bool:
        """Whether the forward takes the dense call: one image in the batch (the encoder passes no ``cu_seqlens``)."""
        inputs = self.root.__dict__.get("last_image_inputs")
        return inputs is not None and int(inputs["image_grid_hw"].shape[0]) == 1

    attention_head_outputs = value(
        "attention_head_outputs", HeadOutputs, description="every image's per-head outputs, joined",
        shape="[1, tokens, heads, head_dim]", key=lambda a: f"{child(a, 'o_proj').path}.input",
        select=Argument(0, "input"), unavailable=no_images,
        view=per_head, inverse=lambda attention, written, current: written.reshape(current.shape), needs_envoy=True,
        doc="Every image's per-head outputs, ``[1, tokens, heads, head_dim]``, as the output projection receives them "
        "(the kernel's output for one image, the per-image outputs concatenated for several); a view, so an in-place "
        "edit reaches the block, as does an assignment.",
    )


def scaled(name: str, what: str, scale: str) -> EProperty:
    """What the block's ``what`` adds to the stream: its output after the layer scale ``scale``."""
    return value(
        name, PackedPatches, description=f"what the {what} adds to the stream, after its layer scale",
        key=lambda block: f"{child(block, scale).path}.output", select=None, unavailable=either(no_images, lacks(scale)),
        view=as_patches, inverse=from_patches,
        doc=f"What the {what} adds to the stream, ``[1, tokens, vision_hidden_size]``: its output times the block's "
        f"``{scale}`` (RADIO's blocks scale each branch before the residual; dropout and drop path are off in eval).",
    )


class RadioVisionLayer(PackedVisionLayer):
    """A RADIO block, ``[1, tokens, vision_hidden_size]``: ``layer_input + attention_output + mlp_output == layer_output``.

    ``attention_output`` and ``mlp_output`` are read after the layer scales
    (``layer_scale1``, ``layer_scale2``), which is what the residual adds; the
    attention module's own output (``self_attn.output[0]``) and the MLP's are
    before them.
    """

    attention_output = scaled("attention_output", "attention", "layer_scale1")
    mlp_output = scaled("mlp_output", "MLP", "layer_scale2")


class RadioVision(PackedVision):
    """RADIO: packed, ``num_prefix_tokens`` cls and register tokens before each image's patches, at ``vision_model``.

    Every stream value is `PackedPatches`, 1 in the images axis,
    ``[1, tokens, vision_hidden_size]``: image after image, each image's
    ``num_cls_tokens`` cls tokens, its ``num_registers`` register tokens, then
    its ``h * w`` patches in raster order (``image_grid_hw``, the processor's and
    the tower's argument). ``patch_embeddings`` has no prefix rows:
    ``[1, patches, vision_hidden_size]``. The tower has no final norm, so
    ``tower_output`` is the last block's stream; the wrapper drops the prefix
    rows, pixel-shuffles each image's patches and projects them (and
    Nemotron-H Omni checkpoints with multi-token prediction layers normalise
    the features first, in the wrapper's ``vision_final_layernorm``).

    Sizes, off the tower's config: ``vision_hidden_size``, ``num_heads``,
    ``patch_size``, ``num_cls_tokens``, ``num_registers``,
    ``num_prefix_tokens``; ``intermediate_size`` off the first block's MLP (the
    config says ``mlp_ratio``). ``image_size`` is Unavailable: the processor
    gives each image its own grid.
    """

    image_sizes_are = (
        "each image's size is the processor's image_grid_hw, [h, w] in patches of patch_size pixels, which is also "
        "the tower's image_grid_hw argument"
    )

    patch_embeddings = value(
        "patch_embeddings", PackedPatches, description="every image's patch embeddings, before position embeddings and prefix tokens",
        key=lambda v: f"{v.patch_embed.path}.output", select=None, unavailable=no_patch_embed, view=as_patches, inverse=from_patches,
        doc="Every image's patch embeddings, ``[1, patches, vision_hidden_size]``, image after image, each in raster "
        "order: the patch projection's output, before the position embedding is added and the cls and register "
        "tokens are put in front. Assign a tensor of the same shape to replace it, or edit it in place.",
    )

    tower_output = value(
        "tower_output", PackedPatches, description="the last block's stream (there is no final norm), prefix tokens included",
        key="output", select=Field("last_hidden_state"), unavailable=no_images, view=as_patches, inverse=from_patches,
        doc="The last block's stream, ``[1, tokens, vision_hidden_size]``, each image's cls and register tokens "
        "then its patches: the tower has no final norm. The wrapper reads the patch rows of it (the tower's "
        "``features``), pixel-shuffles and projects them.",
    )

    @property
    def intermediate_size(self) -> int:
        """The MLP's width, off the first block's MLP: ``mlp_ratio * vision_hidden_size`` (two thirds of it,
        rounded up to 8, for a SwiGLU MLP)."""
        mlp = self.layers[0].mlp._module
        return (mlp.fc1 if hasattr(mlp, "fc1") else mlp.up_proj).out_features

    @property
    def num_cls_tokens(self) -> int:
        """The cls (summary) tokens at the start of each image's rows."""
        return self.vision_config.num_cls_tokens

    @property
    def num_registers(self) -> int:
        """The register tokens after each image's cls tokens, before its patches."""
        return self.vision_config.num_registers

    @property
    def num_prefix_tokens(self) -> int:
        """The rows before each image's patches: ``num_cls_tokens + num_registers``."""
        return self.vision_config.num_summary_tokens

    image_size = property(variable_resolution, doc="Unavailable: each image has its own grid (variable_resolution).")


# -- the grids (`envoys.image.grids`) --------------------------------------------------------------------

#: Which value a RADIO patch grid is over (``of=``): the blocks' stream has each image's prefix rows, the patch
#: embeddings have none.
PATCH_VALUES = ("stream", "patch_embeddings")


@dataclass(frozen=True)
class RadioGrids:
    """Where each image's rows are on a RADIO tower: its cls and register rows dropped, packed images split.

    The blocks' stream is ``[1, tokens, vision_hidden_size]``: per image, its
    ``num_cls_tokens + num_registers`` prefix rows then its ``h x w``
    patches in raster order (the processor's ``image_grid_hw``), image after
    image; ``patch_embeddings`` is the same without the prefix rows, so its
    grid is asked for with ``of="patch_embeddings"``. The image tokens are one
    per ``merge x merge`` square of patches (the host's pixel shuffle;
    ``merge_of`` reads it off the host's config), raster order over the
    merged grid, image after image.
    """

    merge_of: Any  #: the host's pixel-shuffle side off its config
    stream_dims: int = 2  # [1, tokens, ...]

    def patch_grid(self, inputs: ImageInputs, image: int, of: str = "stream") -> Grid:
        """Image ``image``'s patch grid over the packed rows: ``of`` "stream" (the blocks' values, prefix rows
        included) or "patch_embeddings" (no prefix rows)."""
        value_named(of, PATCH_VALUES, "RADIO per-patch")
        sizes = self._sizes(inputs, image)
        prefix = inputs.config.vision_config.num_summary_tokens if of == "stream" else 0
        start = int(sizes[:image].prod(dim=1).sum()) + image * prefix
        height, width = (int(side) for side in sizes[image])
        stream = int(sizes.prod(dim=1).sum()) + sizes.shape[0] * prefix
        return Grid(raster(height, width, start + prefix), slice(start, start + prefix + height * width), stream)

    def token_grid(self, inputs: ImageInputs, image: int) -> Grid:
        """Image ``image``'s merged grid over the image tokens: raster order, after the images before it."""
        return packed_raster(self._sizes(inputs, image) // self.merge_of(inputs.config), image)

    @staticmethod
    def _sizes(inputs: ImageInputs, image: int) -> torch.Tensor:
        """long ``[images, 2]``: each image's patch grid, the processor's ``image_grid_hw``."""
        sizes = inputs["image_grid_hw"].cpu().long()
        check_image(image, sizes.shape[0])
        return sizes
