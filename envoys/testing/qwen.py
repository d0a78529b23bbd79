"""Tiny Qwen-VL checkpoints: Qwen2-VL, Qwen2.5-VL, Qwen3-VL and Qwen3.5.

Each builder returns a randomly initialised float32 model and the family's
stock processor (its stock image processor and video processor) with small
pixel bounds. All text models are 32 wide with 2 query heads and 1 key-value
head; all towers are 32 wide with 2 heads and merge 2x2 patches into one
image token (``spatial_merge_size=2``), so an image of ``h x w`` pixels (both
multiples of ``2 * patch``) gives ``(h / patch) * (w / patch)`` patches and a
quarter as many image tokens.

Pixel bounds: ``min_pixels = 4 * f**2`` and ``max_pixels = 64 * f**2`` with
``f = 2 * patch``, so an image becomes 4 to 64 image tokens. Images are
resized to multiples of ``f`` (``smart_resize``). The video processors use
the same patch and merge sizes, ``temporal_patch_size`` 2, and the per-frame
pixel cap of the reference implementation (``cap_pixels_per_frame=True``).
"""

from __future__ import annotations

from transformers import (
    PreTrainedModel,
    ProcessorMixin,
    Qwen2_5_VLConfig,
    Qwen2_5_VLForConditionalGeneration,
    Qwen2_5_VLProcessor,
    Qwen2VLConfig,
    Qwen2VLForConditionalGeneration,
    Qwen2VLImageProcessor,
    Qwen2VLProcessor,
    Qwen2VLVideoProcessor,
    Qwen3VLConfig,
    Qwen3VLForConditionalGeneration,
    Qwen3VLProcessor,
    Qwen3VLVideoProcessor,
)

from .contract import (
    NO_WINDOWS,
    PER_IMAGE_PATTERN,
    QWEN_VIT_BLOCK,
    SIGLIP,
    Loads,
    Reads,
    Row,
    Sizes,
    VideoRow,
    attention,
    blocks,
    flat,
    packed,
    scatter,
    text_model,
)
from .rope import rope
from .sizes import text_sizes
from .tokenizer import TokenizersBackend, as_the_processor_takes, byte_level_tokenizer, word_level_tokenizer

MERGE = 2
OPENAI_CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
OPENAI_CLIP_STD = [0.26862954, 0.26130258, 0.27577711]
HALF = [0.5, 0.5, 0.5]

#: ChatML with Qwen-VL's vision markers; no default system prompt.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for item in message['content'] %}"
    "{% if item['type'] == 'image' %}{{ '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{% elif item['type'] == 'video' %}{{ '<|vision_start|><|video_pad|><|vision_end|>' }}"
    "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
_NAMED = {
    "image_token": "<|image_pad|>",
    "video_token": "<|video_pad|>",
    "vision_start_token": "<|vision_start|>",
    "vision_end_token": "<|vision_end|>",
}


def _tokenizer(byte_level: bool = False, **settings: object) -> TokenizersBackend:
    build = byte_level_tokenizer if byte_level else word_level_tokenizer
    return as_the_processor_takes(build(
        **settings,
        special_tokens=_SPECIAL,
        named_tokens=_NAMED,
        chat_template=CHAT_TEMPLATE,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
    ), Qwen2VLProcessor)


def _token_ids(tokenizer: TokenizersBackend) -> dict[str, int]:
    """The top-level config's token ids, read off the tokenizer."""
    return {
        "image_token_id": tokenizer.convert_tokens_to_ids(_NAMED["image_token"]),
        "video_token_id": tokenizer.convert_tokens_to_ids(_NAMED["video_token"]),
        "vision_start_token_id": tokenizer.convert_tokens_to_ids(_NAMED["vision_start_token"]),
        "vision_end_token_id": tokenizer.convert_tokens_to_ids(_NAMED["vision_end_token"]),
    }


def _text(tokenizer: TokenizersBackend, **overrides: object) -> dict[str, object]:
    """Text config fields shared by the four families: `text_sizes` with 1024 positions, ``<|endoftext|>`` as BOS."""
    return text_sizes(
        tokenizer,
        max_position_embeddings=1024,
        bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        **overrides,
    )


def _pixels(patch: int) -> dict[str, int]:
    factor = patch * MERGE
    return {"min_pixels": 4 * factor**2, "max_pixels": 64 * factor**2}


