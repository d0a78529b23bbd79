"""What the vision contract suite (tests/test_vision_contracts.py) expects of a tiny checkpoint: the types of a row.

Each builder module of this package declares its checkpoints' rows beside
its builders (``CONTRACTS``, name -> `Row`; the package gathers them as it
gathers ``BUILDERS``). Every number in a row is read off the builder's
documented configuration (its module and builder docstrings and the config it
writes: image and patch sizes, tiles, merges, CLS and register tokens, block
counts), never off the code under test, and each row's comment says where its
numbers come from. The suite runs every contract on every builder in
``envoys.testing.NAMES``; a builder without a row fails, asking for one.

Images: the first is 32x32 noise; the second (``second_image``, width x height)
is of another size, 64 wide and 48 high unless the row says otherwise (a tiled
family takes one whose tiling differs from the first's).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import transformers
from packaging.version import Version
from transformers import SiglipVisionModel

from .images import noise_image

#: The installed transformers release, for the rows whose shapes a release changed.
TRANSFORMERS = Version(transformers.__version__)

#: The first image of every invoke: 32x32 noise.
FIRST_IMAGE = (32, 32)


@dataclass(frozen=True)
class Layout:
    """Where each image's rows are in a value of the tower (or the projector's output); each kind of layout is a
    subclass, saying how the images are put together (`Batched`, `Packed`, `Flat`, `Square`, `Slots`).

    ``per_image[i]`` is image i's ``(rows, positions)``: how many rows of the
    value it has (its tiles; 1 for a whole image) and how many positions each
    of those rows holds.
    """

    per_image: tuple[tuple[int, int], ...]

    #: one row holds every image's positions, image after image (a packed tower's stream)
    one_row: ClassVar[bool] = False
    #: an image may have several rows (its tiles); otherwise each image is one row, or one segment of the one row
    rows_per_image: ClassVar[bool] = False

    def shape(self, images: int) -> tuple[int, ...]:
        """The value's leading axes for the first ``images`` images (the width or the heads follow)."""
        raise NotImplementedError

    def rows_and_positions(self, images: int) -> tuple[int, int]:
        """How many rows a block's attention pattern has over the first ``images`` images, and how many positions
        each attends over: the value's rows and the positions of each."""
        rows, positions = self.shape(images)
        return rows, positions

    def total(self, images: int) -> int:
        """The positions of the first ``images`` images, all rows together."""
        return sum(rows * positions for rows, positions in self.per_image[:images])

    def spans(self, images: int) -> list[tuple[int, int]]:
        """Each image's ``[start, end)`` on the position axis of a packed value."""
        spans, start = [], 0
        for rows, positions in self.per_image[:images]:
            spans.append((start, start + rows * positions))
            start += rows * positions
        return spans

    def without(self, prefix: int) -> Layout:
        """The same layout with ``prefix`` fewer positions per row (its CLS or register tokens left out)."""
        return replace(self, per_image=tuple((rows, positions - prefix) for rows, positions in self.per_image))


class Batched(Layout):
    """Rows stacked on a leading axis, ``[sum of rows, positions, ...]`` (every row as long as the others)."""

    rows_per_image = True

    def shape(self, images: int) -> tuple[int, ...]:
        chosen = self.per_image[:images]
        (positions,) = {positions for _, positions in chosen}
        return (sum(rows for rows, _ in chosen), positions)


class Square(Batched):
    """As `Batched`, each row's positions on a square grid, ``[sum of rows, side, side, ...]`` (``side * side``
    positions: a pixel-shuffle projector's output, one position per folded block)."""

    def shape(self, images: int) -> tuple[int, ...]:
        rows, positions = super().shape(images)
        side = math.isqrt(positions)
        assert side * side == positions, f"{positions} positions are no square grid"
        return (rows, side, side)


class Packed(Layout):
    """One row holding every image's positions, image after image, ``[1, sum of rows * positions, ...]``."""

    one_row = True

    def shape(self, images: int) -> tuple[int, ...]:
        return (1, self.total(images))


class Flat(Layout):
    """No row axis, ``[sum of rows * positions, ...]``."""

    def shape(self, images: int) -> tuple[int, ...]:
        return (self.total(images),)


class Slots(Layout):
    """As `Packed` under one more leading 1, ``[1, 1, sum of rows * positions, ...]`` (a projector that unshuffles
    every row's slots side by side as one image: LFM2-VL's)."""

    def shape(self, images: int) -> tuple[int, ...]:
        return (1, 1, self.total(images))


