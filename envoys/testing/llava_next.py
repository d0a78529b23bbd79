"""A tiny LLaVA-NeXT checkpoint: a CLIP tower on tiles, on a Mistral text model.

The builder returns an unsaved (`LlavaNextForConditionalGeneration`,
`LlavaNextProcessor`) pair with random float32 weights (seed the torch
generator first; :func:`envoys.testing.build` does). Tiles are 32x32 with 8x8
patches, so a tile is 1 + 16 positions in the tower; the grid resolutions
(``image_grid_pinpoints``) are a few multiples of the tile, so an image is a
base tile plus 2 or 4 grid tiles.
"""

from __future__ import annotations

from transformers import (
    CLIPVisionConfig,
    LlavaNextConfig,
    LlavaNextForConditionalGeneration,
    LlavaNextImageProcessor,
    LlavaNextProcessor,
    MistralConfig,
)

from .contract import CLIP_ATTENTION, MISTRAL_ATTENTION, SIGLIP, Loads, Reads, Row, Sizes, batched, encoder_tower, scatter, text_model
from .sizes import text_sizes
from .tokenizer import TokenizersBackend, word_level_tokenizer

TILE_SIZE = 32
PATCH_SIZE = 8
#: The resolutions, (height, width) in pixels, an image may be resized and padded to before it is cut into tiles.
GRID_PINPOINTS = [[32, 64], [64, 32], [64, 64]]

#: Mistral instruct like llava-v1.6-mistral: ``[INST] <image>\n... [/INST]``, the images before the text.
MISTRAL_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}"
    "{% for item in message['content'] %}{% if item['type'] == 'image' %}{{ '<image>\n' }}{% endif %}{% endfor %}"
    "{% for item in message['content'] %}{% if item['type'] == 'text' %}{{ item['text'] }}{% endif %}{% endfor %}"
    "{% endif %}"
    "{{ ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for item in message['content'] %}{{ item['text'] }}{% endfor %}{% endif %}"
    "{{ '</s> ' }}"
    "{% endif %}"
    "{% endfor %}"
)


def _mistral_tokenizer() -> TokenizersBackend:
    return word_level_tokenizer(
        special_tokens=["<s>", "</s>", "<pad>", "[INST]", "[/INST]"],
        named_tokens={"image_token": "<image>"},
        chat_template=MISTRAL_TEMPLATE,
        bos_token="<s>",
        add_bos_token=True,
        eos_token="</s>",
        pad_token="<pad>",
    )


def anyres_image_processor() -> LlavaNextImageProcessor:
    """LLaVA-NeXT's image processor on 32x32 tiles: each image resized and padded to the best of `GRID_PINPOINTS` and
    cut into tiles, after a base tile (the shortest edge resized to 32, then a 32x32 centre crop)."""
    return LlavaNextImageProcessor(
        size={"shortest_edge": TILE_SIZE},
        crop_size={"height": TILE_SIZE, "width": TILE_SIZE},
        image_grid_pinpoints=GRID_PINPOINTS,
    )


def build_llava_next() -> tuple[LlavaNextForConditionalGeneration, LlavaNextProcessor]:
    """Imitates llava-hf/llava-v1.6-mistral-7b-hf.

    CLIP tower (CLS token first, ``pre_layrnorm``): 3 blocks, width 32, 2
    heads, patch 8 on 32x32 tiles, so 1 + 16 positions per tile. Mistral text
    model: 2 layers, width 32, 2 query heads / 1 key-value head, BOS prepended
    by the tokenizer. The projector reads block -2's output without the CLS
    token (``vision_feature_layer=-2``, strategy ``"default"``). The image
    processor (LlavaNextImageProcessor) resizes and pads each image to the best
    of ``GRID_PINPOINTS`` and cuts it into 32x32 tiles, after a base tile of
    the whole image resized to 32x32 (shortest edge, then centre crop); the
    host unpads the grid tiles' features and adds an ``image_newline`` row
    after each row of them, and the processor counts the image tokens the same
    way (``num_additional_image_tokens=1`` for the CLS, less one for
    ``"default"``). A 32x32 image is 3 tiles and 36 image tokens (16 for the
    base tile, a 4x4 unpadded grid, 4 newline rows); a 64 wide, 48 high one is
    5 tiles and 70 tokens (16 + 6x8 + 6); a 48 wide, 64 high one 5 tiles and
    72 tokens (16 + 8x6 + 8).
    """
    tokenizer = _mistral_tokenizer()
    vision = CLIPVisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=3,
        num_attention_heads=2,
        image_size=TILE_SIZE,
        patch_size=PATCH_SIZE,
        projection_dim=32,
    )
    text = MistralConfig(**text_sizes(tokenizer, head_dim=16, sliding_window=None))
    config = LlavaNextConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=tokenizer.image_token_id,
        image_grid_pinpoints=GRID_PINPOINTS,
        vision_feature_layer=-2,
        vision_feature_select_strategy="default",
        projector_hidden_act="gelu",
        tie_word_embeddings=False,
    )
    processor = LlavaNextProcessor(
        image_processor=anyres_image_processor(),
        tokenizer=tokenizer,
        patch_size=PATCH_SIZE,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        chat_template=MISTRAL_TEMPLATE,
    )
    return LlavaNextForConditionalGeneration(config), processor


#: The checkpoints this module builds, by name.
BUILDERS = {"llava_next": build_llava_next}


#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builders' documented
#: configurations above, never off the code under test.
CONTRACTS = {
    # envoys/testing/llava_next.py: CLIP on 32x32 tiles (1 + 16 positions), 3 blocks; a 32x32 image is 3 tiles and 36
    # image tokens, a 64 wide, 48 high one 5 tiles and 70; the projector reads block -2 without CLS, per tile, and the
    # host unpads the grid and adds newline rows, so image_features is not the projector's output.
    "llava_next": Row(
        loads=Loads(("LlavaNextForConditionalGeneration", "LlavaNextProcessor", "TokenizersBackend")),
        image_tokens=(36, 70),
        sizes=Sizes(num_layers=3, patch_size=8, image_size=32, **SIGLIP),
        stream=batched((3, 17), (5, 17)),
        projected=batched((3, 16), (5, 16)),
        projector_reads=Reads("layer_output", block=-2, drop_first=1),
        prefix=1,
        features_are_projected=False,
        rules=(scatter("llava_next"), *CLIP_ATTENTION, *MISTRAL_ATTENTION),
        native={
            **encoder_tower("model.vision_tower", norm=False), "projector": "model.multi_modal_projector",
            **text_model("model.language_model"),
        },
    ),
}