def _image_processor(patch: int, mean: list[float], std: list[float], temporal: int = 2) -> Qwen2VLImageProcessor:
    return Qwen2VLImageProcessor(
        patch_size=patch,
        merge_size=MERGE,
        temporal_patch_size=temporal,
        image_mean=mean,
        image_std=std,
        **_pixels(patch),
    )


def _video_size(patch: int) -> dict[str, int]:
    """Video pixel bounds over all frames: from the image ``min_pixels`` to 4 x its ``max_pixels``."""
    pixels = _pixels(patch)
    return {"shortest_edge": pixels["min_pixels"], "longest_edge": 4 * pixels["max_pixels"]}


def _video_processor(cls: type, patch: int, mean: list[float], std: list[float], temporal: int = 2) -> object:
    """The family's stock video processor, on the same patch grid as its image processor (``temporal`` frames a
    temporal patch)."""
    return cls(
        patch_size=patch,
        merge_size=MERGE,
        temporal_patch_size=temporal,
        image_mean=mean,
        image_std=std,
        size=_video_size(patch),
        cap_pixels_per_frame=True,
    )


def build_qwen2_vl() -> tuple[PreTrainedModel, ProcessorMixin]:
    """Imitates Qwen/Qwen2-VL-2B-Instruct.

    Tower: 2 blocks, ``embed_dim`` 32, 2 heads, MLP ratio 4, quick-GELU, patch
    8 (``temporal_patch_size`` 2), merger to the text width 32. Text: 2 layers,
    width 32, head_dim 16, M-RoPE sections [2, 3, 3] (sum 8 = head_dim / 2),
    tied embeddings. 32x32 image: 16 patches, 4 tokens; 48x64: 48 patches,
    12 tokens.
    """
    patch = 8
    tokenizer = _tokenizer()
    config = Qwen2VLConfig(
        text_config=_text(
            tokenizer,
            **rope(1_000_000.0, mrope_section=[2, 3, 3]),
            tie_word_embeddings=True,
        ),
        vision_config={
            "depth": 2,
            "embed_dim": 32,
            "hidden_size": 32,
            "num_heads": 2,
            "mlp_ratio": 4,
            "hidden_act": "quick_gelu",
            "patch_size": patch,
            "spatial_merge_size": MERGE,
            "temporal_patch_size": 2,
        },
        tie_word_embeddings=True,
        **_token_ids(tokenizer),
    )
    processor = Qwen2VLProcessor(
        image_processor=_image_processor(patch, OPENAI_CLIP_MEAN, OPENAI_CLIP_STD),
        tokenizer=tokenizer,
        video_processor=_video_processor(Qwen2VLVideoProcessor, patch, OPENAI_CLIP_MEAN, OPENAI_CLIP_STD),
        chat_template=CHAT_TEMPLATE,
    )
    return Qwen2VLForConditionalGeneration(config), processor


def build_qwen2_5_vl() -> tuple[PreTrainedModel, ProcessorMixin]:
    """Imitates Qwen/Qwen2.5-VL-3B-Instruct.

    Tower: 2 blocks, width 32, 2 heads, SiLU MLP 64 wide, patch 4, merger to
    the text width 32. ``window_size`` 16 px = 2x2 merge units = 4x4 patches,
    block 0 windowed and block 1 full attention (``fullatt_block_indexes``
    [1], as the real model's every eighth block), so every image of 32 px or
    more has several windows: 32x32 is 64 patches in 4 windows, 16 tokens;
    48x64 is 192 patches in 12 windows, 48 tokens. Text: 2 layers, width 32,
    head_dim 16, M-RoPE sections [2, 3, 3], tied embeddings.
    """
    patch = QWEN2_5_VL_PATCH
    tokenizer = _tokenizer()
    config = Qwen2_5_VLConfig(
        text_config=_text(
            tokenizer,
            **rope(1_000_000.0, mrope_section=[2, 3, 3]),
            tie_word_embeddings=True,
        ),
        vision_config=qwen2_5_vl_vision(),
        tie_word_embeddings=True,
        **_token_ids(tokenizer),
    )
    processor = Qwen2_5_VLProcessor(
        image_processor=_image_processor(patch, OPENAI_CLIP_MEAN, OPENAI_CLIP_STD),
        tokenizer=tokenizer,
        video_processor=_video_processor(Qwen2VLVideoProcessor, patch, OPENAI_CLIP_MEAN, OPENAI_CLIP_STD),
        chat_template=CHAT_TEMPLATE,
    )
    return Qwen2_5_VLForConditionalGeneration(config), processor