class Tiled(Layout):
    """One prompt's images on their own axis, each its tiles (padding tiles included), ``[1, images, tiles,
    positions, ...]`` (Mllama's tower output and projector output)."""

    def shape(self, images: int) -> tuple[int, ...]:
        chosen = self.per_image[:images]
        ((tiles, positions),) = set(chosen)
        return (1, len(chosen), tiles, positions)


def batched(*per_image: tuple[int, int]) -> Layout:
    return Batched(per_image)


def packed(*positions: int) -> Layout:
    return Packed(tuple((1, count) for count in positions))


def flat(*per_image: tuple[int, int]) -> Layout:
    return Flat(per_image)


def square(*per_image: tuple[int, int]) -> Layout:
    return Square(per_image)


def slots(*per_image: tuple[int, int]) -> Layout:
    return Slots(per_image)


@dataclass(frozen=True)
class Reads:
    """What ``projector.input`` is: a tower value as the host takes it.

    ``value`` is ``"tower_output"`` or ``"layer_output"`` (of block ``block``);
    ``drop_first`` rows are dropped from the front of its position axis (a CLS
    token); ``unbatched`` takes a packed row without its leading 1.
    """

    value: str
    block: int = -1
    drop_first: int = 0
    unbatched: bool = False


@dataclass(frozen=True)
class Sizes:
    """The tower's sizes as ``model.vision`` should give them. ``image_size`` is an int, or, on a tower that takes any
    resolution, the name of the processor output that says each image's size (its Unavailable reason names it). On a
    vision side with no blocks (``num_layers`` 0) the block sizes (heads, head width, MLP width) are 0 here and
    Unavailable on ``model.vision``, for the reason every block value gives."""

    num_layers: int
    vision_hidden_size: int
    num_heads: int
    head_dim: int
    intermediate_size: int
    patch_size: int
    image_size: int | str


@dataclass(frozen=True)
class Loads:
    """How a saved tiny checkpoint loads with the Auto classes, and the tokens its processor writes."""

    #: (model class, processor class, tokenizer class)
    classes: tuple[str, str, str]
    #: the token the image features go to, where it is not the tokenizer's image_token (InternVL's <IMG_CONTEXT>)
    feature_token: str | None = None
    #: the processor attribute naming the prompt's image placeholder, where it is not image_token (Gemma 3's boi_token)
    placeholder: str | None = None
    #: the placeholder itself, where the processor names none (PP-Chart2Table's template writes <img>)
    placeholder_token: str | None = None
    #: tokens whose embeddings the host replaces beside the image tokens' (Ovis's indicator tokens)
    also_written: tuple[str, ...] = ()


#: The test video: 4 frames of 32 x 32 pixels.
FRAMES, SIDE = 4, 32


@dataclass(frozen=True)
class VideoRow:
    """A checkpoint's video (``noise_video(FRAMES, SIDE, SIDE)``, the video tests' in tests/test_video_values.py):
    its placeholder tokens, the tower's stream on it, and each frame's token grid.

    ``stream`` is the shape of a tower block's output on the video (the
    tower's run on the videos); ``grid`` is ``(frames, rows, columns)`` of the
    video tokens laid out per frame (``vision.video_grid``), the grid's
    frames being the tower's temporal units.
    """

    tokens: int
    stream: tuple[int, ...]
    grid: tuple[int, int, int]
    #: tower_output's shape where the tower drops rows of its stream after the last block (each frame's CLS row)
    tower: tuple[int, ...] | None = None


@dataclass(frozen=True)
class AudioRow:
    """A checkpoint's second of audio (``noise_audio(1.0)``, the audio tests' in tests/test_audio_values.py): its
    placeholder tokens, the shape of an audio block's output on it, and of the audio tower's output (where the tower
    pools after its blocks, fewer frames)."""

    tokens: int
    stream: tuple[int, ...]
    output: tuple[int, ...]


@dataclass(frozen=True)
class MoeRow:
    """A checkpoint's mixture-of-experts text blocks (the router tests, tests/test_moe_router.py): which blocks are
    sparse, how many experts they have and how many run on a token (every builder's router is plain top-k over every
    expert: one group, no score bias), the router's name under the block's MLP and which item of its output is its
    logits; ``every_expert_runs``: every expert runs on every token, weighted by the router's scores, zero off its
    choice (Llama 4's); ``split``: the experts are split by modality, each set with its own router (ERNIE 4.5-VL's);
    ``logits_scale``: the router scales the logits after the call before it returns them (Muse Spark's)."""

    sparse: tuple[int, ...]
    experts: int
    top_k: int
    router: str = "gate"
    logits_item: int = 0
    every_expert_runs: bool = False
    split: bool = False
    #: what the router multiplies the logits call's output by before it returns them (Muse Spark's output_multiplier),
    #: so the returned logits are router_logits times it; 1.0 where it returns them as computed
    logits_scale: float = 1.0


