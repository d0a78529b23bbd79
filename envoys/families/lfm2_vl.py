"""LFM2-VL (model_type lfm2_vl): a SigLIP2 NaFlex tower, a projector over 2x2 patch blocks, an LFM2 hybrid text model.

The tower (``model.vision_tower``, a `NaflexVision`) takes the processor's
flat patches, each image's row padded to a fixed count with the padded keys
masked (`envoys.towers.naflex`). Each row is an image, or, for an image the
processor finds too large for its token budget, one tile of the image's
canvas, the tiles followed by a thumbnail of the whole image (the processor
writes ``<|img_row_R_col_C|>`` before each tile's tokens and
``<|img_thumbnail|>`` before the thumbnail's).

``Lfm2VlModel.get_image_features`` takes the tower's ``last_hidden_state``
(``tower_output``, after ``post_layernorm``) and gathers, for every row, each
``downsample_factor`` x ``downsample_factor`` block of its real patches
(``spatial_shapes`` says the row's grid) into a token slot, every row given
as many slots as its padded length allows (``rows // factor**2``); a slot
past the row's real blocks reads the first row's first patch (the gather's
index 0), so no slot reads a padded row. The slots of every row, side by
side, make one patch grid, ``projector.input`` = ``[1, factor, slots * factor,
vision_hidden_size]`` (patch ``(dy, slot * factor + dx)`` is patch ``(2r + dy,
2c + dx)`` of the slot's block ``(r, c)``), which the projector
(``model.multi_modal_projector``) unshuffles as one image (each slot's
``factor**2`` patches joined on the feature axis, ``dy`` then ``dx``),
layer-norms and maps to the text width with two linear layers:
``projector.output`` is ``[1, 1, slots, hidden_size]``, padding slots included.
``get_image_features`` then drops the padding slots, and
``Lfm2VlModel.forward`` scatters the rest, every row's tokens in raster order
over its blocks, row after row, at the image tokens
(``inputs_embeds_masked_scatter_0``, argument 1): ``image_features`` is
``projector.output`` without its padding slots.

The text model (``model.language_model``, LFM2) is a hybrid: each block
(``Lfm2DecoderLayer``) holds one token mixer, softmax attention
(``self_attn``, q/k RMS-normed, rotary) on a ``full_attention`` block, a
gated short convolution (``conv``) on a ``conv`` block (``layer_types``),
behind ``operator_norm`` (``input_layernorm``), and an MLP (``feed_forward``,
standard ``mlp``) behind ``ffn_norm`` (``post_attention_layernorm``); its
final norm is ``embedding_norm`` (``norm``). So on every block
``layer_input + (what the mixer adds) + mlp_output == layer_output``, where
the mixer's addition is ``attention_output`` on an attention block and
``layers[i].conv.output`` on a convolution block, whose ``attention_output``
and ``self_attn.*`` values are Unavailable saying so (`Lfm2Layer`). A
checkpoint of the text model alone (``lfm2``, ``Lfm2ForCausalLM``) loads with
the same text names.
"""

from __future__ import annotations

import re

from transformers.models.lfm2.modeling_lfm2 import Lfm2Attention, Lfm2DecoderLayer, Lfm2MLP
from transformers.models.siglip2.modeling_siglip2 import (
    Siglip2Attention,
    Siglip2EncoderLayer,
    Siglip2MLP,
    Siglip2VisionModel,
)

from ..blocks.hybrid import HybridLayer
from ..image.grids import Grid, ImageInputs, TiledImage, TiledLayout, TokenRun, check_image, raster
from ..text.blocks import Attention, Mlp
from ..towers.cohere import unexpected
from ..towers.encoder_names import SIGLIP_WRAPPER_RENAME
from ..towers.naflex import NaflexAttention, NaflexVision
from ..vision.tower import VisionLayer, VisionMlp
from . import Family

