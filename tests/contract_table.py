"""What the vision contract suite (tests/test_vision_contracts.py) expects of each tiny checkpoint: one row per builder.

Every number here is read off the builder's documented configuration in
``envoys/tiny/`` (its module and builder docstrings and the config it writes:
image and patch sizes, tiles, merges, CLS and register tokens, block counts),
never off the code under test. Each row's comment says where its numbers come
from. The suite runs every contract on every builder in ``envoys.tiny.NAMES``;
a builder is covered by all of them once it has a row here, and a builder
without one fails, asking for it.

Images: the first is 32x32 noise; the second (``second_image``, width x height)
is of another size, 64 wide and 48 high unless the row says otherwise (a tiled
family takes one whose tiling differs from the first's).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import transformers
from packaging.version import Version

from envoys.tiny import noise_image

#: The installed transformers release, for the rows whose shapes a release changed.
TRANSFORMERS = Version(transformers.__version__)

#: The first image of every invoke: 32x32 noise.
FIRST_IMAGE = (32, 32)


@dataclass(frozen=True)
class Layout:
    """Where each image's rows are in a value of the tower (or the projector's output).

    ``per_image[i]`` is image i's ``(rows, positions)``: how many rows of the
    value it has (its tiles; 1 for a whole image) and how many positions each
    of those rows holds. ``kind`` says how the images are put together:

    - ``"batched"``: rows stacked on a leading axis, ``[sum of rows, positions, ...]``
      (every row as long as the others);
    - ``"packed"``: one row holding every image's positions, image after image,
      ``[1, sum of rows * positions, ...]``;
    - ``"flat"``: no row axis, ``[sum of rows * positions, ...]``;
    - ``"square"``: as ``"batched"``, each row's positions on a square grid, ``[sum of rows, side, side, ...]``
      (``side * side`` positions: a pixel-shuffle projector's output, one position per folded block);
    - ``"slots"``: as ``"packed"`` under one more leading 1, ``[1, 1, sum of rows * positions, ...]`` (a projector that
      unshuffles every row's slots side by side as one image: LFM2-VL's).
    """

    kind: str
    per_image: tuple[tuple[int, int], ...]

    def shape(self, images: int) -> tuple[int, ...]:
        """The value's leading axes for the first ``images`` images (the width or the heads follow)."""
        chosen = self.per_image[:images]
        if self.kind in ("batched", "square"):
            (positions,) = {positions for _, positions in chosen}
            rows = sum(rows for rows, _ in chosen)
            if self.kind == "square":
                side = math.isqrt(positions)
                assert side * side == positions, f"{positions} positions are no square grid"
                return (rows, side, side)
            return (rows, positions)
        total = sum(rows * positions for rows, positions in chosen)
        if self.kind == "slots":
            return (1, 1, total)
        return (1, total) if self.kind == "packed" else (total,)

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


def batched(*per_image: tuple[int, int]) -> Layout:
    return Layout("batched", per_image)


def packed(*positions: int) -> Layout:
    return Layout("packed", tuple((1, count) for count in positions))


def flat(*per_image: tuple[int, int]) -> Layout:
    return Layout("flat", per_image)


def square(*per_image: tuple[int, int]) -> Layout:
    return Layout("square", per_image)


def slots(*per_image: tuple[int, int]) -> Layout:
    return Layout("slots", per_image)


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
class Row:
    """One checkpoint's expected numbers, for the first image alone and for both images."""

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
    #: None where attention_probabilities is served; else a regex of the reason it is Unavailable
    pattern_unavailable: str | None = None
    #: blocks whose pattern has other rows than the stream (a windowed block attends per window): block -> (rows for
    #: both images, positions of a row)
    pattern_rows: Mapping[int, tuple[int, int]] = field(default_factory=dict)
    #: each image's row is padded to a fixed length, and the pattern is zero on the padded keys
    padded: bool = False
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
    #: the root's forward runs on text alone (a text-only load traces a prompt); BLIP-2's requires pixel_values
    text_alone: bool = True
    #: the rules that rewrite the checkpoint's forwards (`envoys.rules`, as ``python -m instrument.show`` names them):
    #: its host's scatter, the listed forwards it runs, and the kernel call and eager kernel of each attention class
    rules: tuple[str, ...] = ()

    @property
    def images(self) -> list[Any]:
        """The two noise images, the first 32x32, the second ``second_image``."""
        return [noise_image(*FIRST_IMAGE, seed=0), noise_image(*self.second_image, seed=1)]


#: The Qwen ViT's attention calls its kernel once per image, at attention_interface_2: the spec's reason (PER_IMAGE).
QWEN_PER_IMAGE = r"the Qwen ViT's attention makes one interface call per image \(attention_interface_2.*cu_seqlens"
#: RADIO's attention calls its kernel once per image too, at attention_interface_3 when several images are packed.
RADIO_PER_IMAGE = r"RADIO's attention makes one kernel call per image.*attention_interface_3.*cu_seqlens"
#: The GLM ViT's attention calls its kernel once per image too, at attention_interface_2.
GLM_PER_IMAGE = r"the GLM ViT's attention makes one interface call per image \(attention_interface_2.*cu_seqlens"
#: A packed SigLIP-shaped tower's attention (PaddleOCR-VL, VideoLLaMA 3) calls its kernel once per image too.
PACKED_SIGLIP_PER_IMAGE = (
    r"this packed SigLIP tower's attention makes one interface call per image \(attention_interface_2.*cu_seqlens"
)
#: The Muse tower's attention calls its kernel once per window or per image, at attention_interface_2.
MUSE_PER_IMAGE = r"the Muse tower's attention makes one interface call per window.*\(attention_interface_2\).*cu_seqlens"
#: MoonViT's attention (Kimi K2.5) calls its kernel once per image too, at attention_interface_2.
KIMI_PER_IMAGE = r"MoonViT's attention makes one interface call per image \(attention_interface_2.*cu_seqlens"
#: HunYuanVL's tower attention calls its kernel once per image too, at attention_interface_2.
HUNYUAN_PER_IMAGE = r"HunYuanVL's tower attention makes one interface call per image \(attention_interface_2.*cu_seqlens"
#: MiniCPM-V's tower attention calls its kernel once per image unit too, at attention_interface_2.
MINICPM_PER_IMAGE = r"MiniCPM-V's ViT attention makes one interface call per image unit \(attention_interface_2.*cu_seqlens"
#: Dots 3 Note's tower attention calls its kernel once per image too, at attention_interface_2.
DOTS_PER_IMAGE = r"the Dots 3 tower's attention makes one interface call per image \(attention_interface_2.*cu_seqlens"
#: A vision side with no tower blocks (Gemma 4 Unified's embedder): every block value's reason.
NO_BLOCKS = r"has no blocks \(vision\.num_layers is 0\)"
#: LFM3-VL's tower attention calls its kernel once per image too, at attention_interface_2.
#: Ovis2.5's tower attention calls its kernel once per window or per image, at attention_interface_2.
OVIS2_5_PER_IMAGE = r"the Ovis2.5 tower's attention makes one interface call per window.*\(attention_interface_2\).*cu_seqlens"
LFM3_VL_PER_IMAGE = r"LFM3-VL's tower attention makes one interface call per image \(attention_interface_2.*cu_seqlens"
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

ROWS: dict[str, Row] = {
    # envoys/tiny/llava.py: 32x32 images (any input resized) of 8x8 patches, 16 patches and 16 image tokens each;
    # SigLIP, no CLS, 2 blocks, post_layernorm; the projector reads the last block before it, every patch.
    "llava-siglip": Row(
        image_tokens=(16, 16),
        sizes=Sizes(num_layers=2, patch_size=8, image_size=32, **SIGLIP),
        stream=batched((1, 16), (1, 16)),
        projected=batched((1, 16), (1, 16)),
        projector_reads=Reads("layer_output", block=-1),
        final_norm=True,
        rules=(scatter("llava"), *SIGLIP_ATTENTION, *attention("qwen2", "Qwen2Attention")),
    ),
    # envoys/tiny/llava.py: CLIP, CLS first (1 + 16 positions), 3 blocks, no norm over the patches; the projector reads
    # block -2 without its CLS token: 16 image tokens an image.
    "llava-clip": Row(
        image_tokens=(16, 16),
        sizes=Sizes(num_layers=3, patch_size=8, image_size=32, **SIGLIP),
        stream=batched((1, 17), (1, 17)),
        projected=batched((1, 16), (1, 16)),
        projector_reads=Reads("layer_output", block=-2, drop_first=1),
        prefix=1,
        rules=(scatter("llava"), *CLIP_ATTENTION, *LLAMA_ATTENTION),
    ),
    # envoys/tiny/vipllava.py: llava-clip's CLIP tower (1 + 16 positions, 3 blocks) and processor (16 image tokens);
    # the projector reads two tower states joined on the feature axis (tests/test_vipllava.py says how).
    "vipllava": Row(
        image_tokens=(16, 16),
        sizes=Sizes(num_layers=3, patch_size=8, image_size=32, **SIGLIP),
        stream=batched((1, 17), (1, 17)),
        projected=batched((1, 16), (1, 16)),
        projector_reads=None,
        prefix=1,
        rules=(scatter("vipllava"), *CLIP_ATTENTION, *LLAMA_ATTENTION),
    ),
    # envoys/tiny/deepseek_vl.py: llava-siglip's SigLIP tower (32x32 images of 8 px patches, 16 patches, no CLS, 2
    # blocks, post_layernorm); every image resized and padded to 32x32; the aligner reads tower_output (after the
    # norm), patch by patch: 16 image tokens an image.
    "deepseek_vl": Row(
        image_tokens=(16, 16),
        sizes=Sizes(num_layers=2, patch_size=8, image_size=32, **SIGLIP),
        stream=batched((1, 16), (1, 16)),
        projected=batched((1, 16), (1, 16)),
        projector_reads=Reads("tower_output"),
        final_norm=True,
        rules=(scatter("deepseek_vl"), *SIGLIP_ATTENTION, *LLAMA_ATTENTION),
    ),
    # envoys/tiny/janus.py: Janus's tower, SigLIP's shape (32x32 images of 8 px patches, 16 patches, no CLS, 2 blocks,
    # width 32, 2 heads, MLP 64 wide from mlp_ratio 2, post_layernorm); every image resized and padded to 32x32; the
    # aligner reads tower_output (after the norm), patch by patch: 16 image tokens an image.
    "janus": Row(
        image_tokens=(16, 16),
        sizes=Sizes(num_layers=2, patch_size=8, image_size=32, **SIGLIP),
        stream=batched((1, 16), (1, 16)),
        projected=batched((1, 16), (1, 16)),
        projector_reads=Reads("tower_output"),
        final_norm=True,
        rules=(scatter("janus"), *attention("janus", "JanusVisionAttention"), *LLAMA_ATTENTION),
    ),
    # envoys/tiny/deepseek_vl_hybrid.py: deepseek_vl's SigLIP tower (model.vision) and 16 image tokens an image; the
    # aligner's first argument is its tower_output (the second, the SAM tower's, tests/test_deepseek_vl_hybrid.py); the
    # SAM tower's blocks run the rules of GOT-OCR 2.0's (rewrites/sam_vision.py).
    "deepseek_vl_hybrid": Row(
        image_tokens=(16, 16),
        sizes=Sizes(num_layers=2, patch_size=8, image_size=32, **SIGLIP),
        stream=batched((1, 16), (1, 16)),
        projected=batched((1, 16), (1, 16)),
        projector_reads=Reads("tower_output"),
        final_norm=True,
        rules=(scatter("deepseek_vl_hybrid"), "sam.vision-attention", "sam.vision-windows", *SIGLIP_ATTENTION,
               *LLAMA_ATTENTION),
    ),
    # envoys/tiny/llava_next.py: CLIP on 32x32 tiles (1 + 16 positions), 3 blocks; a 32x32 image is 3 tiles and 36
    # image tokens, a 64 wide, 48 high one 5 tiles and 70; the projector reads block -2 without CLS, per tile, and the
    # host unpads the grid and adds newline rows, so image_features is not the projector's output.
    "llava_next": Row(
        image_tokens=(36, 70),
        sizes=Sizes(num_layers=3, patch_size=8, image_size=32, **SIGLIP),
        stream=batched((3, 17), (5, 17)),
        projected=batched((3, 16), (5, 16)),
        projector_reads=Reads("layer_output", block=-2, drop_first=1),
        prefix=1,
        features_are_projected=False,
        rules=(scatter("llava_next"), *CLIP_ATTENTION, *MISTRAL_ATTENTION),
    ),
    # envoys/tiny/llava_onevision.py: SigLIP on 32x32 tiles of 8 px patches (16 positions, no CLS), 2 blocks,
    # post_layernorm; a 32x32 image is 2 tiles (base + 1x1 grid) and 36 image tokens (16 + 4x4 + 4 newlines), a 64 wide,
    # 48 high one 5 tiles (base + 2x2) and 70 (16 + 6x8 + 6); the projector reads the last block before the norm, every
    # patch, per tile, and the host unpads the grid and adds newline rows, so image_features is not its output.
    "llava_onevision": Row(
        image_tokens=(36, 70),
        sizes=Sizes(num_layers=2, patch_size=8, image_size=32, **SIGLIP),
        stream=batched((2, 16), (5, 16)),
        projected=batched((2, 16), (5, 16)),
        projector_reads=Reads("layer_output", block=-1),
        final_norm=True,
        features_are_projected=False,
        rules=(scatter("llava_onevision"), *SIGLIP_ATTENTION, *attention("qwen2", "Qwen2Attention")),
    ),
    # envoys/tiny/video_llava.py: llava-clip's CLIP tower (1 + 16 positions, 3 blocks) as the image tower, its
    # processor's sizes (32x32 crops, 16 image tokens an image); the projector reads block -2 without its CLS token and
    # the host scatters its output as it is.
    "video_llava": Row(
        image_tokens=(16, 16),
        sizes=Sizes(num_layers=3, patch_size=8, image_size=32, **SIGLIP),
        stream=batched((1, 17), (1, 17)),
        projected=batched((1, 16), (1, 16)),
        projector_reads=Reads("layer_output", block=-2, drop_first=1),
        prefix=1,
        rules=(scatter("video_llava"), *CLIP_ATTENTION, *LLAMA_ATTENTION),
    ),
    # envoys/tiny/llava_next_video.py: llava_next's tiles and pinpoints on llava-clip's CLIP tower (1 + 16 positions, 3
    # blocks); a 32x32 image is 3 tiles and 36 image tokens, a 64 wide, 48 high one 5 tiles and 70; the projector reads
    # block -2 without CLS, per tile, and the host unpads the grid and adds newline rows.
    "llava_next_video": Row(
        image_tokens=(36, 70),
        sizes=Sizes(num_layers=3, patch_size=8, image_size=32, **SIGLIP),
        stream=batched((3, 17), (5, 17)),
        projected=batched((3, 16), (5, 16)),
        projector_reads=Reads("layer_output", block=-2, drop_first=1),
        prefix=1,
        features_are_projected=False,
        rules=(scatter("llava_next_video"), *CLIP_ATTENTION, *LLAMA_ATTENTION),
    ),
    # envoys/tiny/aya_vision.py: SigLIP on 32 px tiles of 4 px patches (64 a tile), 2 blocks, post_layernorm; 16 tokens
    # a tile after the 2x2 pixel shuffle, [tiles, 4, 4, hidden] out of the projector; a 32x32 image is 1 tile (16
    # tokens), a 64 wide, 48 high one 2x2 tiles + the thumbnail (80); the projector reads the last block before the norm.
    "aya_vision": Row(
        image_tokens=(16, 80),
        sizes=Sizes(num_layers=2, patch_size=4, image_size=32, **SIGLIP),
        stream=batched((1, 64), (5, 64)),
        projected=square((1, 16), (5, 16)),
        projector_reads=Reads("layer_output", block=-1),
        final_norm=True,
        rules=(scatter("aya_vision"), *SIGLIP_ATTENTION, *COHERE2_ATTENTION),
    ),
    # envoys/tiny/ovis2.py: 32 px tiles of 4 px patches (64 a tile), 2 blocks, a final RMS norm; 16 tokens a tile after
    # the 2x2 fold; a 32x32 image is 1 tile (16 tokens), a 64 wide, 48 high one the thumbnail + 2x2 tiles (80); the
    # projector reads the visual tokenizer's probabilities, padded (tests/test_ovis2.py).
    "ovis2": Row(
        image_tokens=(16, 80),
        sizes=Sizes(num_layers=2, patch_size=4, image_size=32, **SIGLIP),
        stream=batched((1, 64), (5, 64)),
        projected=batched((1, 16), (5, 16)),
        projector_reads=None,
        final_norm=True,
        rules=(scatter("ovis2"), *attention("ovis2", "Ovis2VisionAttention"), *attention("qwen2", "Qwen2Attention")),
    ),
    # envoys/tiny/cohere2_vision.py: Aya Vision's sizes and tiling; the projector reads tower_output (after the norm).
    "cohere2_vision": Row(
        image_tokens=(16, 80),
        sizes=Sizes(num_layers=2, patch_size=4, image_size=32, **SIGLIP),
        stream=batched((1, 64), (5, 64)),
        projected=square((1, 16), (5, 16)),
        projector_reads=Reads("tower_output"),
        final_norm=True,
        rules=(scatter("cohere2_vision"), *SIGLIP_ATTENTION, *COHERE2_ATTENTION),
    ),
    # envoys/tiny/internvl.py: InternViT on 32 px tiles of 4 px patches, CLS first (1 + 64 rows a tile), 2 blocks, no
    # final norm (mean pooling); 16 tokens a tile: a 32x32 image is 1 tile, a 64 wide, 48 high one 2x2 tiles + the
    # thumbnail (80); the host drops the CLS and pixel-shuffles before the projector, [tiles, 16, hidden] out of it.
    "internvl": Row(
        image_tokens=(16, 80),
        sizes=Sizes(num_layers=2, patch_size=4, image_size=32, **SIGLIP),
        stream=batched((1, 65), (5, 65)),
        projected=batched((1, 16), (5, 16)),
        projector_reads=None,
        prefix=1,
        rules=(scatter("internvl"), *attention("internvl", "InternVLVisionAttention"),
               *attention("qwen2", "Qwen2Attention")),
    ),
    # envoys/tiny/qianfan_ocr.py: InternVL's tower, tiles and tokens (1 + 64 rows a tile, 16 tokens; 1 tile and 2x2 +
    # the thumbnail), drop-path modules in its blocks; a Qwen3 text model.
    "qianfan_ocr": Row(
        image_tokens=(16, 80),
        sizes=Sizes(num_layers=2, patch_size=4, image_size=32, **SIGLIP),
        stream=batched((1, 65), (5, 65)),
        projected=batched((1, 16), (5, 16)),
        projector_reads=None,
        prefix=1,
        rules=(scatter("qianfan_ocr"), *attention("qianfan_ocr", "QianfanOCRVisionAttention"),
               *attention("qwen3", "Qwen3Attention")),
    ),
    # envoys/tiny/llava_pixtral.py: Pixtral, packed, 8 px patches and no merge: 32x32 is 16 patches and tokens,
    # 48 high x 64 wide 48; no final norm; LLaVA's projector reads the last block, every patch.
    "llava-pixtral": Row(
        image_tokens=(16, 48),
        sizes=Sizes(num_layers=2, patch_size=8, image_size="image_sizes", **SIGLIP),
        stream=packed(16, 48),
        projected=packed(16, 48),
        projector_reads=Reads("layer_output", block=-1),
        rules=(scatter("llava"), *PIXTRAL_ATTENTION, *MISTRAL_ATTENTION),
    ),
    # envoys/tiny/mistral3.py: Pixtral, packed, 4 px patches, 2x2 merge: 32x32 is 64 patches and 16 tokens, 48 high x
    # 64 wide 192 patches and 48 tokens; the projector (its merger inside) takes the last block's packed row.
    "mistral3": Row(
        image_tokens=(16, 48),
        sizes=Sizes(num_layers=2, patch_size=4, image_size="image_sizes", **SIGLIP),
        stream=packed(64, 192),
        projected=flat((1, 16), (1, 48)),
        projector_reads=Reads("layer_output", block=-1, unbatched=True),
        rules=(scatter("mistral3"), *PIXTRAL_ATTENTION, *MISTRAL_ATTENTION),
    ),
    # envoys/tiny/lighton_ocr.py: mistral3's tower, processor sizes and projector (64 and 192 patches, 16 and 48
    # tokens); the projector reads the tower's last_hidden_state (no final norm: the last block's stream), unbatched.
    "lighton_ocr": Row(
        image_tokens=(16, 48),
        sizes=Sizes(num_layers=2, patch_size=4, image_size="image_sizes", **SIGLIP),
        stream=packed(64, 192),
        projected=flat((1, 16), (1, 48)),
        projector_reads=Reads("tower_output", unbatched=True),
        rules=(scatter("lighton_ocr"), *PIXTRAL_ATTENTION, *attention("qwen3", "Qwen3Attention")),
    ),
    # envoys/tiny/mistral_large4.py: mistral3's tower, processor and projector (64 and 192 patches, 16 and 48 tokens,
    # the last block's packed row); the text model's latent attention on DeepSeek-V3.2's eager kernel; text block 0's
    # MLP dense (no router), block 1's a mixture of experts.
    "mistral_large4": Row(
        image_tokens=(16, 48),
        sizes=Sizes(num_layers=2, patch_size=4, image_size="image_sizes", **SIGLIP),
        stream=packed(64, 192),
        projected=flat((1, 16), (1, 48)),
        projector_reads=Reads("layer_output", block=-1, unbatched=True),
        text_gaps={"mlp.router_logits": (0,)},
        rules=(scatter("mistral_large4"), *PIXTRAL_ATTENTION,
               *attention("mistral_large4", "MistralLarge4TextAttention"),
               router("mistral_large4", "MistralLarge4TextTopkRouter")),
    ),
    # envoys/tiny/gemma3.py: SigLIP on 32x32 (any input resized), 4 px patches, 64 patches, post_layernorm; the
    # projector pools tower_output 2x2 to 16 tokens an image.
    "gemma3": Row(
        image_tokens=(16, 16),
        sizes=Sizes(num_layers=2, patch_size=4, image_size=32, **SIGLIP),
        stream=batched((1, 64), (1, 64)),
        projected=batched((1, 16), (1, 16)),
        projector_reads=Reads("tower_output"),
        final_norm=True,
        rules=(scatter("gemma3"), *SIGLIP_ATTENTION, *attention("gemma3", "Gemma3Attention")),
    ),
    # envoys/tiny/paligemma.py: llava-siglip's SigLIP tower (32x32, any input resized, 8 px patches: 16 patches,
    # post_layernorm); the projector, one Linear, reads tower_output: one image token a patch, 16 an image.
    "paligemma": Row(
        image_tokens=(16, 16),
        sizes=Sizes(num_layers=2, patch_size=8, image_size=32, **SIGLIP),
        stream=batched((1, 16), (1, 16)),
        projected=batched((1, 16), (1, 16)),
        projector_reads=Reads("tower_output"),
        final_norm=True,
        rules=(scatter("paligemma"), *SIGLIP_ATTENTION, *attention("gemma", "GemmaAttention")),
    ),
    # envoys/tiny/paligemma.py, build_paligemma2: build_paligemma's tower, projector and processor; Gemma 2 text.
    "paligemma-2": Row(
        image_tokens=(16, 16),
        sizes=Sizes(num_layers=2, patch_size=8, image_size=32, **SIGLIP),
        stream=batched((1, 16), (1, 16)),
        projected=batched((1, 16), (1, 16)),
        projector_reads=Reads("tower_output"),
        final_norm=True,
        rules=(scatter("paligemma"), *SIGLIP_ATTENTION, *attention("gemma2", "Gemma2Attention")),
    ),
    # envoys/tiny/gemma4.py: every image's row padded to 280 patches (70 soft tokens x 2**2); 32x32 has 256 real
    # patches and 64 tokens, 48 high x 64 wide 252 and 63; the encoder has no final norm; the projector reads the
    # pooler's real cells.
    "gemma4": Row(
        image_tokens=(64, 63),
        sizes=Sizes(num_layers=2, patch_size=4, image_size="image_position_ids", **SIGLIP),
        stream=batched((1, 280), (1, 280)),
        projected=flat((1, 64), (1, 63)),
        projector_reads=None,
        padded=True,
        rules=(scatter("gemma4"), *attention("gemma4", "Gemma4TextAttention"), "gemma4.Gemma4VisionAttention"),
    ),
    # envoys/tiny/gemma4_unified.py: no tower blocks; every image's row padded to 70 merged 8x8-pixel patches
    # (max_soft_tokens), width 48; 32x32 has 8x8 = 64 real ones, 48 high x 64 wide 7x9 = 63, one image token each; the
    # projector (inside model.vision) gives every row, padding included, which the host drops. Text blocks: Gemma 4's,
    # no per-layer inputs.
    "gemma4_unified": Row(
        image_tokens=(64, 63),
        sizes=Sizes(num_layers=0, vision_hidden_size=48, num_heads=0, head_dim=0, intermediate_size=0, patch_size=8,
                    image_size="image_position_ids"),
        stream=batched((1, 70), (1, 70)),
        projected=batched((1, 70), (1, 70)),
        projector_reads=None,
        padded=True,
        features_are_projected=False,
        pattern_unavailable=NO_BLOCKS,
        vision_unavailable={value: NO_BLOCKS for value in (
            "layer_input", "attention_output", "mlp_output", "layer_output", "self_attn.attention_output",
            "self_attn.attention_queries", "self_attn.attention_keys", "self_attn.attention_values",
            "self_attn.attention_head_outputs", "mlp.mlp_output")},
        text_gaps={"per_layer_input": (0, 1, 2, 3), "per_layer_output": (0, 1, 2, 3)},
        rules=(scatter("gemma4_unified"), *attention("gemma4_unified", "Gemma4UnifiedTextAttention")),
    ),
    # envoys/tiny/lfm2_vl.py: every row padded to 80 patches of 4 px (max_image_tokens 20 x 2**2); 32x32 is one row of
    # 8x8 real patches and 16 tokens, 64 wide x 48 high 2x2 tiles of 8x8 + a 10x6 thumbnail (5 rows, 4 * 16 + 15 = 79
    # tokens); post_layernorm; the projector gives every row 80 / 2**2 = 20 slots, padding slots included, which the
    # host drops. Text blocks: a short convolution, then attention.
    "lfm2_vl": Row(
        image_tokens=(16, 79),
        sizes=Sizes(num_layers=2, patch_size=4, image_size="spatial_shapes", **SIGLIP),
        stream=batched((1, 80), (5, 80)),
        projected=slots((1, 20), (5, 20)),
        projector_reads=None,
        final_norm=True,
        padded=True,
        features_are_projected=False,
        text_gaps={"attention_output": (0,), "self_attn.": (0,)},
        rules=(scatter("lfm2_vl"), *attention("siglip2", "Siglip2Attention"), *attention("lfm2", "Lfm2Attention")),
    ),
    # envoys/tiny/lfm3_vl.py: packed, patch 8, 2x2 merge blocks: 32x32 is 16 patches and 4 tokens, 64 wide x 48 high
    # 48 patches and 12; tower block 0 attention, block 1 a gated 2D convolution, no final norm; the projector reads
    # tower_output. Text blocks: a short convolution, sliding-window attention, full attention.
    "lfm3_vl": Row(
        image_tokens=(4, 12),
        sizes=Sizes(num_layers=2, patch_size=8, image_size="image_grid_thw", **SIGLIP),
        stream=packed(16, 48),
        projected=flat((1, 4), (1, 12)),
        projector_reads=Reads("tower_output", unbatched=True),
        pattern_unavailable=LFM3_VL_PER_IMAGE,
        vision_unavailable=NO_WINDOWS,
        tower_mixers={1: "conv"},
        text_gaps={"attention_output": (0,), "self_attn.": (0,)},
        rules=(scatter("lfm3_vl"), "lfm3_vl.vision-attention", *attention("lfm3", "Lfm3Attention")),
    ),
    # envoys/tiny/idefics3.py: 32 px tiles of 8 px patches (16 a tile), 4 tokens a tile; 32x32 is 2x2 tiles + the
    # global one (20 tokens), 64 wide x 32 high 1x2 + 1 (12); post_layernorm; the connector reads tower_output.
    "idefics3": Row(
        image_tokens=(20, 12),
        sizes=Sizes(num_layers=2, patch_size=8, image_size=32, **SIGLIP),
        stream=batched((5, 16), (3, 16)),
        projected=batched((5, 4), (3, 4)),
        projector_reads=Reads("tower_output"),
        second_image=(64, 32),
        final_norm=True,
        rules=(scatter("idefics3"), *attention("idefics3", "Idefics3VisionAttention"), *LLAMA_ATTENTION),
    ),
    # envoys/tiny/idefics3.py: SmolVLM has Idefics 3's sizes.
    "smolvlm": Row(
        image_tokens=(20, 12),
        sizes=Sizes(num_layers=2, patch_size=8, image_size=32, **SIGLIP),
        stream=batched((5, 16), (3, 16)),
        projected=batched((5, 4), (3, 4)),
        projector_reads=Reads("tower_output"),
        second_image=(64, 32),
        final_norm=True,
        rules=(scatter("smolvlm"), *attention("smolvlm", "SmolVLMVisionAttention"), *LLAMA_ATTENTION),
    ),
    # envoys/tiny/granite_docling.py: 32 px tiles of 4 px patches (64 a tile), 4 tokens a tile on the coarse path (4x4
    # shuffle); 32x32 is 1 tile (no thumbnail), 64 wide x 48 high 2x2 tiles + the thumbnail (20); post_layernorm; the
    # connector (inside the tower) reads tower_output and returns (features, DeepStack features), its features flat;
    # DeepStack taps after text blocks 0 and 1 of 3; the Granite text model multiplies the embeddings by 12.
    "granite_docling": Row(
        image_tokens=(4, 20),
        sizes=Sizes(num_layers=2, patch_size=4, image_size=32, **SIGLIP),
        stream=batched((1, 64), (5, 64)),
        projected=flat((1, 4), (5, 4)),
        projector_reads=Reads("tower_output"),
        final_norm=True,
        projector_item=0,
        embedding_multiplier=12.0,
        deepstack_taps=2,
        text_gaps={"deepstack_output": (2,)},
        rules=(scatter("granite_docling"), "granite_docling.deepstack",
               *attention("granite_docling", "GraniteDoclingVisionAttention"), "granite_docling.GraniteDoclingTextAttention"),
    ),
    # envoys/tiny/idefics2.py: 8 px patches, no tiles; 32x32 stays 32x32 (4x4 patches), 64 wide x 48 high becomes 32 x 24
    # (4x3), padded to 4x4 beside the first (its padded keys masked); post_layernorm; the connector reads tower_output
    # and its perceiver resamples each image to 4 latents, 4 image tokens an image.
    "idefics2": Row(
        image_tokens=(4, 4),
        sizes=Sizes(num_layers=2, patch_size=8, image_size="pixel_attention_mask", **SIGLIP),
        stream=batched((1, 16), (1, 16)),
        projected=batched((1, 4), (1, 4)),
        projector_reads=Reads("tower_output"),
        final_norm=True,
        padded=True,
        rules=(scatter("idefics2"), *attention("idefics2", "Idefics2VisionAttention"),
               "idefics2.Idefics2PerceiverAttention", *MISTRAL_ATTENTION),
    ),
    # envoys/tiny/aria.py: Idefics 3's ViT on 980 px squares of 140 px patches (7x7 = 49 a row), 2 blocks,
    # post_layernorm; 64 wide x 48 high is 980 x 735 padded to the square (42 real patches, the rest masked); the
    # projector reads the last block before the norm and gives 4 queries an image, 4 image tokens.
    "aria": Row(
        image_tokens=(4, 4),
        sizes=Sizes(num_layers=2, patch_size=140, image_size=980, **SIGLIP),
        stream=batched((1, 49), (1, 49)),
        projected=batched((1, 4), (1, 4)),
        projector_reads=Reads("layer_output", block=-1),
        final_norm=True,
        padded=True,
        rules=(scatter("aria"), *attention("idefics3", "Idefics3VisionAttention"),
               *attention("aria", "AriaTextAttention"), router("aria", "AriaTextTopKRouter")),
    ),
    # envoys/tiny/llama4.py: 32 px tiles of 8 px patches plus the CLS last (17 rows), 4 tokens a tile; 32x32 is 1
    # tile, 64 wide x 32 high 1x2 tiles + the global one; layernorm_post; the adapter inside the tower transforms
    # tower_output before the projector; MLP 128 wide (32 / 0.5**2). Text block 0 a MoE, block 1 dense (no router).
    "llama4": Row(
        image_tokens=(4, 12),
        sizes=Sizes(num_layers=2, vision_hidden_size=32, num_heads=2, head_dim=16, intermediate_size=128, patch_size=8,
                    image_size=32),
        stream=batched((1, 17), (3, 17)),
        # the root flattens the tiles before the projector; from transformers 5.25 get_image_features projects per tile
        projected=batched((1, 4), (3, 4)) if TRANSFORMERS >= Version("5.25") else flat((1, 4), (3, 4)),
        projector_reads=None,
        second_image=(64, 32),
        prefix=1,
        final_norm=True,
        forward_bug=True,
        text_gaps={"mlp.router_logits": (1,)},
        rules=(scatter("llama4"), "llama4.text-block", *attention("llama4", "Llama4TextAttention"),
               *attention("llama4", "Llama4VisionAttention", kernel="vision-eager-attention"),
               router("llama4", "Llama4Router")),
    ),
    # envoys/tiny/nemotron_h_omni.py: RADIO, packed, 8 px patches, 2 cls + 3 register rows before each image's
    # patches; 32x32 is a 4x4 grid (16 patches, 4 tokens), 64 wide x 48 high 6x8 (48, 12); no final norm; the
    # projector reads the patch rows pixel-shuffled. Text blocks: Mamba2, MoE, attention, MoE. Its Parakeet sound
    # encoder's attention is on the shared interface, so the attention rules are found there too.
    "nemotron_h_omni": Row(
        image_tokens=(4, 12),
        sizes=Sizes(num_layers=2, patch_size=8, image_size="image_grid_hw", **SIGLIP),
        stream=packed(5 + 16, 5 + 48),
        projected=flat((1, 4), (1, 12)),
        projector_reads=None,
        prefix=5,
        pattern_unavailable=RADIO_PER_IMAGE,
        text_gaps={"attention_output": (0, 1, 3), "self_attn.": (0, 1, 3), "mlp_output": (0, 2), "mlp.": (0, 2)},
        rules=(scatter("nemotron_h_omni"), "radio.vision-attention", *attention("nemotron_h", "NemotronHAttention"),
               router("nemotron_h", "NemotronHTopkRouter"), *attention("parakeet", "ParakeetEncoderAttention")),
    ),
    # envoys/tiny/qwen.py: the Qwen ViT, packed, 2x2 merge; patch 8: 32x32 is 16 patches and 4 tokens, 48x64 is 48
    # and 12; no final norm, the merger (the projector) reads the last block's stream; MLP 32 * mlp_ratio 4 wide.
    "qwen2_vl": Row(
        image_tokens=(4, 12),
        sizes=Sizes(num_layers=2, vision_hidden_size=32, num_heads=2, head_dim=16, intermediate_size=128, patch_size=8,
                    image_size="image_grid_thw"),
        stream=packed(16, 48),
        projected=flat((1, 4), (1, 12)),
        projector_reads=Reads("layer_output", block=-1, unbatched=True),
        pattern_unavailable=QWEN_PER_IMAGE,
        vision_unavailable=NO_WINDOWS,
        rules=(scatter("qwen2_vl"), "qwen2_vl.vision-attention", *attention("qwen2_vl", "Qwen2VLAttention")),
    ),
    # envoys/tiny/llava_onevision1_5.py: the Qwen ViT's layout, patch 8, 2x2 merge: 32x32 is 16 patches and 4 tokens,
    # 48x64 is 48 and 12; a CLS row before each image's patches in the blocks (dropped after the last one, so
    # tower_output, the merger's input, has none); GELU MLP 64 wide; Qwen3 text blocks.
    "llava_onevision1_5": Row(
        image_tokens=(4, 12),
        sizes=Sizes(num_layers=2, vision_hidden_size=32, num_heads=2, head_dim=16, intermediate_size=64, patch_size=8,
                    image_size="image_grid_thw"),
        stream=packed(1 + 16, 1 + 48),
        projected=flat((1, 4), (1, 12)),
        projector_reads=None,  # the last block's output without each image's CLS row (tests/test_llava_onevision1_5.py)
        prefix=1,
        drops_prefix=True,
        pattern_unavailable=QWEN_PER_IMAGE,
        vision_unavailable=NO_WINDOWS,
        rules=(scatter("llava_onevision1_5"), "llava_onevision1_5.vision-attention", *attention("qwen3", "Qwen3Attention")),
    ),
    # envoys/tiny/qwen.py: patch 4: 32x32 is 64 patches and 16 tokens, 48x64 is 192 and 48; the blocks and the merger
    # run in window order, restored after the merger, so image_features is not the merger's output as it is.
    "qwen2_5_vl": Row(
        image_tokens=(16, 48),
        sizes=Sizes(num_layers=2, patch_size=4, image_size="image_grid_thw", **SIGLIP),
        stream=packed(64, 192),
        projected=flat((1, 16), (1, 48)),
        projector_reads=Reads("layer_output", block=-1, unbatched=True),
        pattern_unavailable=QWEN_PER_IMAGE,
        features_are_projected=False,
        rules=(scatter("qwen2_5_vl"), "qwen2_5_vl.vision-attention", "qwen2_5_vl.vision-windows",
               *attention("qwen2_5_vl", "Qwen2_5_VLAttention")),
    ),
    # envoys/tiny/qwen.py: 3 blocks, patch 8; DeepStack taps after text blocks 0 and 1 of 4.
    "qwen3_vl": Row(
        image_tokens=(4, 12),
        sizes=Sizes(num_layers=3, patch_size=8, image_size="image_grid_thw", **SIGLIP),
        stream=packed(16, 48),
        projected=flat((1, 4), (1, 12)),
        projector_reads=Reads("layer_output", block=-1, unbatched=True),
        pattern_unavailable=QWEN_PER_IMAGE,
        deepstack_taps=2,
        vision_unavailable=NO_WINDOWS,
        text_gaps={"deepstack_output": (2, 3)},
        rules=(scatter("qwen3_vl"), "qwen3_vl.vision-attention", "qwen3_vl.deepstack",
               *attention("qwen3_vl", "Qwen3VLTextAttention")),
    ),
    # envoys/tiny/qwen3_vl_moe.py: qwen3_vl's tower with 2 blocks, patch 8; DeepStack taps block 0, added after text
    # block 0 of 2; text block 0 a mixture of 4 experts, block 1 dense (mlp_only_layers [1]).
    "qwen3_vl_moe": Row(
        image_tokens=(4, 12),
        sizes=Sizes(num_layers=2, patch_size=8, image_size="image_grid_thw", **SIGLIP),
        stream=packed(16, 48),
        projected=flat((1, 4), (1, 12)),
        projector_reads=Reads("layer_output", block=-1, unbatched=True),
        pattern_unavailable=QWEN_PER_IMAGE,
        deepstack_taps=1,
        vision_unavailable=NO_WINDOWS,
        text_gaps={"deepstack_output": (1,), "mlp.router_logits": (1,)},
        rules=(scatter("qwen3_vl_moe"), "qwen3_vl_moe.vision-attention", "qwen3_vl_moe.deepstack",
               *attention("qwen3_vl_moe", "Qwen3VLMoeTextAttention"), router("qwen3_vl_moe", "Qwen3VLMoeTextTopKRouter")),
    ),
    # envoys/tiny/qwen2_5_omni_thinker.py: the tiny Qwen2.5-VL's tower (patch 4: 32x32 is 64 patches and 16 tokens,
    # 48x64 is 192 and 48; blocks and merger in window order, restored after the merger) under the thinker, which
    # scatters audio (_0) before images (_1); a Whisper-like audio tower beside it.
    "qwen2_5_omni_thinker": Row(
        image_tokens=(16, 48),
        sizes=Sizes(num_layers=2, patch_size=4, image_size="image_grid_thw", **SIGLIP),
        stream=packed(64, 192),
        projected=flat((1, 16), (1, 48)),
        projector_reads=Reads("layer_output", block=-1, unbatched=True),
        pattern_unavailable=QWEN_PER_IMAGE,
        features_are_projected=False,
        rules=(scatter("qwen2_5_omni"), "qwen2_5_omni.vision-attention", "qwen2_5_omni.audio-attention",
               "qwen2_5_omni.vision-windows", *attention("qwen2_5_omni", "Qwen2_5OmniAttention")),
    ),
    # envoys/tiny/qwen3_omni_moe_thinker.py: qwen3_vl's tower with 2 blocks, patch 8; DeepStack taps block 0, added
    # after text block 0 of 2; text block 0 a mixture of 4 experts, block 1 dense (mlp_only_layers [1]); audio
    # scattered before images, a Whisper-like audio tower beside the ViT.
    "qwen3_omni_moe_thinker": Row(
        image_tokens=(4, 12),
        sizes=Sizes(num_layers=2, patch_size=8, image_size="image_grid_thw", **SIGLIP),
        stream=packed(16, 48),
        projected=flat((1, 4), (1, 12)),
        projector_reads=Reads("layer_output", block=-1, unbatched=True),
        pattern_unavailable=QWEN_PER_IMAGE,
        deepstack_taps=1,
        vision_unavailable=NO_WINDOWS,
        text_gaps={"deepstack_output": (1,), "mlp.router_logits": (1,)},
        rules=(scatter("qwen3_omni_moe"), "qwen3_omni_moe.vision-attention", "qwen3_omni_moe.audio-attention",
               "qwen3_omni_moe.deepstack", *attention("qwen3_omni_moe", "Qwen3OmniMoeThinkerTextAttention"),
               router("qwen3_omni_moe", "Qwen3OmniMoeThinkerTextTopKRouter")),
    ),
    # envoys/tiny/cosmos3_omni.py: the tiny Qwen3-VL under Cosmos3-Omni's host: 3 blocks, patch 8; DeepStack taps
    # after text blocks 0 and 1 of 4.
    "cosmos3_omni": Row(
        image_tokens=(4, 12),
        sizes=Sizes(num_layers=3, patch_size=8, image_size="image_grid_thw", **SIGLIP),
        stream=packed(16, 48),
        projected=flat((1, 4), (1, 12)),
        projector_reads=Reads("layer_output", block=-1, unbatched=True),
        pattern_unavailable=QWEN_PER_IMAGE,
        deepstack_taps=2,
        vision_unavailable=NO_WINDOWS,
        text_gaps={"deepstack_output": (2, 3)},
        rules=(scatter("cosmos3_omni"), "qwen3_vl.vision-attention", "qwen3_vl.deepstack",
               *attention("qwen3_vl", "Qwen3VLTextAttention")),
    ),
    # envoys/tiny/cohere_compass.py: qwen3_vl's tower with 2 blocks, patch 8; DeepStack taps block 0, added after text
    # block 0 of 2 (parallel Cohere 2-style blocks).
    "cohere_compass": Row(
        image_tokens=(4, 12),
        sizes=Sizes(num_layers=2, patch_size=8, image_size="image_grid_thw", **SIGLIP),
        stream=packed(16, 48),
        projected=flat((1, 4), (1, 12)),
        projector_reads=Reads("layer_output", block=-1, unbatched=True),
        pattern_unavailable=QWEN_PER_IMAGE,
        deepstack_taps=1,
        vision_unavailable=NO_WINDOWS,
        text_gaps={"deepstack_output": (1,)},
        rules=(scatter("cohere_compass"), "cohere_compass.vision-attention", "cohere_compass.deepstack",
               *attention("cohere_compass", "CohereCompassAttention")),
    ),
    # envoys/tiny/muse_glimmer.py: 2 blocks, width 32, 2 heads, patch 8, merged 2x2: a 32x32 image is 16 patches and
    # 4 tokens, 64 wide x 48 high 48 and 12; block 0 in windows of 4x4 patches, block 1 per image; ln_post after the
    # window order is undone, then a pixel shuffle (128 wide rows) and the adapter (48 wide), a projection and a norm.
    "muse_glimmer": Row(
        image_tokens=(4, 12),
        sizes=Sizes(num_layers=2, patch_size=8, image_size="image_grid_thw", **SIGLIP),
        stream=packed(16, 48),
        projected=flat((1, 4), (1, 12)),
        projector_reads=None,
        final_norm=True,
        restores_window_order=True,
        features_are_projected=False,
        pattern_unavailable=MUSE_PER_IMAGE,
        rules=(scatter("muse_glimmer"), "muse_glimmer.vision-windows", "muse_glimmer.vision-attention",
               *attention("muse_glimmer", "MuseGlimmerTextAttention")),
    ),
    # envoys/tiny/ovis2_5.py: 2 blocks, width 32, 2 heads, patch 8, merged 2x2: a 32x32 image is 16 patches and 4
    # tokens (one window), 64 wide x 48 high 48 and 12 (3x4 merge units, four windows of up to 2x2); block 0 in windows,
    # block 1 per image; post_layernorm after the window order is undone (one window_index entry a merge unit); the
    # projector reads the last block's output as it is (window order), its output is image_features; Qwen3 text blocks.
    "ovis2_5": Row(
        image_tokens=(4, 12),
        sizes=Sizes(num_layers=2, patch_size=8, image_size="image_grid_thw", **SIGLIP),
        stream=packed(16, 48),
        projected=flat((1, 4), (1, 12)),
        projector_reads=Reads("layer_output", block=-1, unbatched=True),
        final_norm=True,
        restores_window_order=True,
        window_unit=4,
        pattern_unavailable=OVIS2_5_PER_IMAGE,
        rules=(scatter("ovis2_5"), "ovis2_5.merge-visual-features", "ovis2_5.vision-windows",
               "ovis2_5.vision-attention", *attention("qwen3", "Qwen3Attention")),
    ),
    # envoys/tiny/qwen.py: Qwen3-VL's tower without DeepStack, 2 blocks, patch 8; text blocks linear, linear, linear,
    # full attention.
    "qwen3_5": Row(
        image_tokens=(4, 12),
        sizes=Sizes(num_layers=2, patch_size=8, image_size="image_grid_thw", **SIGLIP),
        stream=packed(16, 48),
        projected=flat((1, 4), (1, 12)),
        projector_reads=Reads("layer_output", block=-1, unbatched=True),
        pattern_unavailable=QWEN_PER_IMAGE,
        vision_unavailable=NO_WINDOWS,
        text_gaps={"attention_output": (0, 1, 2), "self_attn.": (0, 1, 2), "linear_attn.": (3,)},
        rules=(scatter("qwen3_5"), "qwen3_5.vision-attention", "qwen3_5.gated-deltanet",
               *attention("qwen3_5", "Qwen3_5Attention")),
    ),
    # envoys/tiny/qwen3_5_moe.py: Qwen3.5's tower (no DeepStack), 2 blocks, patch 8; text blocks linear, full attention,
    # each a mixture of 4 experts and a shared expert (none dense).
    "qwen3_5_moe": Row(
        image_tokens=(4, 12),
        sizes=Sizes(num_layers=2, patch_size=8, image_size="image_grid_thw", **SIGLIP),
        stream=packed(16, 48),
        projected=flat((1, 4), (1, 12)),
        projector_reads=Reads("layer_output", block=-1, unbatched=True),
        pattern_unavailable=QWEN_PER_IMAGE,
        vision_unavailable=NO_WINDOWS,
        text_gaps={"attention_output": (0,), "self_attn.": (0,), "linear_attn.": (1,)},
        rules=(scatter("qwen3_5_moe"), "qwen3_5_moe.vision-attention", "qwen3_5_moe.gated-deltanet",
               *attention("qwen3_5_moe", "Qwen3_5MoeAttention"), router("qwen3_5_moe", "Qwen3_5MoeTopKRouter")),
    ),
    # envoys/tiny/glm.py: the GLM ViT, packed, 8 px patches merged 2x2: 32x32 is 16 patches and 4 tokens, 48x64 is 48
    # and 12; a final norm (post_layernorm); a convolution folds each merge block before the merger (the projector),
    # so the projector does not read a tower value as it is (tests/test_glm.py says how); 2 blocks, width 32, 2 heads
    # of 16; GLM-4.1V's tower MLP is out_hidden_size (32) wide, GLM-OCR's intermediate_size (64).
    **{name: Row(
        image_tokens=(4, 12),
        sizes=Sizes(num_layers=2, vision_hidden_size=32, num_heads=2, head_dim=16, intermediate_size=width, patch_size=8,
                    image_size="image_grid_thw"),
        stream=packed(16, 48),
        projected=flat((1, 4), (1, 12)),
        projector_reads=None,
        final_norm=True,
        pattern_unavailable=GLM_PER_IMAGE,
        vision_unavailable=NO_WINDOWS,
        rules=(scatter(host), f"{tower}.vision-attention", *attention(name if name == "glm_ocr" else "glm4v", text)),
    ) for name, host, tower, text, width in (
        ("glm4v", "glm4v", "glm4v", "Glm4vTextAttention", 32),
        ("glm46v", "glm46v", "glm4v", "Glm4vTextAttention", 32),
        ("glmga", "glm46v", "glm4v", "Glm4vTextAttention", 32),
        ("glm_ocr", "glm_ocr", "glm_ocr", "GlmOcrTextAttention", 64),
    )},
    # envoys/tiny/hyperclovax_vision_v2.py: the tiny Qwen2.5-VL tower (patch 4: 32x32 is 64 patches and 16 tokens, 48x64
    # is 192 and 48, windowed block 0, full block 1), its merger inside it; the projector, a linear after the tower,
    # reads the merger's output restored to merge-block order (test_hyperclovax_vision_v2.py); the text model
    # multiplies the embeddings by 10 (embedding_multiplier).
    "hyperclovax_vision_v2": Row(
        image_tokens=(16, 48),
        sizes=Sizes(num_layers=2, patch_size=4, image_size="image_grid_thw", **SIGLIP),
        stream=packed(64, 192),
        projected=flat((1, 16), (1, 48)),
        projector_reads=None,
        pattern_unavailable=QWEN_PER_IMAGE,
        embedding_multiplier=10.0,
        rules=(scatter("hyperclovax_vision_v2"), "qwen2_5_vl.vision-attention", "qwen2_5_vl.vision-windows",
               *attention("hyperclovax", "HyperCLOVAXAttention")),
    ),
    # envoys/tiny/kimi_k25.py: MoonViT, packed, 4 px patches in raster order merged 2x2: 32x32 is 64 patches and 16
    # tokens, 48x64 is 192 and 48; a final norm (final_layernorm); the tower gathers each merge block of tower_output
    # before the projector (tests/test_kimi_k25.py says how), whose output is [tokens, 1, hidden]; 2 blocks, width 32,
    # 2 heads of 16, MLP 64. DeepSeek-V3 text: block 0 dense (no router), block 1 a mixture of experts.
    "kimi_k25": Row(
        image_tokens=(16, 48),
        sizes=Sizes(num_layers=2, patch_size=4, image_size="image_grid_thw", **SIGLIP),
        stream=packed(64, 192),
        projected=batched((16, 1), (48, 1)),
        projector_reads=None,
        final_norm=True,
        pattern_unavailable=KIMI_PER_IMAGE,
        vision_unavailable=NO_WINDOWS,
        text_gaps={"mlp.router_logits": (0,)},
        rules=(scatter("kimi_k25"), "kimi_k25.vision-attention", *attention("deepseek_v3", "DeepseekV3Attention"),
               router("deepseek_v3", "DeepseekV3TopkRouter")),
    ),
    # envoys/tiny/dots3_note.py: packed, 8 px patches (one frame deep) in merge-block order, merged 2x2: 32x32 is 16
    # patches and 4 tokens, 48x64 is 48 and 12; 2 blocks, width 32, 2 heads of 16, the dense MLP 64 wide (block 1 a
    # mixture of experts); a final norm (norm) that the merger (the projector, inside the tower) reads. Text: block 0
    # dense (no router), block 1 a mixture of experts.
    "dots3_note": Row(
        image_tokens=(4, 12),
        sizes=Sizes(num_layers=2, patch_size=8, image_size="image_grid_thw", **SIGLIP),
        stream=packed(16, 48),
        projected=flat((1, 4), (1, 12)),
        projector_reads=Reads("tower_output", unbatched=True),
        final_norm=True,
        pattern_unavailable=DOTS_PER_IMAGE,
        vision_unavailable=NO_WINDOWS,
        text_gaps={"mlp.router_logits": (0,)},
        rules=(scatter("dots3_note"), "dots3_note.vision-attention", *attention("dots3_note", "Dots3NoteTextAttention"),
               router("dots3_note", "Dots3NoteTextTopkRouter"), router("dots3_note", "Dots3NoteVisionTopKRouter"),
               "dots3_note.Dots3NoteAudioAttention"),
    ),
    # envoys/tiny/hunyuan_vl.py: packed, 4 px patches in raster order, no final norm: 32x32 is 64 patches, 48x64 192;
    # the merger (the projector) runs once per image on its rows of the last block's stream, giving h/2 x (w/2 + 1) + 2
    # tokens (a newline column, begin and end rows): 22 and 56; 2 blocks, width 32, 2 heads of 16, MLP 64.
    "hunyuan_vl": Row(
        image_tokens=(22, 56),
        sizes=Sizes(num_layers=2, patch_size=4, image_size="image_grid_thw", **SIGLIP),
        stream=packed(64, 192),
        projected=packed(22, 56),
        projector_reads=Reads("layer_output", block=-1),
        projector_per_image=True,
        pattern_unavailable=HUNYUAN_PER_IMAGE,
        vision_unavailable=NO_WINDOWS,
        rules=(scatter("hunyuan_vl"), "hunyuan_vl.vision-attention",
               *attention("hunyuan_vl", "HunYuanVLDenseV1Attention")),
    ),
    # envoys/tiny/minicpm.py: a packed SigLIP-NaViT tower, 4 px patches, 2 blocks, width 32, 2 heads of 16, MLP 64; the
    # processor makes a 32x32 image one 32x32 unit, a 64x48 one a 32x32 source and 2x2 slices of 32x32 (5 units); 16x:
    # 64 patches a unit, the vit_merger folds them to 16 rows after block 0, the merger (the projector, outside the
    # tower, a list of one tensor per unit) to 4 tokens; post_layernorm is tower_output, what the merger reads.
    # Qwen3.5 text: blocks linear, linear, linear, full attention.
    **{name: Row(
        image_tokens=(4, 20),
        sizes=Sizes(num_layers=2, patch_size=4, image_size="target_sizes", **SIGLIP),
        stream=packed(64, 320),
        merged_after=(0, packed(16, 80)),
        projected=flat((1, 4), (5, 4)),
        projector_reads=Reads("tower_output"),
        projector_list=True,
        final_norm=True,
        pattern_unavailable=MINICPM_PER_IMAGE,
        text_gaps={"attention_output": (0, 1, 2), "self_attn.": (0, 1, 2), "linear_attn.": (3,)},
        rules=(scatter(name), f"{name}.vision-attention", "qwen3_5.gated-deltanet", *attention("qwen3_5", "Qwen3_5Attention")),
    ) for name in ("minicpmv4_6", "minicpmv4_7")},
    # envoys/tiny/minicpm.py, build_minicpm_ocr: the same tower downsampling 4x (no vit_merger): a 32x32 image is one
    # unit of 64 patches and 16 tokens; a 64x48 one a 24x32 source and 2x2 slices of 24x32 (5 units of 48 patches, 12
    # tokens each).
    "minicpm_ocr": Row(
        image_tokens=(16, 60),
        sizes=Sizes(num_layers=2, patch_size=4, image_size="target_sizes", **SIGLIP),
        stream=packed(64, 240),
        projected=flat((1, 16), (5, 12)),
        projector_reads=Reads("tower_output"),
        projector_list=True,
        final_norm=True,
        pattern_unavailable=MINICPM_PER_IMAGE,
        text_gaps={"attention_output": (0, 1, 2), "self_attn.": (0, 1, 2), "linear_attn.": (3,)},
        rules=(scatter("minicpm_ocr"), "minicpm_ocr.vision-attention", "qwen3_5.gated-deltanet",
               *attention("qwen3_5", "Qwen3_5Attention")),
    ),
    # envoys/tiny/blip_2.py: the BLIP ViT on 32x32 images (any input resized) of 8 px patches, CLS first (1 + 16 rows),
    # 2 blocks, post_layernorm over every row; 4 Q-Former queries, 4 image tokens an image, one image a prompt (two
    # images are two prompts); the projector (the language projection) reads the Q-Former's output
    # (tests/test_blip_2_instructblip.py). OPT text: learned positions added before block 0, the MLP inline (no mlp_output).
    "blip-2": Row(
        image_tokens=(4, 4),
        sizes=Sizes(num_layers=2, patch_size=8, image_size=32, **SIGLIP),
        stream=batched((1, 17), (1, 17)),
        projected=batched((1, 4), (1, 4)),
        projector_reads=None,
        prefix=1,
        final_norm=True,
        text_gaps={"mlp_output": (0, 1)},
        positions="language_model.model.decoder.embed_positions",
        text_alone=False,
        rules=(scatter("blip_2"), *attention("blip_2", "Blip2Attention"), "blip_2.Blip2QFormerMultiHeadAttention",
               *attention("opt", "OPTAttention")),
    ),
    # envoys/tiny/blip_2.py, build_instructblip: blip-2's tower, Q-Former sizes and processor (4 image tokens an image,
    # one image a prompt); the Q-Former also reads the prompt; a Llama text model.
    "instructblip": Row(
        image_tokens=(4, 4),
        sizes=Sizes(num_layers=2, patch_size=8, image_size=32, **SIGLIP),
        stream=batched((1, 17), (1, 17)),
        projected=batched((1, 4), (1, 4)),
        projector_reads=None,
        prefix=1,
        final_norm=True,
        text_alone=False,
        rules=(scatter("instructblip"), *attention("instructblip", "InstructBlipAttention"),
               "instructblip.InstructBlipQFormerMultiHeadAttention", *LLAMA_ATTENTION),
    ),
    # envoys/tiny/glm4v_moe.py: GLM-4.1V's tower as envoys/tiny/glm.py builds it (the rows above: packed, 16 and 48
    # patches, 4 and 12 tokens, a final norm, the convolution before the projector, its MLP out_hidden_size (32) wide);
    # text block 0 dense (first_k_dense_replace 1), block 1 a mixture of 4 experts and a shared expert.
    "glm4v_moe": Row(
        image_tokens=(4, 12),
        sizes=Sizes(num_layers=2, vision_hidden_size=32, num_heads=2, head_dim=16, intermediate_size=32, patch_size=8,
                    image_size="image_grid_thw"),
        stream=packed(16, 48),
        projected=flat((1, 4), (1, 12)),
        projector_reads=None,
        final_norm=True,
        pattern_unavailable=GLM_PER_IMAGE,
        vision_unavailable=NO_WINDOWS,
        text_gaps={"mlp.router_logits": (0,)},
        rules=(scatter("glm4v_moe"), "glm4v_moe.vision-attention", *attention("glm4v_moe", "Glm4vMoeTextAttention"),
               router("glm4v_moe", "Glm4vMoeTextTopkRouter")),
    ),
    # envoys/tiny/exaone4_5.py: Qwen2.5-VL's windowed tower (patch 4, 16 px windows, block 1 full attention, 2 query
    # heads and 1 key-value head): 32x32 is 64 patches and 16 tokens, 48x64 is 192 and 48; blocks and merger in window
    # order, restored after the merger; EXAONE 4.0 text blocks, normed after each sublayer (sliding, then global).
    "exaone4_5": Row(
        image_tokens=(16, 48),
        sizes=Sizes(num_layers=2, patch_size=4, image_size="image_grid_thw", **SIGLIP),
        stream=packed(64, 192),
        projected=flat((1, 16), (1, 48)),
        projector_reads=Reads("layer_output", block=-1, unbatched=True),
        pattern_unavailable=QWEN_PER_IMAGE,
        features_are_projected=False,
        rules=(scatter("exaone4_5"), "exaone4_5.vision-attention", "exaone4_5.vision-windows",
               *attention("exaone4", "Exaone4Attention")),
    ),
    # envoys/tiny/paddleocr_vl.py: a packed SigLIP-shaped tower of 8 px patches, 2 blocks, post_layernorm; the
    # projector (outside the tower) reads the tower's output and folds 2x2 patches: 32x32 is 16 patches and 4 tokens,
    # 48x64 is 48 and 12.
    "paddleocr_vl": Row(
        image_tokens=(4, 12),
        sizes=Sizes(num_layers=2, patch_size=8, image_size="image_grid_thw", **SIGLIP),
        stream=packed(16, 48),
        projected=flat((1, 4), (1, 12)),
        projector_reads=Reads("tower_output", unbatched=True),
        final_norm=True,
        pattern_unavailable=PACKED_SIGLIP_PER_IMAGE,
        rules=(scatter("paddleocr_vl"), "paddleocr_vl.vision-attention", *attention("paddleocr_vl", "PaddleOCRAttention")),
    ),
    # envoys/tiny/video_llama_3.py: a packed SigLIP-shaped tower of 8 px patches, 2 blocks, post_layernorm; images at
    # merge_size 1, so every patch is one token: 32x32 is 16 patches and 16 tokens, 48x64 is 48 and 48; the tower
    # resamples each image's grid by 1 / merge_size after its norm, here to itself, so the projector reads
    # tower_output as it is (tests/test_paddleocr_vl_video_llama_3.py).
    "video_llama_3": Row(
        image_tokens=(16, 48),
        sizes=Sizes(num_layers=2, patch_size=8, image_size="image_grid_thw", **SIGLIP),
        stream=packed(16, 48),
        projected=flat((1, 16), (1, 48)),
        projector_reads=Reads("tower_output", unbatched=True),
        final_norm=True,
        pattern_unavailable=PACKED_SIGLIP_PER_IMAGE,
        rules=(scatter("video_llama_3"), "video_llama_3.vision-attention", *attention("qwen2", "Qwen2Attention")),
    ),
    # envoys/tiny/ernie4_5_vl_moe.py: a packed ViT of 8 px patches in merge-block order, 2 blocks, a final LayerNorm
    # (ln); the resampler (outside the tower) reads tower_output and folds 2x2 patches: 32x32 is 16 patches and 4
    # tokens, 48x64 is 48 and 12. Text block 0 dense, block 1 a modality-split mixture of experts.
    "ernie4_5_vl_moe": Row(
        image_tokens=(4, 12),
        sizes=Sizes(num_layers=2, patch_size=8, image_size="image_grid_thw", **SIGLIP),
        stream=packed(16, 48),
        projected=flat((1, 4), (1, 12)),
        projector_reads=Reads("tower_output", unbatched=True),
        final_norm=True,
        pattern_unavailable=r"the ERNIE-4.5-VL ViT's attention makes one interface call per image \(attention_interface_2.*cu_seqlens",
        vision_unavailable=NO_WINDOWS,
        text_gaps={"mlp.router_logits": (0,)},
        rules=(scatter("ernie4_5_vl_moe"), "ernie4_5_vl_moe.vision-attention",
               *attention("ernie4_5_vl_moe", "Ernie4_5_VLMoeTextAttention"), router("ernie4_5_vl_moe", "Ernie4_5_VLMoeMoeTopKRouter")),
    ),
    # envoys/tiny/got_ocr2.py: a SAM-style encoder on 128x128 images (any input resized) of 2 px patches, a 64x64 grid
    # (4096 patches); both blocks in 14x14 windows, the grid padded to 70x70: 25 windows of 196 an image; no final
    # norm; the neck then the projector's two stride-2 convolutions fold the grid to 16x16 = 256 image tokens (the
    # projector reads the neck's output: tests/test_got_ocr2.py).
    "got_ocr2": Row(
        image_tokens=(256, 256),
        sizes=Sizes(num_layers=2, patch_size=2, image_size=128, **SIGLIP),
        stream=batched((1, 4096), (1, 4096)),
        projected=batched((1, 256), (1, 256)),
        projector_reads=None,
        pattern_rows={0: (50, 196), 1: (50, 196)},
        rules=(scatter("got_ocr2"), "got_ocr2.vision-attention", "got_ocr2.vision-windows",
               *attention("qwen2", "Qwen2Attention")),
    ),
    # envoys/tiny/pp_chart2table.py: GOT-OCR 2.0's classes on 64x64 images of 2 px patches, a 32x32 grid (1024
    # patches); block 0 in 14x14 windows (the grid padded to 42x42: 9 windows of 196 an image), block 1 global; 8x8 = 64
    # image tokens, written whole by the chat template.
    "pp_chart2table": Row(
        image_tokens=(64, 64),
        sizes=Sizes(num_layers=2, patch_size=2, image_size=64, **SIGLIP),
        stream=batched((1, 1024), (1, 1024)),
        projected=batched((1, 64), (1, 64)),
        projector_reads=None,
        pattern_rows={0: (18, 196)},
        rules=(scatter("got_ocr2"), "got_ocr2.vision-attention", "got_ocr2.vision-windows",
               *attention("qwen2", "Qwen2Attention")),
    ),
}
