"""Mllama (model_type mllama, Llama 3.2 Vision): the image enters through cross-attention, not the token stream.

The prompt marks each image with one ``<|image|>`` token, and no feature is
scattered there: the text model's cross-attention layers (the text config's
``cross_attention_layers``) attend from every text token after an image's
``<|image|>`` to that image's tiles. ``MllamaModel.forward`` runs the tower,
projects its output (``model.projector``, ``multi_modal_projector``) and hands
it to the text model as ``cross_attention_states``: ``vision.image_features``
is that keyword of the text model's call (``self_language_model_0``, the
family's `Scatter`), ``[images * tiles, tile_rows, hidden_size]`` (each
image's tiles, padding tiles included, each tile's CLS and patches), as the
text model gets it; writing it changes what every cross layer reads.
``vision.image_token_mask`` is the ``<|image|>`` positions.

The tower (``model.vision``, ``MllamaVisionModel``) works on tiles: the image
processor resizes each image onto a canvas of whole tiles and pads the list
to ``max_image_tiles``. The patch embedding (``vision.patch_embed``) runs on
each tile, ``patch_embeddings`` ``[images * tiles, patches, vision_hidden_size]``;
the CLS goes first, tile position embeddings are added, and each tile is
padded to a multiple of 8 rows. Its two stacks then run on one row per
image, all its tiles with their padding rows side by side, ``[images, tiles *
padded_tile_rows, vision_hidden_size]``: the local blocks
(``vision.layers[i]``, ``transformer.layers``), then, after
``layernorm_post`` and the post-tile embeddings, the gated global blocks
(``vision.global_layers[i]``, ``global_transformer.layers``), whose sublayers
join the stream through ``tanh`` gates (`envoys.blocks.tanh_gated`: the
block identity holds with ``attention_output`` and ``mlp_output`` the gated
terms, and ``attention_gate`` / ``mlp_gate`` are the factors).
``vision.tower_output`` is the tower's ``last_hidden_state``, ``[batch,
images, tiles, tile_rows, vision_output_dim]``: the global stack's output and
the chosen local layers' outputs (``intermediate_layers_indices``) side by
side on the last axis, padding rows dropped.

``model.layers[i]`` are every text block in order (``num_layers`` the text
config's). A cross-attention layer's attention is ``layers[i].cross_attn``,
its interior at the kernel call as on any attention (queries over the text,
keys and values over the image positions ``images * tiles * tile_rows``;
under eager, ``attention_probabilities`` ``[batch, heads, seq, image
positions]``, each text token's attention over the tiles' rows), and its
``attention_output`` / ``mlp_output`` are the gated terms (the MLP's also
times the row mask, 0 on a token that attends to no tile), so
``layer_input + attention_output + mlp_output == layer_output``. On a
self-attention layer, ``layers[i].cross_attn``'s values are `Unavailable`,
saying which layers cross-attend; on a cross layer ``self_attn`` is absent.
A prompt without an image skips the cross layers (the forward does): their
values are not computed then.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import torch
from transformers.models.mllama.modeling_mllama import (
    MllamaCrossAttentionDecoderLayer,
    MllamaSelfAttentionDecoderLayer,
    MllamaTextCrossAttention,
    MllamaVisionAttention,
    MllamaVisionEncoderLayer,
    MllamaVisionMLP,
    MllamaVisionModel,
)

from rewrites.image_scatter import Scatter

from ..blocks.tanh_gated import GatedBlock, binding_location, bound_term, gate_value, masked_product, product_term
from ..core.bindings import binding_reason
from ..core.layouts import Hidden, Layout, Patches
from ..core.standard import child
from ..core.values import Field, Unavailable, standard_values, value
from ..image.grids import Grid, ImageInputs, check_image, raster, stitch, value_named
from ..text.blocks import Attention, Layer, either, interior_values, own_output
from ..vision.media import scattered_features
from ..vision.tower import NoTower, Vision, VisionAttention, VisionLayer, VisionMlp, never_an_image, no_image_in_trace, no_images
from . import Batching, Family

#: The native paths under the standard names (the tower's relative to it); a tower block's are already standard.
RENAME = {
    "model.language_model.embed_tokens": "embed_tokens",
    "model.language_model.layers": "layers",
    "model.language_model.norm": "norm",
    "model.vision_model": "vision",
    "model.multi_modal_projector": "projector",
    "transformer.layers": "layers",
    "global_transformer.layers": "global_layers",
    "patch_embedding": "patch_embed",
}

#: How the image reaches the text model: the text model's call in ``MllamaModel.forward``, keyword
#: ``cross_attention_states`` (its argument 3).
CROSS_ATTENTION_STATES = Scatter(
    callee="self.language_model", argument=(3, "cross_attention_states"),
    purpose="the text model's call, whose cross_attention_states its cross-attention layers read",
)


class CrossAttentionStates(Layout):
    """[images * tiles, tile_rows, hidden_size]: the projected tower output the cross-attention layers read."""


class TileTower(Layout):
    """[batch, images, tiles, tile_rows, vision_output_dim]: Mllama's tower output, the global stack's stream and the
    chosen local layers' side by side."""