RENAME = {
    **{key: name for key, name in SIGLIP_WRAPPER_RENAME.items() if key != "model.language_model.norm"},
    "model.language_model.embedding_norm": "norm",
    "operator_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "feed_forward": "mlp",
    "q_layernorm": "q_norm",
    "k_layernorm": "k_norm",
}


class Lfm2Layer(HybridLayer):
    """An LFM2 block: softmax attention (``self_attn``) or a gated short convolution (``conv``), then the MLP.

    ``layer_input + attention_output + mlp_output == layer_output`` on an
    attention block, ``layer_input + conv.output + mlp_output ==
    layer_output`` on a convolution block, whose attention values are
    Unavailable, naming ``conv``. Each ``[batch, seq, hidden_size]``.
    """

    mixers = {"conv": "a gated short convolution"}


ENVOYS = {
    Siglip2VisionModel: NaflexVision,
    Siglip2EncoderLayer: VisionLayer,
    Siglip2Attention: NaflexAttention,
    Siglip2MLP: VisionMlp,
    Lfm2DecoderLayer: Lfm2Layer,
    Lfm2Attention: Attention,
    Lfm2MLP: Mlp,
}



class Lfm2VlGrids(TiledLayout):
    """Where each image's rows are: its tiles placed on its canvas by the prompt's markers, each row on its own grid.

    The processor writes ``<|image_start|>``, then, for an image it split,
    ``<|img_row_R_col_C|>`` and the tile's image tokens for each tile (from 1)
    and ``<|img_thumbnail|>`` and the thumbnail's; for an image it did not
    split, the image's tokens alone; then ``<|image_end|>``. Each run of image
    tokens is one row of the tower, in order. On the tower's stream
    (``[rows, padded patches, ...]``) a row's real patches lie in raster order
    over its ``spatial_shapes`` grid, the padding after them in no cell; on the
    image tokens a cell is one token, the ``downsample_factor`` square block
    of patches the projector folds into it. A split image's grid is its tiles
    stitched; its thumbnail is in its rows, off the grid.
    """

    stream_dims = 2

    def tiled_images(self, inputs: ImageInputs) -> list[TiledImage]:
        processor = inputs.processor
        start, thumbnail = processor.image_start_token, processor.image_thumbnail_token
        marker = re.compile(r"<\|img_row_(\d+)_col_(\d+)\|>")
        images: list[TiledImage] = []
        pending: list[tuple[int, int, TokenRun]] = []
        first = 0
        for run in inputs.token_runs():
            before = inputs.token_before(run) or ""
            placed = marker.fullmatch(before)
            if placed is not None:
                pending.append((int(placed.group(1)) - 1, int(placed.group(2)) - 1, run))
            elif (before == thumbnail and pending) or (before == start and not pending):
                images.append(TiledImage(tuple(pending), run, first))
                first += len(pending) + 1
                pending = []
            else:
                raise unexpected(inputs, run, f"{start}, an <|img_row_R_col_C|> marker or {thumbnail}")
        return images

    def patch_grid(self, inputs: ImageInputs, image: int) -> Grid:
        images = self.tiled_images(inputs)
        check_image(image, len(images))
        tiled, shapes = images[image], inputs["spatial_shapes"]
        rows = inputs["pixel_attention_mask"].shape[1]
        cells = tiled.placed(lambda tile, run: raster(*(int(side) for side in shapes[tile]), tile * rows))
        tiles = sum(each.count for each in images)
        return Grid(cells, slice(tiled.first * rows, (tiled.first + tiled.count) * rows), tiles * rows)

    def token_grid(self, inputs: ImageInputs, image: int) -> Grid:
        tiled, shapes = self._image(inputs, image), inputs["spatial_shapes"]
        factor = inputs.config.downsample_factor
        cells = tiled.placed(lambda tile, run: raster(*(int(side) // factor for side in shapes[tile]), run.first))
        return Grid(cells, tiled.token_span)


FAMILY = Family("lfm2_vl", RENAME, ENVOYS, "model.language_model.layers", text_model_types=("lfm2",),
                grid_layout=Lfm2VlGrids())
