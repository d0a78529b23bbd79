"""A SAM-style vision encoder: a spatial stream, windowed and global blocks, an inline attention kernel with relative
position terms, a convolutional neck. GOT-OCR 2.0's ``GotOcr2VisionEncoder`` (``model.vision``) and
transformers' SAM ``SamVisionModel`` (DeepSeek-VL-Hybrid's high-res tower, ``model.high_res_vision``): their
classes are generated from one modular source, and the same envoys serve both (`GOT_OCR2_ENVOYS`, `SAM_ENVOYS`).

The stream is spatial, ``[images, height, width, vision_hidden_size]``: the
patch embedding's convolution output channels-last, plus an absolute position
embedding. Every stream value here is served as `Patches`, the grid flattened
in raster order, ``[images, height * width, vision_hidden_size]``: a view of
the module's tensor (so in-place edits reach the model), and a written value
is reshaped back to the grid (`onto_grid`: the module's own tensor where the
value is the unedited view).

A block is pre-norm (``layer_norm1``, attention, residual; ``layer_norm2``,
MLP, residual). A windowed block (the config's ``window_size``, every block
not in ``global_attn_indexes``) pads the normed grid to a multiple of the
window, cuts it into windows and runs the attention on
``[images * windows, window, window, width]``, then puts the result back on
the grid and crops the padding (``self.window_unpartition``, the site
`rewrites.sam_vision.UNPARTITION_SITE`): that is what the block adds, its
``attention_output``. A global block attends over the whole grid, and the
attention's own output is what it adds.

The attention (`SamVisionAttention`) is not on transformers' shared
interface: it computes ``softmax(q k^T * scale + relative terms)`` inline.
Its interior is read at its modules and at its softmax (the site
`rewrites.sam_vision.SOFTMAX_SITE`); the batch axis of every interior value
is the attention's own, one row per window of each image on a windowed block
(window after window in raster order over the padded grid, image after
image; the padded patches included), one per image on a global block. SAM's
SDPA attention (``SamVisionSdpaAttention``, under ``attn_implementation="sdpa"``)
has no softmax: its scores and probabilities are unavailable, with the reason.

The tower's ``last_hidden_state`` is the neck's output (two convolutions and
channels-first norms, ``[images, output_channels, height, width]``): an
adapter, so ``tower_output`` is the last block's stream (the tower has no
final norm over the patches). On GOT-OCR the neck's output is
``projector.input``; on DeepSeek-VL-Hybrid the host reads it and a global
block's output (see `envoys.families.deepseek_vl_hybrid`).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.models.got_ocr2.modeling_got_ocr2 import (
    GotOcr2MLPBlock,
    GotOcr2VisionAttention,
    GotOcr2VisionEncoder,
    GotOcr2VisionLayer,
)
from transformers.models.sam.modeling_sam import SamMLPBlock, SamVisionModel
from transformers.models.sam.modeling_sam import SamVisionAttention as NativeSamAttention
from transformers.models.sam.modeling_sam import SamVisionLayer as NativeSamLayer

from rewrites.sam_vision import SOFTMAX_SITE, UNPARTITION_SITE

from ..core.layouts import HeadOutputs, Keys, Patches, Pattern, Queries, Values
from ..core.standard import Standard, child, missing_site, rows_over
from ..core.values import Argument, EProperty, First, value
from ..text.blocks import either, own_output, stream_values
from ..vision.tower import FIRST_STEP_ONLY, VISION_ORDER, Vision, VisionAttention, VisionLayer, VisionMlp, no_images, no_patch_embed


def flat_grid(grid: torch.Tensor) -> torch.Tensor:
    """``[images, height, width, width]`` as `Patches`, ``[images, height * width, width]``: a view."""
    return grid.flatten(1, 2)


def onto_grid(written: torch.Tensor, current: torch.Tensor) -> torch.Tensor:
    """`Patches` back on the grid of the module's own tensor ``current``: ``current`` itself where ``written`` is
    the view `flat_grid` made of it (an edit in place has reached it already).

    So an unedited value, or one edited in place, leaves the model going on with its own tensor: DeepSeek-VL-Hybrid's
    host reads a block's output twice (the next block, and the tower's ``hidden_states`` for its global path), and a
    reshaped copy would reach only the first, changing how the two gradients add up.
    """
    view = flat_grid(current)
    if written.data_ptr() == view.data_ptr() and written.shape == view.shape and written.stride() == view.stride():
        return current
    return written.reshape(current.shape)


def windowed(block: Any) -> bool:
    """Whether ``block`` (a SAM block's envoy) attends in windows."""
    return block._module.window_size > 0


def added(block: Any) -> str:
    """Where what the attention adds to ``block``'s stream is: the return from windows, or the attention's output."""
    if windowed(block):
        return f"{block.path}.source.{UNPARTITION_SITE}.output"
    return f"{child(block, 'self_attn').path}.output"


def no_window_return(block: Any) -> str | None:
    """Why a windowed block's return from windows is not served, or None (a global block needs none)."""
    return missing_site(block, UNPARTITION_SITE) if windowed(block) else None


ATTENTION_OUTPUT_DOC = (
    "What the attention adds to the block's stream, ``[images, patches, vision_hidden_size]``: on a windowed block "
    "the attention's output put back on the grid, padding cropped (``self.window_unpartition``'s output), on a "
    "global block the attention's own output. Assign or edit in place."
)


#: A block's stream values on the flattened grid: layer_input, attention_output (replaced below), mlp_output, layer_output.
STREAM = stream_values(Patches, no_images, flat_grid, onto_grid)


class SamVisionLayer(VisionLayer):
    """A SAM block, its grid flattened: ``layer_input + attention_output + mlp_output == layer_output``, each
    ``[images, patches, vision_hidden_size]``.

    Its norms answer to the standard names through `SAM_BLOCK_RENAME`
    (``input_layernorm`` is ``layer_norm1``: on a windowed block the attention
    receives its output cut into windows).
    """

    layer_input, mlp_output, layer_output = STREAM[0], STREAM[2], STREAM[3]
    attention_output = value(
        "attention_output", Patches, description="what the attention adds to the stream, back on the grid", key=added, select=First(),
        unavailable=either(no_images, no_window_return), view=flat_grid, inverse=onto_grid, doc=ATTENTION_OUTPUT_DOC,
    )

    @property
    def windowed(self) -> bool:
        """Whether this block attends in windows (``window_size`` > 0), not over the whole grid."""
        return windowed(self)

    @property
    def window_size(self) -> int:
        """The side of this block's windows in patches; 0 on a global block."""
        return self._module.window_size


def no_softmax(attention: Any) -> str | None:
    """Why the attention's softmax is not served, or None."""
    return missing_site(attention, SOFTMAX_SITE)


def split_qkv(attention: Any, projected: torch.Tensor) -> torch.Tensor:
    """The ``qkv`` linear's output ``[rows, height, width, 3 * width]`` as ``[3, rows, heads, patches, head_dim]``: a
    view, in the order the forward splits it."""
    heads = attention._module.num_attention_heads
    rows, height, width, _ = projected.shape
    return projected.reshape(rows, height * width, 3, heads, -1).permute(2, 0, 3, 1, 4)


def qkv_part(name: str, layout: type, index: int, what: str, doc: str) -> EProperty:
    """Part ``index`` of the ``qkv`` linear's output (0 queries, 1 keys, 2 values), ``[rows, heads, patches,
    head_dim]``: a view, written back into a copy of the output with that part replaced."""

    def put(attention: Any, written: torch.Tensor, current: torch.Tensor) -> torch.Tensor:
        whole = current.clone()
        split_qkv(attention, whole)[index] = written
        return whole

    return value(
        name, layout, description=what, shape="[rows, heads, patches, head_dim]",
        key=lambda a: f"{child(a, 'qkv').path}.output", unavailable=no_images,
        view=lambda attention, projected: split_qkv(attention, projected)[index], inverse=put, needs_envoy=True, doc=doc,
    )


def heads_apart(attention: Any, flat: torch.Tensor) -> torch.Tensor:
    """The softmax's ``[rows * heads, patches, patches]`` as a `Pattern`, ``[rows, heads, patches, patches]`` (a view)."""
    return flat.unflatten(0, (-1, attention._module.num_attention_heads))


def joined_apart(attention: Any, joined: torch.Tensor) -> torch.Tensor:
    """The output projection's input ``[rows, height, width, width]`` as ``[rows, patches, heads, head_dim]`` (a view)."""
    return joined.flatten(1, 2).unflatten(-1, (attention._module.num_attention_heads, -1))


def reshaped_back(attention: Any, written: torch.Tensor, current: torch.Tensor) -> torch.Tensor:
    """A written value in the shape of the module's own tensor ``current``."""
    return written.reshape(current.shape)


class SamVisionAttention(VisionAttention):
    """A SAM block's attention: inline softmax with relative position terms, on windows or on the whole grid.

    ``attention_output`` is the block's (on a windowed block, back on the
    grid). The interior's batch axis is the attention's: ``images * windows``
    on a windowed block (each window ``window_size**2`` patches, padding
    included), ``images`` on a global block (every patch); ``patches`` below
    is the patches of one such row.
    """

    attention_output = value(
        "attention_output", Patches, description="what the attention adds to the block's stream, back on the grid",
        key=lambda attention: added(attention.parent), select=First(),
        unavailable=either(no_images, lambda attention: no_window_return(attention.parent)),
        view=flat_grid, inverse=onto_grid, doc=ATTENTION_OUTPUT_DOC,
    )

    attention_queries = qkv_part(
        "attention_queries", Queries, 0, "the queries",
        "The queries, ``[rows, heads, patches, head_dim]`` (rows: windows or images): part 0 of the ``qkv`` linear's "
        "output, before the scale; a view, so an in-place edit reaches the scores, as does an assignment.",
    )
    attention_keys = qkv_part(
        "attention_keys", Keys, 1, "the keys",
        "The keys, ``[rows, heads, patches, head_dim]``: part 1 of the ``qkv`` linear's output; a view.",
    )
    attention_values = qkv_part(
        "attention_values", Values, 2, "the values",
        "The values, ``[rows, heads, patches, head_dim]``: part 2 of the ``qkv`` linear's output; a view.",
    )
    attention_scores = value(
        "attention_scores", Pattern, description="the scores entering the softmax", shape="[rows, heads, patches, patches]",
        key=lambda a: f"{a.path}.source.{SOFTMAX_SITE}.input", select=Argument(0, "input"),
        unavailable=either(no_images, no_softmax), view=heads_apart, inverse=reshaped_back, needs_envoy=True,
        doc="The scores entering the softmax, ``[rows, heads, patches, patches]``: the scaled query-key products plus "
        "the decomposed relative position terms (height and width); no mask, so a windowed block's padded patches "
        "are keys too. A view; assign or edit in place.",
    )
    attention_probabilities = value(
        "attention_probabilities", Pattern, description="the softmax's output", shape="[rows, heads, patches, patches]",
        key=lambda a: f"{a.path}.source.{SOFTMAX_SITE}.output", unavailable=either(no_images, no_softmax),
        view=heads_apart, inverse=reshaped_back, needs_envoy=True,
        doc="The softmax's output, ``[rows, heads, patches, patches]``, before it weights the values (dropout is off "
        "in eval). A view; assign or edit in place.",
    )
    attention_head_outputs = value(
        "attention_head_outputs", HeadOutputs, description="each head's output", shape="[rows, patches, heads, head_dim]",
        key=lambda a: f"{child(a, 'proj').path}.input", select=Argument(0, "input"), unavailable=no_images,
        view=joined_apart, inverse=reshaped_back, needs_envoy=True,
        doc="Each head's output, ``[rows, patches, heads, head_dim]``, as the output projection (``proj``) receives "
        "them joined, ``[rows, height, width, width]``; a view, so an in-place edit reaches the projection, as does "
        "an assignment.",
    )


class SamVisionMlp(VisionMlp):
    """A SAM block's MLP (``lin1``, activation, ``lin2``): ``mlp_output`` on the flattened grid."""

    mlp_output = own_output("mlp_output", Patches, "what the MLP adds to the stream", no_images, flat_grid, onto_grid)


class SamTower(Standard):
    """A SAM tower's own values and sizes, wherever the tower is (`SamVision`, `SamSecondTower`).

    ``patch_embeddings`` is the patch convolution's output, channels-last,
    flattened, before the absolute position embedding; ``tower_output`` the
    last block's stream (no final norm; the neck after it is an adapter).
    Sizes: ``intermediate_size`` is the config's ``mlp_dim``;
    ``output_channels`` the neck's width.
    """

    order_hint = VISION_ORDER
    first_step_only = FIRST_STEP_ONLY

    patch_embeddings = value(
        "patch_embeddings", Patches, description="the patch embedding's output, before the position embedding",
        key=lambda v: f"{v.patch_embed.path}.output", select=None, unavailable=no_patch_embed, view=flat_grid, inverse=onto_grid,
        doc="The patch convolution's output, ``[images, patches, vision_hidden_size]``, raster order over the grid "
        "(channels-last, as the tower permutes it), before the absolute position embedding is added. Assign or "
        "edit in place.",
    )

    tower_output = value(
        "tower_output", Patches, description="the last block's stream (no final norm; the neck follows)",
        key=lambda v: f"{v.layers[-1].path}.output", select=First(), unavailable=no_images, view=flat_grid, inverse=onto_grid,
        doc="The last block's stream, ``[images, patches, vision_hidden_size]``: the tower has no final norm over "
        "the patches. The tower's ``last_hidden_state`` is the neck's output after it, ``[images, output_channels, "
        "height, width]``.",
    )

    @property
    def intermediate_size(self) -> int:
        """The MLP's width: the config's ``mlp_dim``."""
        return self.vision_config.mlp_dim

    @property
    def output_channels(self) -> int:
        """The neck's width, ``last_hidden_state``'s channels: the config's ``output_channels``."""
        return self.vision_config.output_channels

    @property
    def window_size(self) -> int:
        """The side, in patches, of the windows the blocks not in ``global_attn_indexes`` attend within."""
        return self.vision_config.window_size

    @property
    def global_attn_indexes(self) -> tuple[int, ...]:
        """The blocks that attend over the whole grid."""
        return tuple(self.vision_config.global_attn_indexes)


class SamVision(SamTower, Vision):
    """A SAM-style encoder at ``model.vision`` (GOT-OCR 2.0's): `SamTower`'s values and sizes, and the tower root's
    (`envoys.vision.tower.Vision`: ``image_token_mask``, ``image_features``, the grids); the neck's output is
    ``projector.input``."""


class SamSecondTower(SamTower):
    """A SAM tower beside ``model.vision`` (DeepSeek-VL-Hybrid's ``model.high_res_vision``): `SamTower`'s values and
    sizes, off its own config; the text-side values (``image_token_mask``, ``image_features``) and the grids are
    ``model.vision``'s."""

    vision_config = Vision.vision_config
    num_layers = Vision.num_layers
    vision_hidden_size = Vision.vision_hidden_size
    num_heads = Vision.num_heads
    head_dim = Vision.head_dim
    patch_size = Vision.patch_size
    image_size = Vision.image_size

    def support(self, layer: int | None = None) -> dict[str, Any]:
        """Which values this tower has, as `envoys.vision.tower.Vision.support` says them: its own and every block's."""
        if no_images(self) is not None:
            return {}
        rows = rows_over(list(self.layers), layer)
        return rows if layer is not None else {**super().support(), **rows}


#: The envoys of GOT-OCR 2.0's SAM encoder at ``model.vision``.
GOT_OCR2_ENVOYS = {
    GotOcr2VisionEncoder: SamVision,
    GotOcr2VisionLayer: SamVisionLayer,
    GotOcr2VisionAttention: SamVisionAttention,
    GotOcr2MLPBlock: SamVisionMlp,
}

#: The envoys of transformers' SAM tower as a second tower (``SamVisionSdpaAttention`` is a ``SamVisionAttention``).
SAM_ENVOYS = {
    SamVisionModel: SamSecondTower,
    NativeSamLayer: SamVisionLayer,
    NativeSamAttention: SamVisionAttention,
    SamMLPBlock: SamVisionMlp,
}

#: A SAM block's native names under the standard ones: the attention (``attn``) as ``self_attn``, its norms and
#: projections as a SigLIP block's (`encoder_names.ENCODER_BLOCK_RENAME`). The neck's norms have the blocks' native
#: names, so they answer to the same aliases.
SAM_BLOCK_RENAME = {
    "attn": "self_attn",
    "layer_norm1": "input_layernorm",
    "layer_norm2": "post_attention_layernorm",
    "attn.proj": "attn.o_proj",
    "mlp.lin1": "mlp.up_proj",
    "mlp.lin2": "mlp.down_proj",
}

#: Transformers' ``SamVisionModel`` as a second tower: its encoder's parts on the tower, and its blocks' names.
SAM_RENAME = {
    "vision_encoder.layers": "layers",
    "vision_encoder.patch_embed": "patch_embed",
    "vision_encoder.neck": "neck",
    **SAM_BLOCK_RENAME,
}