class MllamaVision(Vision):
    """Mllama's tower: the local stack's blocks (``layers``), then the gated global stack's (``global_layers``).

    The blocks' rows are one per image, ``[images, tiles * padded_tile_rows,
    vision_hidden_size]``: every tile of the image (padding tiles included),
    each its CLS, its patches and its padding rows.
    """

    image_features = scattered_features(
        "image", CrossAttentionStates, never_an_image, flat=False,
        doc="What the cross-attention layers read, ``[images * tiles, tile_rows, hidden_size]``: the text model's "
        "``cross_attention_states`` as it gets them (the projected tower output, each tile's CLS and patches).",
    )
    tower_output = value(
        "tower_output", TileTower, description="the tower's output", key="output", select=Field("last_hidden_state"),
        unavailable=no_images,
        doc="The tower's ``last_hidden_state``, ``[batch, images, tiles, tile_rows, vision_output_dim]``: the global "
        "stack's output and the outputs of the local layers ``intermediate_layers_indices`` names, side by side on "
        "the last axis, padding rows dropped.",
    )

    @property
    def num_heads(self) -> int:
        return self.vision_config.attention_heads

    @property
    def num_global_layers(self) -> int:
        """How many gated global blocks follow the local ones."""
        return len(self.global_layers)

    @property
    def max_num_tiles(self) -> int:
        """The most tiles an image is cut into (every image's rows hold this many, padding tiles included)."""
        return self.vision_config.max_num_tiles

    @property
    def tile_rows(self) -> int:
        """A tile's rows in the tower's output: its CLS and its patches."""
        return (self.image_size // self.patch_size) ** 2 + 1


class MllamaVisionLayer(GatedBlock, VisionLayer):
    """A tower block: on a global block (``is_gated``) ``attention_output`` and ``mlp_output`` are the gated terms as
    the forward binds them, ``attention_gate`` and ``mlp_gate`` the factors; on a local block, the sublayers'
    outputs."""

    attention_output = bound_term("attention_output", Patches, "self_attn", "gate_attn",
                                  "what the attention adds to the stream", reason=no_images)
    mlp_output = bound_term("mlp_output", Patches, "mlp", "gate_ffn", "what the MLP adds to the stream",
                            reason=no_images)
    attention_gate = gate_value("attention_gate", "gate_attn", "the attention's output", reason=no_images)
    mlp_gate = gate_value("mlp_gate", "gate_ffn", "the MLP's output", reason=no_images)


def cross_layers(block: Any) -> str:
    return ", ".join(map(str, block.root._module.config.get_text_config().cross_attention_layers))


def skipped_without_image(block: Any) -> str | None:
    """Why a cross layer's values are not computed: no image reaches the model (a text-only load), or none reaches
    the running trace, whose forward then skips the layer."""
    never = never_an_image(block)
    if never is not None or no_image_in_trace(block) is None:
        return never
    return ("a prompt without an image skips the cross-attention layers (the text model's forward does), so nothing of "
            "this layer is computed; pass an image")


class CrossAttention(Attention):
    """A cross-attention layer's attention (``layers[i].cross_attn``): queries over the text, keys and values over the
    image positions (``images * tiles * tile_rows``); its output is before the layer's gate."""

    #: the options of ``vision.patch_grid`` that lay its keys out on an image's grid (the tower's output rows)
    key_layout = {"of": "output"}

    attention_output = own_output("attention_output", Hidden, "what the cross-attention computes, before its gate",
                                  gate=skipped_without_image)
    (
        attention_queries,
        attention_keys,
        attention_values,
        attention_scores,
        attention_probabilities,
        attention_head_outputs,
    ) = interior_values("batch", gate=skipped_without_image)


#: The MLP's output times the row mask, as the cross-attention block binds it.
MASKED_MLP = (partial(masked_product, "full_text_row_masked_out_mask"), "full_text_row_masked_out_mask[:, 0] * ...")


class CrossAttentionLayer(GatedBlock, Layer):
    """A cross-attention text block: ``attention_output`` is ``tanh(cross_attn_attn_gate)`` times the
    cross-attention's output, ``mlp_output`` ``tanh(cross_attn_mlp_gate)`` times the MLP's output times the row mask
    (as the block binds it), both read-only, so ``layer_input + attention_output + mlp_output == layer_output``;
    ``attention_gate`` and ``mlp_gate`` are the factors."""

    attention_output = product_term(
        "attention_output", Hidden, lambda block: f"{child(block, 'cross_attn').path}.output", "cross_attn_attn_gate",
        "what the cross-attention adds to the stream", reason=skipped_without_image,
        doc="What the cross-attention adds to the stream, ``[batch, seq, hidden_size]``: its output times "
        "``tanh(cross_attn_attn_gate)``, as the forward multiplies them; read-only.",
    )
    mlp_output = product_term(
        "mlp_output", Hidden, lambda block: binding_location(block, *MASKED_MLP), "cross_attn_mlp_gate",
        "what the MLP adds to the stream", reason=either(skipped_without_image, lambda b: binding_reason(b, *MASKED_MLP)),
        doc="What the MLP adds to the stream, ``[batch, seq, hidden_size]``: its output times the row mask (0 on a "
        "token that attends to no tile), as the block binds it, times ``tanh(cross_attn_mlp_gate)``; read-only.",
    )
    attention_gate = gate_value("attention_gate", "cross_attn_attn_gate", "the cross-attention's output",
                                reason=skipped_without_image)
    mlp_gate = gate_value("mlp_gate", "cross_attn_mlp_gate", "the MLP's output", reason=skipped_without_image)

    #: the parts whose values support() lists
    parts = ("cross_attn", "mlp")


class SelfAttentionLayer(Layer):
    """A self-attention text block of a model with cross-attention layers: its ``cross_attn`` values are
    `Unavailable`, naming the layers that have one."""

    @property
    def cross_attn(self) -> NoTower:
        return NoTower(f"layers[{self.index}].cross_attn", self.no_cross_attention)

    @property
    def index(self) -> int:
        return int(self.path.rpartition(".")[2])

    @property
    def no_cross_attention(self) -> str:
        """Why this block has no cross-attention values."""
        return (f"layers[{self.index}] is a self-attention layer; the layers that cross-attend to the image are "
                f"{cross_layers(self)} (the text config's cross_attention_layers)")

    def support(self) -> dict[str, str | None]:
        """The block's values, and its cross-attention's, each Unavailable with the reason."""
        missing = {f"cross_attn.{name}": self.no_cross_attention for name in standard_values(CrossAttention)}
        return {**super().support(), **missing}


#: Which value a Mllama patch grid is over (``of=``): a block's stream (every tile of an image in one row, each tile
#: padded), the patch embedding's output (a row a tile), or the tower's output as the text model reads it (a tile's
#: CLS and patches: tower_output, projector.output, image_features, a cross-attention's keys).
PATCH_VALUES = ("stream", "patch_embeddings", "output")


class MllamaGrids:
    """Mllama's grids: each image's tiles placed where the processor cut them.

    The image processor resizes an image onto a canvas of ``rows x columns``
    tiles (its aspect ratio, ``aspect_ratio_ids`` indexing the vision config's
    ``supported_aspect_ratios`` from 1, each ``(rows, columns)``), cuts it into
    tiles in raster order and pads the list to ``max_num_tiles``. A grid is
    over the canvas's patches, ``[rows * side, columns * side]`` (``side`` =
    ``image_size // patch_size``). It reads three layouts (``of=``): a
    block's stream (``"stream"``, ``[images, tiles * padded_tile_rows, ...]``:
    each tile its CLS, its patches in raster order, its padding rows), the patch
    embedding's output (``"patch_embeddings"``, ``[images * tiles, patches,
    ...]``), and the tower's output as the text model reads it (``"output"``:
    each tile its CLS and its patches, ``[images * tiles * tile_rows, ...]``
    flattened or as ``tower_output``, ``projector.output`` or ``image_features``
    hold it; the keys of a cross-attention's pattern are these rows). The
    images are the batch's, prompt after prompt (a prompt's padding images,
    ``aspect_ratio_ids`` 0, are rows no image owns). The image token is one
    ``<|image|>`` per image, which holds no feature: there is no token grid.
    """

    stream_dims = 2

    def patch_grid(self, inputs: ImageInputs, image: int, of: str = "stream") -> Grid:
        value_named(of, PATCH_VALUES, "Mllama per-patch")
        vision = inputs.config.vision_config
        ids = inputs["aspect_ratio_ids"].cpu().long().reshape(-1)  # [prompts * images]: 0 a padding image
        slots = ids.nonzero().squeeze(1).tolist()
        check_image(image, len(slots))
        slot, (rows, columns) = slots[image], vision.supported_aspect_ratios[int(ids[slots[image]]) - 1]
        side, tiles = vision.image_size // vision.patch_size, vision.max_num_tiles
        tile_rows = side * side + 1
        padded = -(-tile_rows // 8) * 8
        per_tile, before, per_image = {
            "stream": (padded, 1, tiles * padded), "patch_embeddings": (side * side, 0, tiles * side * side),
            "output": (tile_rows, 1, tiles * tile_rows),
        }[of]
        start = slot * per_image
        cells = torch.stack([raster(side, side, start + tile * per_tile + before) for tile in range(rows * columns)])
        return Grid(stitch(cells, rows, columns), slice(start, start + per_image), len(ids) * per_image)

    def token_grid(self, inputs: ImageInputs, image: int) -> Grid:
        raise Unavailable(
            "Mllama's image token is one <|image|> per image, which holds no feature: its image has no token grid; "
            "lay out a value over the image's tiles with vision.patch_grid(value, of='output') (a cross-attention's "
            "keys, image_features, tower_output)"
        )


ENVOYS = {
    MllamaVisionModel: MllamaVision,
    MllamaVisionEncoderLayer: MllamaVisionLayer,
    MllamaVisionAttention: VisionAttention,
    MllamaVisionMLP: VisionMlp,
    MllamaCrossAttentionDecoderLayer: CrossAttentionLayer,
    MllamaTextCrossAttention: CrossAttention,
    MllamaSelfAttentionDecoderLayer: SelfAttentionLayer,
}

#: Why its invokes do not share a batch with images.
PADDED_IMAGES = (
    "its processor pads every prompt's images to the most any prompt of the batch has (zero images, masked out), and "
    "the tower runs on the padding images too, so an invoke's rows of every tower value depend on the other invokes'"
)

FAMILY = Family("mllama", RENAME, ENVOYS, "model.language_model.layers", scatter=CROSS_ATTENTION_STATES,
                grid_layout=MllamaGrids(), batching=Batching(image_invokes=PADDED_IMAGES))