#: Qwen2.5-VL's tiny patch side, in pixels.
QWEN2_5_VL_PATCH = 4


def qwen2_5_vl_vision(**extra: object) -> dict[str, object]:
    """The tiny Qwen2.5-VL tower's fields (`build_qwen2_5_vl`): 2 blocks, block 0 windowed, block 1 full attention."""
    return {
        "depth": 2,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_heads": 2,
        "hidden_act": "silu",
        "patch_size": QWEN2_5_VL_PATCH,
        "spatial_merge_size": MERGE,
        "temporal_patch_size": 2,
        "window_size": 16,
        "fullatt_block_indexes": [1],
        "out_hidden_size": 32,
        "tokens_per_second": 2,
        **extra,
    }


def _qwen3_vision(patch: int, **extra: object) -> dict[str, object]:
    """Qwen3-VL / Qwen3.5 tower fields: learned position embeddings on a 4x4 grid (16, a square)."""
    return {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_heads": 2,
        "hidden_act": "gelu_pytorch_tanh",
        "patch_size": patch,
        "spatial_merge_size": MERGE,
        "temporal_patch_size": 2,
        "out_hidden_size": 32,
        "num_position_embeddings": 16,
        **extra,
    }


def _qwen3_processor(patch: int, tokenizer: TokenizersBackend) -> Qwen3VLProcessor:
    return Qwen3VLProcessor(
        image_processor=_image_processor(patch, HALF, HALF),
        tokenizer=tokenizer,
        video_processor=_video_processor(Qwen3VLVideoProcessor, patch, HALF, HALF),
        chat_template=CHAT_TEMPLATE,
    )


def build_qwen3_vl() -> tuple[PreTrainedModel, ProcessorMixin]:
    """Imitates Qwen/Qwen3-VL-2B-Instruct.

    Tower: 3 blocks, width 32, 2 heads, patch 8, 16 learned position
    embeddings (4x4, interpolated to the image's grid), DeepStack taps after
    blocks 0 and 1 (``deepstack_visual_indexes`` [0, 1]; block 2 is past the
    taps). Text: 4 layers (the two taps are added after layers 0 and 1, layers
    2 and 3 follow), width 32, head_dim 16, interleaved M-RoPE sections
    [4, 2, 2], tied embeddings. 32x32 image: 16 patches, 4 tokens; 48x64: 48
    patches, 12 tokens.
    """
    tokenizer = _tokenizer()
    config = Qwen3VLConfig(**qwen3_vl_settings(tokenizer))
    return Qwen3VLForConditionalGeneration(config), _qwen3_processor(QWEN3_VL_PATCH, tokenizer)


#: Qwen3-VL's tiny patch side, in pixels.
QWEN3_VL_PATCH = 8


def qwen3_vl_settings(tokenizer: TokenizersBackend) -> dict[str, object]:
    """The tiny Qwen3-VL config's fields (`build_qwen3_vl`), for a config class of Qwen3-VL's fields."""
    return {
        "text_config": _text(
            tokenizer,
            num_hidden_layers=4,
            head_dim=16,
            **rope(5_000_000.0, mrope_section=[4, 2, 2], mrope_interleaved=True),
            tie_word_embeddings=True,
        ),
        "vision_config": _qwen3_vision(QWEN3_VL_PATCH, depth=3, deepstack_visual_indexes=[0, 1]),
        "tie_word_embeddings": True,
        **_token_ids(tokenizer),
    }


