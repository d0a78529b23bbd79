"""SAM's ViT as a second tower (DeepSeek-VL-Hybrid's high-res tower): its blocks' stream values on the patch grid.

``SamVisionModel`` holds a ``SamVisionEncoder`` (``vision_encoder``): a
convolution (``patch_embed``) whose output is already a grid, ``[images,
grid_rows, grid_columns, width]``, an absolute position embedding added to it
(``pos_embed``), pre-norm blocks (``layers``: ``layer_norm1``, ``attn``,
``layer_norm2``, ``mlp``), and a convolutional neck (``neck``, two
convolutions and channels-first norms) whose output, ``[images,
output_channels, grid_rows, grid_columns]``, is the tower's
``last_hidden_state``. The tower takes only its configured ``image_size``
(the patch embedding refuses any other), so every image is one
``image_size // patch_size`` square grid.

The stream values are served as `Patches`, ``[images, patches, width]``, the
grid flattened in raster order (a view of the blocks' own tensors), so
``layer_input + attention_output + mlp_output == layer_output`` on every
block, as on ``model.vision``. A block listed in ``global_attn_indexes``
attends over the whole grid; every other block pads the grid to a multiple of
``window_size``, cuts it into ``window_size`` squares
(``window_partition``), attends within each, and puts them back
(``window_unpartition``): its attention's own output is ``[images * windows,
window_size, window_size, width]``, and ``attention_output`` is that output
put back on the grid the way the block does it (an edit is cut back into
windows before the block goes on). The attention does not go through
transformers' attention interface: it computes its scores itself, with a
decomposed relative-position bias, so its interior is unavailable
(`SAM_INTERIOR`). The tower has no final norm over the patches:
``tower_output`` is the last block's stream, read where the neck receives it.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.models.sam.modeling_sam import SamMLPBlock, SamVisionAttention, SamVisionLayer, SamVisionModel

from .layouts import HeadOutputs, Keys, Patches, Pattern, Queries, Values
from .standard import Standard, child, rows_over
from .text import own_output, stream_values, value
from .values import Argument, EProperty, First
from .vision import FIRST_STEP_ONLY, VISION_ORDER, no_images

#: Why a SAM block's attention interior is unavailable.
SAM_INTERIOR = (
    "SAM's attention does not call transformers' attention interface: it computes its scores itself (the scaled "
    "queries times the keys plus a decomposed relative-position bias), so no call site holds its queries, keys or "
    "pattern; under eager attention the module returns its probabilities as self_attn.output[1], "
    "[images * windows * heads, query, key]"
)

#: The native names of a SAM tower and its blocks under the standard ones (the blocks' norms are a SigLIP block's
#: ``layer_norm1`` / ``layer_norm2``, `encoder_names.ENCODER_BLOCK_RENAME`).
SAM_RENAME = {
    "vision_encoder.layers": "layers",
    "vision_encoder.patch_embed": "patch_embed",
    "vision_encoder.neck": "neck",
    "attn": "self_attn",
    "attn.proj": "attn.o_proj",
    "mlp.lin1": "mlp.up_proj",
    "mlp.lin2": "mlp.down_proj",
}


def grid_rows(grid: torch.Tensor) -> torch.Tensor:
    """A SAM stream ``[images, grid_rows, grid_columns, width]`` as `Patches`, ``[images, patches, width]`` (a view)."""
    return grid.flatten(1, 2)


def from_grid_rows(written: torch.Tensor, current: torch.Tensor) -> torch.Tensor:
    """`Patches` back on the grid of the module's own tensor ``current``: ``current`` itself where ``written`` is
    the view `grid_rows` made of it (an edit in place has reached it already).

    So an unedited value, or one edited in place, leaves the model going on with its own tensor: the host reads
    a block's output twice (the next block, and SAM's ``hidden_states`` for the global path), and a reshaped
    copy would reach only the first, changing how the two gradients add up.
    """
    view = grid_rows(current)
    if written.data_ptr() == view.data_ptr() and written.shape == view.shape and written.stride() == view.stride():
        return current
    return written.reshape(current.shape)


def encoder_of(envoy: Any) -> Any:
    """The ``SamVisionEncoder`` module a block (or a block's part) of the tower is in."""
    native = envoy.path.partition(".")[2]
    return envoy.root._module.get_submodule(native.rpartition(".layers.")[0])


def grid_shape(encoder: Any) -> tuple[int, int]:
    """``(grid_rows, grid_columns)``: the patch grid of the one image size the tower takes."""
    embedding = encoder.patch_embed
    return embedding.image_size[0] // embedding.patch_size[0], embedding.image_size[1] // embedding.patch_size[1]


class SamLayer(Standard):
    """A SAM block: ``layer_input + attention_output + mlp_output == layer_output``, each ``[images, patches, width]``.

    On a windowed block ``attention_output`` is the attention's windows put
    back on the grid (``window_unpartition``), as the block adds them to the
    stream; assigned or edited, it is cut back into windows
    (``window_partition``) for the block.
    """

    order_hint = VISION_ORDER
    first_step_only = FIRST_STEP_ONLY

    layer_input, _, mlp_output, layer_output = stream_values(Patches, no_images, grid_rows, from_grid_rows)
    del _  # served below: a windowed block's attention output is in windows, not on the grid

    @EProperty(key=lambda block: f"{child(block, 'self_attn').path}.output",
               description="what the attention adds to the stream, on the grid [images, patches, width]",
               unavailable=no_images, select=First())
    def attention_output(self, output: torch.Tensor) -> Patches:
        """What the attention adds to the stream, ``[images, patches, width]``: its windows back on the grid."""
        block = self._module
        if block.window_size == 0:
            return grid_rows(output)
        rows, columns = grid_shape(encoder_of(self))
        padded = (-(-rows // block.window_size) * block.window_size, -(-columns // block.window_size) * block.window_size)
        return grid_rows(block.window_unpartition(output, block.window_size, padded, (rows, columns)))

    @attention_output.inverse
    def attention_output(self, written: torch.Tensor, current: torch.Tensor) -> torch.Tensor:
        block = self._module
        if block.window_size == 0:
            return from_grid_rows(written, current)
        rows, columns = grid_shape(encoder_of(self))
        windows, _ = block.window_partition(written.reshape(written.shape[0], rows, columns, -1), block.window_size)
        return windows


class SamAttention(Standard):
    """A SAM block's attention: what it adds to the stream is the block's ``attention_output``; its interior is
    unavailable (`SAM_INTERIOR`)."""

    order_hint = VISION_ORDER
    first_step_only = FIRST_STEP_ONLY

    attention_queries = value("attention_queries", Queries, "the queries", "output", unavailable=SAM_INTERIOR)
    attention_keys = value("attention_keys", Keys, "the keys", "output", unavailable=SAM_INTERIOR)
    attention_values = value("attention_values", Values, "the values", "output", unavailable=SAM_INTERIOR)
    attention_scores = value("attention_scores", Pattern, "the scores entering the softmax", "output",
                             unavailable=SAM_INTERIOR)
    attention_probabilities = value("attention_probabilities", Pattern, "the softmax's output", "output",
                                    unavailable=SAM_INTERIOR)
    attention_head_outputs = value("attention_head_outputs", HeadOutputs, "each head's output", "output",
                                   unavailable=SAM_INTERIOR)


class SamMlp(Standard):
    """A SAM block's MLP: ``mlp_output`` is what it adds to the stream, ``[images, patches, width]``."""

    order_hint = VISION_ORDER
    first_step_only = FIRST_STEP_ONLY

    mlp_output = own_output("mlp_output", Patches, "what the MLP adds to the stream", no_images, grid_rows,
                            from_grid_rows)


class SamVision(Standard):
    """A SAM tower: its blocks are ``layers`` (`SamLayer`); its sizes are its own config's.

    Values: ``patch_embeddings``, the convolution's output before the
    position embedding, and ``tower_output``, the last block's stream as the
    neck receives it (the tower has no final norm), each ``[images, patches,
    width]``, the grid in raster order.
    """

    order_hint = VISION_ORDER
    first_step_only = FIRST_STEP_ONLY

    @EProperty(key=lambda tower: f"{tower.patch_embed.path}.output",
               description="the patch embedding's output [images, patches, width]", unavailable=no_images)
    def patch_embeddings(self, grid: torch.Tensor) -> Patches:
        """The patch embedding's output, one row per patch in raster order, before the position embedding."""
        return grid_rows(grid)

    @patch_embeddings.inverse
    def patch_embeddings(self, written: torch.Tensor, current: torch.Tensor) -> torch.Tensor:
        return from_grid_rows(written, current)

    @EProperty(key=lambda tower: f"{tower.neck.path}.input",
               description="the last block's stream, as the neck receives it [images, patches, width]",
               unavailable=no_images, select=Argument(0, "hidden_states"))
    def tower_output(self, grid: torch.Tensor) -> Patches:
        """The last block's stream, as the neck receives it (no final norm), ``[images, patches, width]``."""
        return grid_rows(grid)

    @tower_output.inverse
    def tower_output(self, written: torch.Tensor, current: torch.Tensor) -> torch.Tensor:
        return from_grid_rows(written, current)

    @property
    def vision_config(self) -> Any:
        return self._module.config

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @property
    def vision_hidden_size(self) -> int:
        return self.vision_config.hidden_size

    @property
    def num_heads(self) -> int:
        return self.vision_config.num_attention_heads

    @property
    def head_dim(self) -> int:
        return self.vision_hidden_size // self.num_heads

    @property
    def intermediate_size(self) -> int:
        """The MLP's width (the config's ``mlp_dim``)."""
        return self.vision_config.mlp_dim

    @property
    def patch_size(self) -> int:
        return self.vision_config.patch_size

    @property
    def image_size(self) -> int:
        """The side of the one square image size the tower takes, in pixels."""
        return self.vision_config.image_size

    @property
    def window_size(self) -> int:
        """The side, in patches, of the windows the blocks not in ``global_attn_indexes`` attend within."""
        return self.vision_config.window_size

    @property
    def global_attn_indexes(self) -> tuple[int, ...]:
        """The blocks that attend over the whole grid."""
        return tuple(self.vision_config.global_attn_indexes)

    def support(self, layer: int | None = None) -> dict[str, Any]:
        """Which values this tower has, as `envoys.vision.Vision.support` says them: its own and every block's."""
        if no_images(self) is not None:
            return {}
        rows = rows_over(list(self.layers), layer)
        return rows if layer is not None else {**super().support(), **rows}


#: A SAM tower's envoys.
SAM_ENVOYS = {SamVisionModel: SamVision, SamVisionLayer: SamLayer, SamVisionAttention: SamAttention, SamMLPBlock: SamMlp}
