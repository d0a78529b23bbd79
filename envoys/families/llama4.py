"""Llama 4 (model_type llama4): a tiled tower with its CLS last, on a MoE / dense text model; the root scatters.

``Llama4ForConditionalGeneration`` has no inner model: its own forward runs the
tower (``vision_model``, standard ``vision``), projects its output
(``multi_modal_projector``, the projector), flattens it over tiles and
scatters it into the token embeddings (``inputs_embeds_masked_scatter_0``,
argument 1), so the root is the scatter host (``root_scatter``, the spec's
ROOT_SCATTER). Before transformers 5.25 the root flattens the tower's output
over tiles before the projector, which receives ``[tiles * tokens,
vision_output_dim]``; from 5.25 ``get_image_features`` projects each tile's
tokens, ``[tiles, tokens, vision_output_dim]``, and the root flattens what
the projector gives.

The tower (`Llama4Vision`) runs one row per tile (see its docstring), appends
the CLS token last on the patch axis, and ends with ``layernorm_post`` (its
``norm``; ``tower_output`` is its output), then drops the CLS and folds each
2x2 block of patches into one token with its pixel-shuffle adapter
(``vision.vision_adapter``), all inside the tower's forward: the tower's
``last_hidden_state`` is the adapter's output, which the root flattens into
what the projector receives.

Text blocks (``language_model.model.layers``) have ``feed_forward`` (a MoE on
the layers in ``moe_layers``, a dense MLP on the others; standard ``mlp``);
``mlp_output`` is what the block adds, read at ``hidden_states_view_0``
(`Llama4Layer`); on a MoE layer ``mlp.router_logits`` is the router's logits
(its ``super().forward``, the router being an ``nn.Linear``; `envoys.blocks.moe`),
Unavailable on a dense layer. Attention layers with RoPE apply it, then an L2 norm to
queries and keys (``use_qk_norm``), and attend in chunks
(``attention_chunk_size``, a chunked causal mask); the others have no RoPE,
full causal attention and scale the queries by position
(``attn_temperature_tuning``). The attention values are read at the kernel,
after all of that.

transformers 5.24.0's root forward ends by reading ``outputs.image_outputs`` off
the language model's output, whose class has no such field, so every forward
(and so ``generate``) raises ``AttributeError`` after the logits are computed
(`IMAGE_OUTPUTS_BUG`; 5.25 fixed it). Everything up to the logits is served:
the logits are read at the language model's output (``logits_at``), and a
trace that ends with ``tracer.stop()`` after its last read never reaches the
failing line.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
import typing
from typing import Any

import torch
import transformers
from transformers.models.llama4 import modeling_llama4
from transformers.models.llama4.modeling_llama4 import (
    Llama4TextDecoderLayer,
    Llama4TextMLP,
    Llama4TextMoe,
    Llama4VisionAttention,
    Llama4VisionEncoderLayer,
    Llama4VisionMLP,
    Llama4VisionModel,
)

from rewrites.feed_forward import FEED_FORWARD_SITE
from rewrites.image_scatter import Scatter

from ..blocks.moe import RoutedMlp
from ..core.bugs import KnownBug
from ..core.layouts import Hidden, Patches
from ..core.standard import missing_site
from ..core.values import Argument, value
from ..image.grids import GridError, ImageInputs, TiledImage, TiledLayout
from ..text.blocks import Layer, either, lacks
from ..vision.tower import Vision, VisionAttention, VisionLayer, VisionMlp, no_images, no_patch_embed
from . import Batching, Family, Quirks

#: The field the root's forward reads off the language model's output in transformers 5.24.0.
MISSING_FIELD = "image_outputs"


# -- the text blocks -------------------------------------------------------------------------------


def no_feed_forward_site(block: Any) -> str | None:
    return missing_site(block, FEED_FORWARD_SITE)


class Llama4Layer(Layer):
    """A Llama 4 text block: `Layer`'s values, ``mlp_output`` read where the block adds the feed-forward's output.

    The MoE returns ``(out [batch * seq, hidden_size], router_logits)``, so
    ``mlp.output`` is not in the stream's shape on a MoE layer; ``mlp_output``
    is the block's ``hidden_states.view(residual.shape)``, ``[batch, seq,
    hidden_size]`` on every layer, so ``layer_input + attention_output +
    mlp_output == layer_output``.
    """

    mlp_output = value(
        "mlp_output", Hidden, description="what the feed-forward (MoE or dense) adds to the stream",
        key=lambda block: f"{block.path}.source.{FEED_FORWARD_SITE}.output", select=None,
        unavailable=either(lacks("mlp"), no_feed_forward_site),
    )


def _block_site(mlp: Any) -> str:
    return f"{mlp.parent.path}.source.{FEED_FORWARD_SITE}.output"


def not_the_blocks_feed_forward(mlp: Any) -> str | None:
    """Why this feed-forward adds nothing to the stream itself (the MoE's shared expert), or None."""
    if isinstance(mlp.parent, Llama4Layer):
        return no_feed_forward_site(mlp.parent)
    return "this feed-forward runs inside the MoE (its shared expert), which adds its output to the stream; read the block's mlp_output"


class Llama4Mlp(RoutedMlp):
    """A Llama 4 block's feed-forward (MoE or dense): ``mlp_output`` is the block's, ``[batch, seq, hidden_size]``,
    where the module's own output is ``[batch * seq, hidden_size]`` on a MoE layer; ``router_logits`` the MoE's
    router's (`envoys.blocks.moe`), Unavailable on a dense layer."""

    mlp_output = value(
        "mlp_output", Hidden, description="what the feed-forward (MoE or dense) adds to the stream", key=_block_site, select=None,
        unavailable=not_the_blocks_feed_forward,
    )


# -- the tower -------------------------------------------------------------------------------------


class Llama4VisionLayer(VisionLayer):
    """A tower block, ``[tiles, patches + 1, vision_hidden_size]``, the CLS token last; its input is ``hidden_state``."""

    layer_input = value(
        "layer_input", Patches, description="the stream entering the block", key="input", select=Argument(0, "hidden_state"), unavailable=no_images,
    )


class Llama4Vision(Vision):
    """Llama 4's tower (``vision_model``): one row per tile, the CLS token last, a pixel-shuffle adapter inside.

    The image processor cuts each image into tiles of ``image_size`` pixels a
    side (at most ``max_patches`` of them, on a canvas of whole tiles) and adds
    a global tile (the whole image resized to one tile) when an image has more
    than one; ``pixel_values`` is ``[tiles, 3, image_size, image_size]``, image
    after image, each image's tiles in row-major order and its global tile
    last (the processor's ``aspect_ratios`` give each image's tile grid). So
    every tower value's images axis is the tiles: ``Patches`` here is
    ``[tiles, patches + 1, vision_hidden_size]``, each tile's patches in raster
    order, then its CLS token.

    ``patch_embeddings`` is ``[tiles, patches, vision_hidden_size]`` (the
    unfold-and-linear patch embedding's output, before the CLS is appended and
    positions are added). ``tower_output`` is ``layernorm_post``'s output,
    CLS included. After it, inside the tower's forward, the CLS is dropped and
    the adapter (``vision.vision_adapter``) pixel-shuffles each tile's
    patches into ``patches * pixel_shuffle_ratio**2`` tokens of
    ``vision_output_dim``, which the projector receives: flattened over tiles,
    ``[tiles * tokens, vision_output_dim]``, before transformers 5.25, and
    ``[tiles, tokens, vision_output_dim]`` from 5.25.
    """

    patch_embeddings = value(
        "patch_embeddings", Patches, description="the patch embedding's output, before the CLS and positions",
        key=lambda v: f"{v.patch_embed.path}.output", select=None, unavailable=no_patch_embed,
        doc="The patch embedding's output, ``[tiles, patches, vision_hidden_size]``, each tile's patches in raster "
        "order, before the CLS token is appended and position embeddings are added.",
    )

    tower_output = value(
        "tower_output", Patches, description="layernorm_post's output, CLS last, before the adapter",
        key=lambda v: f"{v.norm.path}.output", select=None, unavailable=no_images,
        doc="The last block's stream after ``layernorm_post``, ``[tiles, patches + 1, vision_hidden_size]``, the CLS "
        "token last: before the tower drops the CLS and its pixel-shuffle adapter runs (the tower's own "
        "``last_hidden_state`` is the adapter's output).",
    )

    @property
    def image_size(self) -> int:
        """Side of the square tile the tower takes, in pixels: the image processor cuts each image into such tiles."""
        return self.vision_config.image_size

    @property
    def pixel_shuffle_ratio(self) -> float:
        """The adapter's pixel-shuffle ratio a side: a tile's patches become ``patches * ratio**2`` tokens."""
        return self.vision_config.pixel_shuffle_ratio


# -- transformers 5.24.0's bug ---------------------------------------------------------------------


def output_classes(function: Any) -> list[type]:
    """The ModelOutput classes ``function``'s return annotation names (``tuple | MoeCausalLMOutputWithPast``)."""
    try:
        annotation = typing.get_type_hints(function).get("return")
    except Exception:  # an annotation that does not resolve here: read it as written
        annotation = function.__annotations__.get("return")
    candidates = typing.get_args(annotation) or (annotation,)
    return [c for c in candidates if isinstance(c, type) and dataclasses.is_dataclass(c)]


def reads_language_model_field(forward: Any, field: str) -> bool:
    """Whether ``forward`` reads ``outputs.<field>`` off what ``self.language_model(...)`` returned."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(inspect.unwrap(forward))))
    names = {
        target.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
        and ast.unparse(node.value.func) == "self.language_model"
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    return any(
        isinstance(node, ast.Attribute) and node.attr == field and isinstance(node.ctx, ast.Load)
        and isinstance(node.value, ast.Name) and node.value.id in names
        for node in ast.walk(tree)
    )


def reads_a_field_its_output_lacks() -> bool:
    """The condition of `IMAGE_OUTPUTS_BUG`: the root's forward reads ``image_outputs`` off the language model's
    output, and no output class the language model's forward returns has that field."""
    root, language_model = modeling_llama4.Llama4ForConditionalGeneration, modeling_llama4.Llama4ForCausalLM
    if not reads_language_model_field(root.forward, MISSING_FIELD):
        return False
    classes = output_classes(inspect.unwrap(language_model.forward))
    return bool(classes) and not any(MISSING_FIELD in {f.name for f in dataclasses.fields(c)} for c in classes)


def is_missing_field_error(error: BaseException) -> bool:
    return isinstance(error, AttributeError) and (getattr(error, "name", None) == MISSING_FIELD or MISSING_FIELD in str(error))


def rotary_table_on_meta(model: Any) -> str | None:
    """Why a loaded Llama 4 cannot run its tower: transformers 5.0 to 5.2 leave the tower's rotary table
    (``freqs_ci``, a plain attribute, not a buffer) on the meta device after ``from_pretrained``; else None."""
    for module in model.modules():
        table = getattr(module, "freqs_ci", None)
        if isinstance(table, torch.Tensor) and table.is_meta:
            return (f"transformers {transformers.__version__} loads Llama 4's vision rotary table (freqs_ci) on the "
                    f"meta device, so its tower cannot run, with this library or without it; load Llama 4 with "
                    f"transformers 4.57 or 5.3 and later")
    return None


IMAGE_OUTPUTS_BUG = KnownBug(
    what=(
        "transformers' Llama4ForConditionalGeneration.forward reads `outputs.image_outputs` on its last line, and the "
        "language model's output (MoeCausalLMOutputWithPast) has no such field, so every forward, and so generate, "
        "raises AttributeError after the logits are computed (transformers 5.24.0 has it)"
    ),
    workaround=(
        "every value up to the logits is served: read what you need (model.logits included, read at the language "
        "model's output) and end the trace with tracer.stop() after the last read, so the forward stops before the "
        "failing line (if the trace already does, one of its reads was never served: reads follow the forward's "
        "order, the tower, the projector, image_features, then the text model); transformers' generate cannot run "
        "until a release fixes it"
    ),
    present=reads_a_field_its_output_lacks,
    raised=is_missing_field_error,
)


# -- the family ------------------------------------------------------------------------------------

RENAME = {
    "language_model.model.embed_tokens": "embed_tokens",
    "language_model.model.layers": "layers",
    "language_model.model.norm": "norm",
    "language_model.lm_head": "lm_head",
    "vision_model": "vision",
    "multi_modal_projector": "projector",
    "model.layers": "layers",  # the tower's blocks, at vision_model.model.layers
    "patch_embedding": "patch_embed",
    "layernorm_post": "norm",
    "feed_forward": "mlp",
}

ENVOYS = {
    Llama4TextDecoderLayer: Llama4Layer,
    Llama4TextMoe: Llama4Mlp,
    Llama4TextMLP: Llama4Mlp,
    Llama4VisionModel: Llama4Vision,
    Llama4VisionEncoderLayer: Llama4VisionLayer,
    Llama4VisionAttention: VisionAttention,
    Llama4VisionMLP: VisionMlp,
}

# -- the grids -------------------------------------------------------------------------------------

#: The tokens before a tile's image tokens in the prompt the processor writes (``Llama4Processor._prompt_split_image``).
IMAGE_START, NEXT_COLUMN, NEXT_ROW, WHOLE_IMAGE = "<|image_start|>", "<|tile_x_separator|>", "<|tile_y_separator|>", "<|image|>"


def tiled_images(inputs: ImageInputs) -> list[TiledImage]:
    """The batch's images as their prompts lay out their tiles: each run of image tokens is a tile; after
    ``<|image_start|>`` the first, after ``<|tile_x_separator|>`` the next in its row, after
    ``<|tile_y_separator|>`` the first of the next row; after ``<|image|>`` the global tile, which closes the image."""
    images: list[TiledImage] = []
    pending: list = []
    tile = row = column = 0
    for run in inputs.token_runs():
        before = inputs.token_before(run)
        if before == WHOLE_IMAGE:
            images.append(TiledImage(tuple(pending), run, tile))
            tile += len(pending) + 1
            pending, row, column = [], 0, 0
            continue
        if before == NEXT_COLUMN:
            column += 1
        elif before == NEXT_ROW:
            row, column = row + 1, 0
        elif before != IMAGE_START:
            raise GridError(f"the image tokens at position {run.position} of prompt {run.batch} follow {before!r}, "
                            f"none of the tokens Llama 4's processor puts before a tile: its tiles cannot be placed")
        pending.append((row, column, run))
    return images


class Llama4Grids(TiledLayout):
    """Llama 4's grids: each image's tiles placed by the separators its prompt puts between them (one tile: that
    tile), the global tile in the span, off the grid. On the tower's stream (``[tiles, patches + 1, ...]``) a cell
    is its patch's row, the CLS (last in each tile) dropped; on the image tokens, the token the pixel shuffle
    folds each block of patches into (``1 / pixel_shuffle_ratio`` a side), raster order of the blocks per tile."""

    def tiled_images(self, inputs: ImageInputs) -> list[TiledImage]:
        return tiled_images(inputs)

    def rows_per_tile(self, config: Any) -> int:
        return self.patch_side(config) ** 2 + 1  # the CLS last

    def token_side(self, config: Any) -> int:
        return round(self.patch_side(config) * config.vision_config.pixel_shuffle_ratio)


FAMILY = Family(
    "llama4",
    RENAME,
    ENVOYS,
    "language_model.model.layers",
    scatter=Scatter(in_root=True),
    text_model_types=("llama4_text",),
    grid_layout=Llama4Grids(),
    batching=Batching(invokes_differ=(
        "Llama 4's layers without rotary positions scale their queries by a temperature counted along the batch's "
        "sequence (attn_temperature_tuning), not from the prompt's first token, so a left-padded prompt's tokens get "
        "other scales than alone; its tower values and image_features are its own, exactly"
    )),
    quirks=Quirks(logits_at="language_model", forward_bug=IMAGE_OUTPUTS_BUG, load_bug=rotary_table_on_meta),
)