def build_qwen3_5() -> tuple[PreTrainedModel, ProcessorMixin]:
    """Imitates the Qwen3.5 checkpoints (e.g. Qwen/Qwen3.5-27B): a gated-DeltaNet hybrid.

    Tower: Qwen3-VL's without DeepStack, 2 blocks, width 32, 2 heads, patch 8,
    16 position embeddings. Text: 4 layers, ``layer_types`` linear, linear,
    linear, full (the real 3:1 pattern); full attention with 2 query heads
    (output-gated) / 1 key-value head, head_dim 32 with partial rotary factor
    0.25 (8 rotary dims, interleaved M-RoPE sections [2, 1, 1]); linear
    attention with 2 key heads / 4 value heads of dim 16, conv kernel 4.
    Tokenizer: a byte-level BPE (see :func:`.tokenizer.byte_level_tokenizer`).
    32x32 image: 16 patches, 4 tokens; 48x64: 48 patches, 12 tokens.
    """
    patch = 8
    tokenizer = _tokenizer(byte_level=True)
    # Imported here: Qwen3.5 came in transformers 5.2, and the other Qwen builders work before it.
    from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

    config = Qwen3_5Config(
        text_config=_text(
            tokenizer,
            num_hidden_layers=4,
            head_dim=32,
            layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"],
            linear_conv_kernel_dim=4,
            linear_key_head_dim=16,
            linear_value_head_dim=16,
            linear_num_key_heads=2,
            linear_num_value_heads=4,
            **rope(10_000_000.0, partial_rotary_factor=0.25, mrope_section=[2, 1, 1], mrope_interleaved=True),
        ),
        vision_config=_qwen3_vision(patch, depth=2),
        **_token_ids(tokenizer),
    )
    return Qwen3_5ForConditionalGeneration(config), _qwen3_processor(patch, tokenizer)


#: The checkpoints this module builds, by name.
BUILDERS = {
    "qwen2_vl": build_qwen2_vl,
    "qwen2_5_vl": build_qwen2_5_vl,
    "qwen3_vl": build_qwen3_vl,
    "qwen3_5": build_qwen3_5,
}


#: Qwen3.5's text model, wherever it is the text model (its own checkpoints, MiniCPM-V's): the rules it runs (its gated
#: DeltaNet mixers', its softmax attention's), and the values its four blocks (linear, linear, linear, full) lack.
QWEN3_5_TEXT_RULES = ("qwen3_5.gated-deltanet", *attention("qwen3_5", "Qwen3_5Attention"))
QWEN3_5_TEXT_GAPS = {"attention_output": (0, 1, 2), "self_attn.": (0, 1, 2), "linear_attn.": (3,)}


