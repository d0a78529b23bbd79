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

from typing import Any

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
from rewrites.tanh_gates import (
    ATTENTION_GATE_SITE,
    BLOCK_ATTENTION_GATE_SITE,
    BLOCK_MLP_GATE_SITE,
    MLP_GATE_SITE,
)

from ..blocks.tanh_gated import gate_value, gated_term, kept_layer_input
from ..core.layouts import Hidden, Layout, Patches
from ..core.values import Field, standard_values, value
from ..text.blocks import Attention, Layer, interior_values, own_output
from ..vision.media import scattered_features
from ..vision.tower import NoTower, Vision, VisionAttention, VisionLayer, VisionMlp, never_an_image, no_images
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


class MllamaVisionLayer(VisionLayer):
    """A tower block: on a global block (``is_gated``) ``attention_output`` and ``mlp_output`` are the gated terms,
    ``attention_gate`` and ``mlp_gate`` the factors; on a local block, the sublayers' outputs."""

    attention_output = gated_term("attention_output", Patches, "self_attn", BLOCK_ATTENTION_GATE_SITE,
                                  "what the attention adds to the stream", gate=no_images)
    mlp_output = gated_term("mlp_output", Patches, "mlp", BLOCK_MLP_GATE_SITE, "what the MLP adds to the stream",
                            gate=no_images)
    attention_gate = gate_value("attention_gate", BLOCK_ATTENTION_GATE_SITE, "the attention's output", gate=no_images)
    mlp_gate = gate_value("mlp_gate", BLOCK_MLP_GATE_SITE, "the MLP's output", gate=no_images)


def cross_layers(block: Any) -> str:
    return ", ".join(map(str, block.root._module.config.get_text_config().cross_attention_layers))


def skipped_without_image(block: Any) -> str | None:
    """Why a cross layer's values are not computed in the running trace (no image: the forward skips the layer)."""
    return no_images(block) and (
        "a prompt without an image skips the cross-attention layers (the text model's forward does), so nothing of "
        "this layer is computed; pass an image")


class CrossAttention(Attention):
    """A cross-attention layer's attention (``layers[i].cross_attn``): queries over the text, keys and values over the
    image positions (``images * tiles * tile_rows``); its output is before the layer's gate."""

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


class CrossAttentionLayer(Layer):
    """A cross-attention text block: ``attention_output`` is ``tanh(cross_attn_attn_gate)`` times the
    cross-attention's output, ``mlp_output`` ``tanh(cross_attn_mlp_gate)`` times the row mask times the MLP's, so
    ``layer_input + attention_output + mlp_output == layer_output``; ``attention_gate`` and ``mlp_gate`` are the
    factors."""

    layer_input = kept_layer_input(Hidden, "cross_attn", gate=skipped_without_image)
    attention_output = gated_term("attention_output", Hidden, "cross_attn", ATTENTION_GATE_SITE,
                                  "what the cross-attention adds to the stream", gate=skipped_without_image,
                                  prefetch=True)
    mlp_output = gated_term("mlp_output", Hidden, "mlp", MLP_GATE_SITE, "what the MLP adds to the stream",
                            gate=skipped_without_image, masked=True)
    attention_gate = gate_value("attention_gate", ATTENTION_GATE_SITE, "the cross-attention's output",
                                gate=skipped_without_image)
    mlp_gate = gate_value("mlp_gate", MLP_GATE_SITE, "the MLP's output", gate=skipped_without_image)

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
                batching=Batching(image_invokes=PADDED_IMAGES))