@dataclass(frozen=True)
class PatternRow:
    """A tower block's attention pattern on the checkpoint: Unavailable (``unavailable``, a regex of the reason), or
    served, ``[rows, heads, positions, positions]`` over the stream's rows, but where a block's rows differ
    (``rows``: a windowed block attends per window: block -> (rows for both images, positions of a row)), zero on
    the padded keys where each image's row is padded to a fixed length (``padded``), and block-diagonal over the
    attention's kernel calls where it calls the kernel once per image or window (``per_call``)."""

    unavailable: str | None = None
    rows: Mapping[int, tuple[int, int]] = field(default_factory=dict)
    padded: bool = False
    #: the attention calls its kernel once per image (or window) at its ``cu_seqlens``: the pattern is the calls'
    #: patterns on the diagonal of ``[1, heads, rows, rows]`` (`envoys.towers.per_image`)
    per_call: bool = False
    #: the tower's own mask hides some keys from some rows (DeepSeek-OCR 2's decoder: causal over its learned
    #: queries), so the pattern is zero there; its family's test says where
    masked: bool = False


@dataclass(frozen=True)
class Row:
    """One checkpoint's expected numbers, for the first image alone and for both images."""

    #: how the saved checkpoint loads, and the tokens its processor writes
    loads: Loads
    #: image tokens each image gets (the first, the second)
    image_tokens: tuple[int, int]
    #: the tower's sizes
    sizes: Sizes
    #: the layout of the tower's stream: every block's layer_input and layer_output, and tower_output
    stream: Layout
    #: the layout of projector.output
    projected: Layout
    #: what projector.input is, or None where the host transforms a tower value first (its family's test says how)
    projector_reads: Reads | None
    #: (width, height) of the second image
    second_image: tuple[int, int] = (64, 48)
    #: positions per stream row (per image on a packed tower) before its patches: CLS and register tokens, which
    #: patch_embeddings lacks
    prefix: int = 0
    #: the tower has a final norm over the patches (vision.norm), so tower_output is not the last block's output
    final_norm: bool = False
    #: the tower drops each image's ``prefix`` rows after its last block (LLaVA-OneVision-1.5's CLS rows), so
    #: tower_output is the last block's output without them, laid out as patch_embeddings
    drops_prefix: bool = False
    #: the tower blocks' attention pattern: served as the stream's rows, or why not (`PatternRow`)
    pattern: PatternRow = PatternRow()
    #: image_features is projector.output, flattened over its leading axes
    features_are_projected: bool = True
    #: the projector runs once per image (HunYuanVL's merger, inside the tower's loop over images): its input and
    #: output are image i's at its i-th call, and ``projected`` and ``projector_reads`` are of them concatenated
    projector_per_image: bool = False
    #: a merger inside the tower after block k (MiniCPM-V's vit_merger): (k, the layout of the later blocks' stream and of
    #: tower_output), so layers[k + 1].layer_input is the merger's output, not layers[k].layer_output
    merged_after: tuple[int, Layout] | None = None
    #: the projector returns a list of one tensor per image unit, which the host concatenates (MiniCPM-V's merger)
    projector_list: bool = False
    #: the projector returns a tuple (Granite-Docling's connector: its features, then its DeepStack features): the
    #: item that is its features; None where it returns the features alone
    projector_item: int | None = None
    #: the text model multiplies its input embeddings by this after the scatter, image features included (Granite's and
    #: HyperCLOVAX's embedding_multiplier), so layers[0].input[mask] == image_features * embedding_multiplier
    embedding_multiplier: float = 1.0
    #: text blocks after which DeepStack adds a tapped feature (Qwen3-VL, Granite-Docling)
    deepstack_taps: int = 0
    #: rows of vision.support() unavailable on this tower besides the pattern: row -> regex of the reason
    vision_unavailable: Mapping[str, str] = field(default_factory=dict)
    #: tower blocks whose token mixer is not attention (LFM3-VL's gated convolution): block -> the mixer's native name,
    #: whose output the block adds in attention_output's place; their attention values are Unavailable, naming it
    tower_mixers: Mapping[int, str] = field(default_factory=dict)
    #: rows of model.support() unavailable on some text blocks: a row, or every row under a prefix ending in ".",
    #: -> the blocks that lack it
    text_gaps: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    #: the blocks' rows are in window order and the tower puts them back (``argsort(vision.window_index)``, one entry
    #: a patch) before its final norm, so tower_output is the last block's output back in raster order, normed (Muse's)
    restores_window_order: bool = False
    #: patches per entry of vision.window_index where the tower restores the window order: 1 on Muse's (computed before
    #: the patch embedding), spatial_merge_size**2 on Ovis2.5's (one entry a merge unit, computed after it)
    window_unit: int = 1
    #: the family names a transformers bug that breaks its root's forward on some releases (envoys.core.bugs)
    forward_bug: bool = False
    #: the native path of the position embeddings the text model adds before its first block (OPT's learned ones),
    #: which layers[0].input holds at the image tokens besides image_features; None where it adds none
    positions: str | None = None
    #: the host adds the features to the image tokens' own embeddings (Molmo 2's scatter writes ``inputs_embeds[mask] +
    #: features``), so what it scatters, image_features, is their sum, not the projector's features alone
    adds_to_embeddings: bool = False
    #: the root's forward runs on text alone (a text-only load traces a prompt); BLIP-2's requires pixel_values
    text_alone: bool = True
    #: the rules that rewrite the checkpoint's forwards (`envoys.rules`, as ``python -m instrument.show`` names them):
    #: its host's scatter, the listed forwards it runs, and the kernel call and eager kernel of each attention class
    rules: tuple[str, ...] = ()
    #: the checkpoint's video, where its family serves videos; None where it takes none
    video: VideoRow | None = None
    #: the checkpoint's second of audio, where its family serves audio; None where it takes none
    audio: AudioRow | None = None
    #: the checkpoint's mixture-of-experts text blocks; None where its text model has none
    moe: MoeRow | None = None
    #: the text blocks that cross-attend to the image, where it enters through cross-attention (Mllama's): no token
    #: holds image_features, which every such block's cross-attention reads (``cross_attention_states``)
    cross_layers: tuple[int, ...] = ()
    #: the layout of patch_embeddings where it is not the stream's without its prefix (Mllama's: a row a tile, before
    #: the tower joins each image's tiles into one row); None where it is
    patch_embeddings: Layout | None = None
    #: where tower_output is no block's stream (Mllama's: the global stack's output beside local layers'), the layout of
    #: tower_output (its family's test says what it is); None where it is the stream's
    tower_output: Layout | None = None
    #: the native modules under the standard names: standard path -> native path, the first dotted from the standard
    #: model (``vision.layers.0.self_attn.o_proj``: a digit indexes a stack of blocks; ``model.…`` reaches native names
    #: the standard tree keeps), the second from the transformers root (``model._module.get_submodule``). Every row
    #: names at least ``vision``, ``projector`` and ``layers``, and ``vision.layers`` where the tower has blocks; a stack's
    #: entry asserts its blocks are the native stack's, in order; a ``*`` for the block index stands for every block of
    #: the stack (`blocks`). Read off the family's native module tree and the family module's RENAME.
    native: Mapping[str, str] = field(default_factory=dict)

    @property
    def images(self) -> list[Any]:
        """The two noise images, the first 32x32, the second ``second_image``."""
        return [noise_image(*FIRST_IMAGE, seed=0), noise_image(*self.second_image, seed=1)]


