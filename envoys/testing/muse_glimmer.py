"""A tiny Muse Glimmer checkpoint: a packed tower attending in windows and per image, a pixel shuffle, an adapter, on
a Gemma 2-style sandwich-normed text model.

The processor is the stock ``MuseGlimmerProcessor`` with its stock image
processor (``MuseGlimmerImageProcessor``: resized to a grid of ``patch *
merge`` = 16 pixel cells keeping the aspect ratio, under ``max_image_tokens``
64) and video processor, and a word-level tokenizer holding the tokens the
processor writes (``<|patch|>`` per image token between ``<|image_start|>``
and ``<|image_end|>``, the video tokens). Patch 8, merged 2x2: a 32x32 image
is 16 patches (4x4) and 4 image tokens, 48 high x 64 wide 48 patches (6 rows
of 8) and 12 tokens. Each image's patches are in raster order.
"""

from __future__ import annotations

from transformers import (
    MuseGlimmerConfig,
    MuseGlimmerForConditionalGeneration,
    MuseGlimmerImageProcessor,
    MuseGlimmerProcessor,
    MuseGlimmerVideoProcessor,
)

from .contract import PER_IMAGE_PATTERN, QWEN_VIT_BLOCK, SIGLIP, TEXT_BLOCK, Loads, Row, Sizes, attention, blocks, flat, packed, scatter, text_model
from .norms import randomise_norms
from .rope import rope
from .sizes import text_sizes
from .tokenizer import TokenizersBackend, word_level_tokenizer

PATCH = 8
MERGE = 2
#: The side of the learned position grid, in patches, which is also the attention window's side.
POSITION_GRID = 4
#: The tokens ``MuseGlimmerProcessor`` writes.
VISION_TOKENS = ["<|patch|>", "<|image_start|>", "<|image_end|>", "<|video|>", "<|vid_frame_separator|>",
                 "<|vid_start|>", "<|vid_end|>"]