#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builders' documented
#: configurations above, never off the code under test.
CONTRACTS = {
    # envoys/testing/qwen.py: the Qwen ViT, packed, 2x2 merge; patch 8: 32x32 is 16 patches and 4 tokens, 48x64 is 48
    # and 12; no final norm, the merger (the projector) reads the last block's stream; MLP 32 * mlp_ratio 4 wide.
    "qwen2_vl": Row(
        loads=Loads(("Qwen2VLForConditionalGeneration", "Qwen2VLProcessor", "TokenizersBackend")),
        image_tokens=(4, 12),
        sizes=Sizes(num_layers=2, vision_hidden_size=32, num_heads=2, head_dim=16, intermediate_size=128, patch_size=8,
                    image_size="image_grid_thw"),
        stream=packed(16, 48),
        projected=flat((1, 4), (1, 12)),
        projector_reads=Reads("layer_output", block=-1, unbatched=True),
        pattern=PER_IMAGE_PATTERN,
        vision_unavailable=NO_WINDOWS,
        rules=(scatter("qwen2_vl"), "qwen2_vl.vision-attention", *attention("qwen2_vl", "Qwen2VLAttention")),
        # envoys/testing/qwen.py: patch 8, temporal patch 2, merge 2x2: 4 frames are 2 temporal units of 4x4 patches
        # (32 patches, packed) and 2x2 tokens each (8).
        video=VideoRow(tokens=8, stream=(1, 32, 32), grid=(2, 2, 2)),
        native={
            "vision": "model.visual", "projector": "model.visual.merger",
            "vision.patch_embed": "model.visual.patch_embed",
            **blocks("vision.layers", "model.visual.blocks", {**QWEN_VIT_BLOCK, "mlp.up_proj": "mlp.fc1",
                "mlp.down_proj": "mlp.fc2"}),
            **text_model("model.language_model"),
        },
    ),
    # envoys/testing/qwen.py: patch 4: 32x32 is 64 patches and 16 tokens, 48x64 is 192 and 48; the blocks and the merger
    # run in window order, restored after the merger, so image_features is not the merger's output as it is.
    "qwen2_5_vl": Row(
        loads=Loads(("Qwen2_5_VLForConditionalGeneration", "Qwen2_5_VLProcessor", "TokenizersBackend")),
        image_tokens=(16, 48),
        sizes=Sizes(num_layers=2, patch_size=4, image_size="image_grid_thw", **SIGLIP),
        stream=packed(64, 192),
        projected=flat((1, 16), (1, 48)),
        projector_reads=Reads("layer_output", block=-1, unbatched=True),
        pattern=PER_IMAGE_PATTERN,
        features_are_projected=False,
        rules=(scatter("qwen2_5_vl"), "qwen2_5_vl.vision-attention", "qwen2_5_vl.vision-windows",
               *attention("qwen2_5_vl", "Qwen2_5_VLAttention")),
        # patch 4: 2 units of 8x8 patches (128) and 4x4 tokens (32).
        video=VideoRow(tokens=32, stream=(1, 128, 32), grid=(2, 4, 4)),
        native={
            "vision": "model.visual", "projector": "model.visual.merger",
            "vision.patch_embed": "model.visual.patch_embed",
            **blocks("vision.layers", "model.visual.blocks", {**QWEN_VIT_BLOCK, "mlp.up_proj": "mlp.up_proj",
                "mlp.down_proj": "mlp.down_proj"}),
            **text_model("model.language_model"),
        },
    ),
    # envoys/testing/qwen.py: 3 blocks, patch 8; DeepStack taps after text blocks 0 and 1 of 4.
    "qwen3_vl": Row(
        loads=Loads(("Qwen3VLForConditionalGeneration", "Qwen3VLProcessor", "TokenizersBackend")),
        image_tokens=(4, 12),
        sizes=Sizes(num_layers=3, patch_size=8, image_size="image_grid_thw", **SIGLIP),
        stream=packed(16, 48),
        projected=flat((1, 4), (1, 12)),
        projector_reads=Reads("layer_output", block=-1, unbatched=True),
        pattern=PER_IMAGE_PATTERN,
        deepstack_taps=2,
        vision_unavailable=NO_WINDOWS,
        text_gaps={"deepstack_output": (2, 3)},
        rules=(scatter("qwen3_vl"), "qwen3_vl.vision-attention", "qwen3_vl.deepstack",
               *attention("qwen3_vl", "Qwen3VLTextAttention")),
        video=VideoRow(tokens=8, stream=(1, 32, 32), grid=(2, 2, 2)),
        native={
            "vision": "model.visual", "projector": "model.visual.merger",
            "vision.patch_embed": "model.visual.patch_embed",
            **blocks("vision.layers", "model.visual.blocks", {**QWEN_VIT_BLOCK, "mlp.down_proj": "mlp.linear_fc2"}),
            **text_model("model.language_model"),
        },
    ),
    # envoys/testing/qwen.py: Qwen3-VL's tower without DeepStack, 2 blocks, patch 8; text blocks linear, linear, linear,
    # full attention.
    "qwen3_5": Row(
        loads=Loads(("Qwen3_5ForConditionalGeneration", "Qwen3VLProcessor", "Qwen3_5Tokenizer")),
        image_tokens=(4, 12),
        sizes=Sizes(num_layers=2, patch_size=8, image_size="image_grid_thw", **SIGLIP),
        stream=packed(16, 48),
        projected=flat((1, 4), (1, 12)),
        projector_reads=Reads("layer_output", block=-1, unbatched=True),
        pattern=PER_IMAGE_PATTERN,
        vision_unavailable=NO_WINDOWS,
        text_gaps=QWEN3_5_TEXT_GAPS,
        rules=(scatter("qwen3_5"), "qwen3_5.vision-attention", *QWEN3_5_TEXT_RULES),
        video=VideoRow(tokens=8, stream=(1, 32, 32), grid=(2, 2, 2)),
        native={
            "vision": "model.visual", "projector": "model.visual.merger",
            "vision.patch_embed": "model.visual.patch_embed",
            **blocks("vision.layers", "model.visual.blocks", {**QWEN_VIT_BLOCK, "mlp.down_proj": "mlp.linear_fc2"}),
            **text_model("model.language_model", {"mlp": "mlp", "input_layernorm": "input_layernorm",
                "post_attention_layernorm": "post_attention_layernorm"}),
            "layers.3.self_attn": "model.language_model.layers.3.self_attn",
            "layers.0.linear_attn": "model.language_model.layers.0.linear_attn",
            "layers.1.linear_attn": "model.language_model.layers.1.linear_attn",
            "layers.2.linear_attn": "model.language_model.layers.2.linear_attn",
        },
    ),
}