#: The pattern of a packed tower whose attention calls its kernel once per image (or per window) at cu_seqlens: the
#: Qwen ViT's (where the spec's reference said Unavailable, PER_IMAGE), and every tower of that shape's.
PER_IMAGE_PATTERN = PatternRow(per_call=True)
#: A vision side with no tower blocks (Gemma 4 Unified's embedder): every block value's reason.
NO_BLOCKS = r"has no blocks \(vision\.num_layers is 0\)"
#: A Qwen tower that attends per image has no window order.
NO_WINDOWS = {"window_index": "attends per image, not in windows"}


def attention(model_type: str, cls: str, kernel: str = "eager-attention") -> tuple[str, str]:
    """The two rules of an attention class on the shared interface: its kernel call and the eager kernel it drills into."""
    return (f"{model_type}.{kernel}", f"{model_type}.{cls}")


def scatter(model_type: str) -> str:
    return f"{model_type}.image-scatter"


def router(model_type: str, cls: str) -> str:
    """The rule of a mixture-of-experts router class: its logits call."""
    return f"{model_type}.{cls}"


SIGLIP_ATTENTION = attention("siglip", "SiglipAttention")
CLIP_ATTENTION = attention("clip", "CLIPAttention")
LLAMA_ATTENTION = attention("llama", "LlamaAttention")
MISTRAL_ATTENTION = attention("mistral", "MistralAttention")
PIXTRAL_ATTENTION = attention("pixtral", "PixtralAttention")
COHERE2_ATTENTION = attention("cohere2", "Cohere2Attention")