TURN_TOKENS = ["<|begin_of_text|>", "<|end_of_text|>", "<|pad|>", "<|user|>", "<|assistant|>", "<|eot|>"]
#: A user turn and the assistant's, each image written as the processor's ``<|patch|>`` placeholder.
CHAT_TEMPLATE = (
    "{{ '<|begin_of_text|>' }}"
    "{% for message in messages %}"
    "{{ '<|user|>' if message['role'] == 'user' else '<|assistant|>' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for item in message['content'] %}"
    "{% if item['type'] == 'image' %}{{ '<|patch|>' }}"
    "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '<|eot|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)


def muse_tokenizer(template: str = CHAT_TEMPLATE) -> TokenizersBackend:
    """The turn tokens and the vision tokens the Muse processors write, special."""
    return word_level_tokenizer(
        special_tokens=[*TURN_TOKENS, *VISION_TOKENS],
        named_tokens={"image_token": "<|patch|>"},
        chat_template=template,
        bos_token="<|begin_of_text|>",
        eos_token="<|eot|>",
        pad_token="<|pad|>",
    )


def muse_vision(**particular: object) -> dict[str, object]:
    """The Muse tower: 2 blocks, width 32, 2 heads, MLP 64 wide, patch 8 (two frames deep), a 4x4 learned position
    grid (so 32 pixel windows), merged 2x2; block 0 attends in windows, block 1 per image."""
    return {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "patch_size": PATCH,
        "patch_temporal": 2,
        "merge_size": MERGE,
        "pos_emb_height": POSITION_GRID,
        "pos_emb_width": POSITION_GRID,
        "max_position_embeddings": POSITION_GRID * POSITION_GRID,
        "layer_types": ["window_attention", "full_attention"],
        **particular,
    }


def muse_image_processor() -> MuseGlimmerImageProcessor:
    return MuseGlimmerImageProcessor(patch_size=PATCH, merge_size=MERGE, temporal_patch_size=2, max_image_tokens=64)


def muse_video_processor() -> MuseGlimmerVideoProcessor:
    return MuseGlimmerVideoProcessor(patch_size=PATCH, merge_size=MERGE, temporal_patch_size=2, max_image_tokens=64)


def build_muse_glimmer() -> tuple[MuseGlimmerForConditionalGeneration, MuseGlimmerProcessor]:
    """Imitates meta-models/Muse-Glimmer-30B.

    Tower: `muse_vision` (block 0 in windows of 4x4 patches, block 1 per
    image; ``ln_pre`` and ``ln_post``; the tower pixel-shuffles each 2x2
    block of patches into one row of 128). Then the host's adapter
    (``vision_adapter``, 128 -> 48 -> 48), projection (48 -> 32) and a
    weightless RMSNorm (``perception_emb_norm``). Text: 2 sandwich-normed
    blocks, width 32, 2 query heads / 1 key-value head of 16, gated
    attention with a weightless q/k RMSNorm; block 0 sliding (window 16,
    RoPE), block 1 global with no position embedding; logits times
    ``output_multiplier`` 0.5 then soft-capped at 20. The embedding is
    RMS-normed (weightless). Every norm with a weight has it drawn at random.
    """
    tokenizer = muse_tokenizer()
    config = MuseGlimmerConfig(
        text_config=text_sizes(
            tokenizer,
            head_dim=16,
            sliding_window=16,
            hidden_activation="silu",
            layer_types=["sliding_attention", "full_attention"],
            output_multiplier=0.5,
            **rope(10_000.0),
        ),
        vision_config=muse_vision(),
        image_token_id=tokenizer.convert_tokens_to_ids("<|patch|>"),
        video_token_id=tokenizer.convert_tokens_to_ids("<|video|>"),
        out_hidden_size=32 * MERGE * MERGE,
        projector_hidden_size=48,
    )
    model = MuseGlimmerForConditionalGeneration(config)
    randomise_norms(model)
    processor = MuseGlimmerProcessor(image_processor=muse_image_processor(), video_processor=muse_video_processor(),
                                     tokenizer=tokenizer, chat_template=CHAT_TEMPLATE)
    return model, processor


#: The checkpoints this module builds, by name.
BUILDERS = {"muse_glimmer": build_muse_glimmer}


#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builders' documented
#: configurations above, never off the code under test.
CONTRACTS = {
    # envoys/testing/muse_glimmer.py: 2 blocks, width 32, 2 heads, patch 8, merged 2x2: a 32x32 image is 16 patches and
    # 4 tokens, 64 wide x 48 high 48 and 12; block 0 in windows of 4x4 patches, block 1 per image; ln_post after the
    # window order is undone, then a pixel shuffle (128 wide rows) and the adapter (48 wide), a projection and a norm.
    "muse_glimmer": Row(
        loads=Loads(("MuseGlimmerForConditionalGeneration", "MuseGlimmerProcessor", "TokenizersBackend")),
        image_tokens=(4, 12),
        sizes=Sizes(num_layers=2, patch_size=8, image_size="image_grid_thw", **SIGLIP),
        stream=packed(16, 48),
        projected=flat((1, 4), (1, 12)),
        projector_reads=None,
        final_norm=True,
        restores_window_order=True,
        features_are_projected=False,
        pattern=PER_IMAGE_PATTERN,
        rules=(scatter("muse_glimmer"), "muse_glimmer.vision-windows", "muse_glimmer.vision-attention",
               *attention("muse_glimmer", "MuseGlimmerTextAttention")),
        native={
            "vision": "model.vision_tower", "projector": "model.vision_projection",
            "vision.norm": "model.vision_tower.ln_post",
            **blocks("vision.layers", "model.vision_tower.layers", {**QWEN_VIT_BLOCK, "mlp.up_proj": "mlp.fc1",
                "mlp.down_proj": "mlp.fc2"}),
            **text_model("model.language_model", {**TEXT_BLOCK, "attention_output_norm": "post_attention_layernorm"}),
        },
    ),
}
