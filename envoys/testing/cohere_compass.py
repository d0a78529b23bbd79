"""A tiny Cohere Compass checkpoint: Qwen3-VL's tower and DeepStack on a Cohere 2-style parallel text model.

The tower is Qwen3-VL's (`envoys.testing.qwen`'s ``_qwen3_vision``: width 32, 2
heads, patch 8, 16 learned position embeddings, merged 2x2), so a 32x32 image
is 16 patches and 4 image tokens, 48 high x 64 wide 48 patches and 12 tokens.
The processor is the stock ``CohereCompassProcessor`` with its stock image
processor (``CohereCompassImageProcessor``, Qwen2-VL's) and video processor
(``CohereCompassVideoProcessor``, Qwen3-VL's) on the Qwen builders' pixel
bounds, and a word-level tokenizer holding the tokens the processor writes
(``<|IMAGE_PAD|>``, ``<|VIDEO_PAD|>``, ``<|VISION_START|>``, ``<|VISION_END|>``)
and Cohere's turn tokens.
"""

from __future__ import annotations

from transformers import (
    CohereCompassConfig,
    CohereCompassForConditionalGeneration,
    CohereCompassImageProcessor,
    CohereCompassProcessor,
    CohereCompassVideoProcessor,
)

from .cohere import TURN_TOKENS, cohere_template
from .contract import (
    NO_WINDOWS,
    PER_IMAGE_PATTERN,
    QWEN_VIT_BLOCK,
    SIGLIP,
    TEXT_BLOCK,
    Loads,
    Reads,
    Row,
    Sizes,
    attention,
    blocks,
    flat,
    packed,
    scatter,
    text_model,
)
from .norms import randomise_norms
from .qwen import HALF, MERGE, _pixels, _qwen3_vision, _video_size
from .sizes import text_sizes
from .tokenizer import TokenizersBackend, word_level_tokenizer

PATCH = 8
#: The tokens ``CohereCompassProcessor`` writes, by the names it (and the config) gives them.
VISION_TOKENS = {
    "image_token": "<|IMAGE_PAD|>",
    "video_token": "<|VIDEO_PAD|>",
    "vision_start_token": "<|VISION_START|>",
    "vision_end_token": "<|VISION_END|>",
}
#: Each image in a prompt, as the chat template writes it (the processor expands the pad to one per image token).
IMAGE_PLACEHOLDER = "<|VISION_START|><|IMAGE_PAD|><|VISION_END|>"
#: The text blocks' kinds: block 0 sliding (rotary, M-RoPE), block 1 global (no position embedding).
LAYER_TYPES = ["sliding_attention", "full_attention"]
LOGIT_SCALE = 0.25


def _tokenizer() -> TokenizersBackend:
    return word_level_tokenizer(
        special_tokens=TURN_TOKENS,
        named_tokens=VISION_TOKENS,
        chat_template=cohere_template(IMAGE_PLACEHOLDER),
        bos_token="<BOS_TOKEN>",
        eos_token="<|END_OF_TURN_TOKEN|>",
        pad_token="<PAD>",
    )


def _processor(tokenizer: TokenizersBackend) -> CohereCompassProcessor:
    common = {"patch_size": PATCH, "merge_size": MERGE, "temporal_patch_size": 2, "image_mean": HALF, "image_std": HALF}
    return CohereCompassProcessor(
        image_processor=CohereCompassImageProcessor(**common, **_pixels(PATCH)),
        tokenizer=tokenizer,
        video_processor=CohereCompassVideoProcessor(**common, size=_video_size(PATCH), cap_pixels_per_frame=True),
        chat_template=cohere_template(IMAGE_PLACEHOLDER),
    )


def build_cohere_compass() -> tuple[CohereCompassForConditionalGeneration, CohereCompassProcessor]:
    """Imitates CohereLabs/North-Micro-Vision-Instruct.

    Tower: Qwen3-VL's, 2 blocks, width 32, 2 heads, patch 8, 16 learned
    position embeddings, DeepStack tapping block 0 (``deepstack_visual_indexes``
    [0]: its merged feature is added after text block 0). Text: 2 parallel
    Cohere 2 blocks (one LayerNorm each, attention and MLP both reading it),
    width 32, 2 query heads / 1 key-value head, head_dim 16; block 0 sliding
    (window 16) with interleaved M-RoPE, sections [4, 2, 2], block 1 global
    with no position embedding (``rope_parameters`` per layer type, None for
    it); logits scaled by ``logit_scale`` 0.25; tied embeddings. Every norm's
    weight and bias are drawn at random.
    """
    tokenizer = _tokenizer()
    ids = {f"{name}_id": tokenizer.convert_tokens_to_ids(token) for name, token in VISION_TOKENS.items()}
    config = CohereCompassConfig(
        text_config=text_sizes(
            tokenizer,
            head_dim=16,
            sliding_window=16,
            layer_types=LAYER_TYPES,
            rope_parameters={
                "sliding_attention": {"rope_type": "default", "rope_theta": 50_000.0, "mrope_section": [4, 2, 2]},
                "full_attention": None,
            },
            logit_scale=LOGIT_SCALE,
            tie_word_embeddings=True,
        ),
        vision_config=_qwen3_vision(PATCH, depth=2, deepstack_visual_indexes=[0]),
        tie_word_embeddings=True,
        **ids,
    )
    model = CohereCompassForConditionalGeneration(config)
    randomise_norms(model)
    return model, _processor(tokenizer)


#: The checkpoints this module builds, by name.
BUILDERS = {"cohere_compass": build_cohere_compass}


#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builders' documented
#: configurations above, never off the code under test.
CONTRACTS = {
    # envoys/testing/cohere_compass.py: qwen3_vl's tower with 2 blocks, patch 8; DeepStack taps block 0, added after text
    # block 0 of 2 (parallel Cohere 2-style blocks).
    "cohere_compass": Row(
        loads=Loads(("CohereCompassForConditionalGeneration", "CohereCompassProcessor", "TokenizersBackend")),
        image_tokens=(4, 12),
        sizes=Sizes(num_layers=2, patch_size=8, image_size="image_grid_thw", **SIGLIP),
        stream=packed(16, 48),
        projected=flat((1, 4), (1, 12)),
        projector_reads=Reads("layer_output", block=-1, unbatched=True),
        pattern=PER_IMAGE_PATTERN,
        deepstack_taps=1,
        vision_unavailable=NO_WINDOWS,
        text_gaps={"deepstack_output": (1,)},
        rules=(scatter("cohere_compass"), "cohere_compass.vision-attention", "cohere_compass.deepstack",
               *attention("cohere_compass", "CohereCompassAttention")),
        native={
            "vision": "model.visual", "projector": "model.visual.merger",
            "vision.patch_embed": "model.visual.patch_embed",
            **blocks("vision.layers", "model.visual.blocks", {**QWEN_VIT_BLOCK, "mlp.down_proj": "mlp.linear_fc2"}),
            **text_model("model.language_model", {**TEXT_BLOCK, "post_attention_layernorm": "input_layernorm"}),
        },
    ),
}