#: SigLIP and CLIP towers: width 32, 2 heads of 16, MLP 64 wide.
SIGLIP = {"vision_hidden_size": 32, "num_heads": 2, "head_dim": 16, "intermediate_size": 64}


# -- native names (Row.native) ---------------------------------------------------------------------------------------

#: Whether the installed transformers' ``SiglipVisionModel`` keeps its embeddings, encoder and final norm one level
#: down, in a ``vision_model`` (4.57 to 5.2 at least), as its ``__init__`` says; ``CLIPVisionModel`` moved with it.
NESTED_VISION_MODEL = "self.vision_model" in inspect.getsource(SiglipVisionModel.__init__)


def tower_body(tower: str) -> str:
    """The native path of the module that holds a SigLIP / CLIP vision model's embeddings, encoder and final norm:
    ``tower`` itself, or its ``vision_model`` where the installed transformers nests one."""
    return f"{tower}.vision_model" if NESTED_VISION_MODEL else tower


#: A SigLIP / CLIP encoder block: layer_norm1 before the attention, layer_norm2 before the MLP, out_proj, fc1 / fc2.
ENCODER_BLOCK = {
    "self_attn": "self_attn", "self_attn.o_proj": "self_attn.out_proj", "input_layernorm": "layer_norm1",
    "post_attention_layernorm": "layer_norm2", "mlp": "mlp", "mlp.up_proj": "mlp.fc1", "mlp.down_proj": "mlp.fc2",
}
#: A Qwen ViT style block: norm1, attn (its output projection proj), norm2, mlp (whose projections' names differ).
QWEN_VIT_BLOCK = {
    "self_attn": "attn", "self_attn.o_proj": "attn.proj", "input_layernorm": "norm1", "post_attention_layernorm": "norm2",
    "mlp": "mlp",
}
#: A Pixtral tower block: attention_norm, attention, ffn_norm, feed_forward.
PIXTRAL_BLOCK = {
    "self_attn": "attention", "self_attn.o_proj": "attention.o_proj", "input_layernorm": "attention_norm",
    "post_attention_layernorm": "ffn_norm", "mlp": "feed_forward", "mlp.up_proj": "feed_forward.up_proj",
    "mlp.down_proj": "feed_forward.down_proj",
}
#: A Llama-style text block: its sublayers and pre-norms under the standard names themselves.
TEXT_BLOCK = {name: name for name in ("self_attn", "mlp", "input_layernorm", "post_attention_layernorm")}


def blocks(standard: str, native: str, names: Mapping[str, str] = TEXT_BLOCK) -> dict[str, str]:
    """A stack of blocks at ``native`` under the standard ``standard``, and ``names`` (standard -> native, within a
    block) on every block: ``{standard}.*.{name}`` -> ``{native}.*.{names[name]}``."""
    return {standard: native, **{f"{standard}.*.{name}": f"{native}.*.{path}" for name, path in names.items()}}


def encoder_tower(tower: str, *, norm: bool = True) -> dict[str, str]:
    """A SigLIP / CLIP vision model at ``tower``: the tower, its patch embedding and blocks (`ENCODER_BLOCK`) in its
    body (`tower_body`), and, where ``norm``, its ``post_layernorm`` over every patch (a CLIP tower's normalises its CLS
    row alone, no standard name's)."""
    body = tower_body(tower)
    names = {"vision": tower, "vision.patch_embed": f"{body}.embeddings.patch_embedding",
             **blocks("vision.layers", f"{body}.encoder.layers", ENCODER_BLOCK)}
    return {**names, "vision.norm": f"{body}.post_layernorm"} if norm else names


def text_model(root: str, block: Mapping[str, str] = TEXT_BLOCK, *, norm: str = "norm",
               embed_tokens: str = "embed_tokens") -> dict[str, str]:
    """A text model at ``root``: its token embedding, its final norm, its blocks (``layers``) with ``block``'s names."""
    return {"embed_tokens": f"{root}.{embed_tokens}", "norm": f"{root}.{norm}", **blocks("layers", f"{root}.layers", block)}
