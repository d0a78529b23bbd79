"""A tiny Aya Vision checkpoint: a SigLIP tower on tiles, a pixel-shuffle projector, a Cohere 2 text model.

The builder returns an unsaved (`AyaVisionForConditionalGeneration`,
`AyaVisionProcessor`) pair with random float32 weights (seed the torch
generator first; :func:`envoys.testing.build` does). Tiles are ``TILE`` = 32
pixels (the vision config's ``image_size``) with patches of 4, so 64 patches
(8x8) a tile; the projector's pixel shuffle (``downsample_factor`` 2) folds
each 2x2 block of patches into one image token, so a tile gives
``TOKENS_PER_TILE`` = 16 image tokens (4x4). The image processor (GotOcr2's,
``crop_to_patches``) picks a canvas of up to ``MAX_TILES`` = 4 tiles for the
image's aspect ratio, cuts the resized image into those tiles and appends a
thumbnail when there are several: a 32x32 image is 1 tile (16 tokens), a 64
wide x 48 high one 2x2 tiles + the thumbnail (80), a 64 wide x 32 high one
2x1 + the thumbnail (48).

`cohere_tokenizer`, `COHERE_TEMPLATE`, `cohere2_text` and `siglip_tiles` are
shared with the builders of its kin (Cohere 2 Vision's).
"""

from __future__ import annotations

from transformers import (
    AyaVisionConfig,
    AyaVisionForConditionalGeneration,
    AyaVisionProcessor,
    Cohere2Config,
    GotOcr2ImageProcessor,
    SiglipVisionConfig,
)

from .contract import (
    COHERE2_ATTENTION,
    SIGLIP,
    SIGLIP_ATTENTION,
    TEXT_BLOCK,
    Loads,
    Reads,
    Row,
    Sizes,
    batched,
    encoder_tower,
    scatter,
    square,
    text_model,
)
from .norms import randomise_norms
from .sizes import text_sizes, vision_sizes
from .tokenizer import WORDS, TokenizersBackend, word_level_tokenizer

TILE = 32
PATCH = 4
DOWNSAMPLE = 2
TOKENS_PER_TILE = (TILE // PATCH // DOWNSAMPLE) ** 2  # 16
MAX_TILES = 4
#: The words Aya Vision's processor writes before each tile's image tokens (TILE_1, TILE_2, ... and TILE_GLOBAL),
#: plain words a real Cohere tokenizer encodes.
TILE_WORDS = ("TILE", "TILE_GLOBAL", *(f"TILE_{k}" for k in range(1, MAX_TILES + 1)))

#: Cohere's chat turns, reduced (no system preamble): ``<BOS_TOKEN><|START_OF_TURN_TOKEN|><|USER_TOKEN|>`` + the
#: content, each image as the processor's placeholder, + ``<|END_OF_TURN_TOKEN|>``, then the chatbot's turn.
COHERE_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|START_OF_TURN_TOKEN|>' + ('<|USER_TOKEN|>' if message['role'] == 'user' else '<|CHATBOT_TOKEN|>') }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for item in message['content'] %}"
    "{% if item['type'] == 'image' %}{{ 'IMAGE_PLACEHOLDER' }}"
    "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '<|END_OF_TURN_TOKEN|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>' }}{% endif %}"
)

#: Cohere's turn tokens.
TURN_TOKENS = ["<PAD>", "<BOS_TOKEN>", "<|START_OF_TURN_TOKEN|>", "<|END_OF_TURN_TOKEN|>", "<|USER_TOKEN|>",
               "<|CHATBOT_TOKEN|>"]
#: The image tokens Cohere's vision tokenizers hold, by the names Cohere 2 Vision's processor reads.
IMAGE_TOKENS = {
    "boi_token": "<|START_OF_IMG|>",
    "eoi_token": "<|END_OF_IMG|>",
    "image_token": "<|IMG_PATCH|>",
    "img_line_break_token": "<|IMG_LINE_BREAK|>",
}


def cohere_template(placeholder: str) -> str:
    """`COHERE_TEMPLATE` with each image written as ``placeholder``."""
    return COHERE_TEMPLATE.replace("IMAGE_PLACEHOLDER", placeholder)


def cohere_tokenizer(named: dict[str, str], template: str) -> TokenizersBackend:
    """A Cohere-style tokenizer: the turn tokens and the image tokens special, ``named`` as the processor's names."""
    return word_level_tokenizer(
        special_tokens=[*TURN_TOKENS, *IMAGE_TOKENS.values()],
        named_tokens=named,
        chat_template=template,
        bos_token="<BOS_TOKEN>",
        eos_token="<|END_OF_TURN_TOKEN|>",
        pad_token="<PAD>",
        words=(*WORDS, *TILE_WORDS),
    )


def siglip_tiles(**particular) -> SiglipVisionConfig:
    """The SigLIP tower: 2 blocks, width 32, 2 heads, MLP 64 wide, patch 4 on 32x32 tiles, no pooling head."""
    return SiglipVisionConfig(**vision_sizes(image_size=TILE, patch_size=PATCH, vision_use_head=False, **particular))


def cohere2_text(tokenizer: TokenizersBackend) -> Cohere2Config:
    """The Cohere 2 text model: 2 parallel blocks of width 32, 2 query heads / 1 key-value head of 16, block 0
    sliding (window 16, rotary embeddings), block 1 global (no position embedding), tied embeddings."""
    return Cohere2Config(**text_sizes(
        tokenizer,
        head_dim=16,
        sliding_window=16,
        layer_types=["sliding_attention", "full_attention"],
        tie_word_embeddings=True,
    ))


def gotocr2_tiles() -> GotOcr2ImageProcessor:
    """GotOcr2's image processor cutting each image into 1 to ``MAX_TILES`` tiles of ``TILE`` pixels, a thumbnail
    appended where there are several (Aya Vision's and InternVL's)."""
    return GotOcr2ImageProcessor(
        size={"height": TILE, "width": TILE}, crop_to_patches=True, min_patches=1, max_patches=MAX_TILES,
    )


def build_aya_vision() -> tuple[AyaVisionForConditionalGeneration, AyaVisionProcessor]:
    """Imitates CohereLabs/aya-vision-8b (its 364 pixel tiles of 14 pixel patches, 169 tokens a tile, up to 12 tiles).

    SigLIP tower (no CLS, ``post_layernorm`` over the patches): 2 blocks,
    width 32, 2 heads, patch 4 on 32x32 tiles, 64 patches. The projector reads
    the last block's output (``vision_feature_layer`` -1, strategy "full",
    before ``post_layernorm``), pixel-shuffles each tile 2x2 to 16 tokens,
    layer-norms each block's 128 features and maps them to 32 with a SwiGLU
    (16 wide). Cohere 2 text model: `cohere2_text`. Every norm's weight and bias
    are drawn at random. The processor writes ``<|START_OF_IMG|>``, then
    ``TILE_k`` + 16 ``<|IMG_PATCH|>`` per grid tile, ``TILE_GLOBAL`` + 16 for
    the thumbnail (or the image's one tile), then ``<|END_OF_IMG|>``; its
    ``patch_size`` is the pixels of one image token, 8 (the checkpoint's 28).
    """
    template = cohere_template("<image>")
    tokenizer = cohere_tokenizer({"image_token": "<image>", **IMAGE_TOKENS}, template)
    config = AyaVisionConfig(
        vision_config=siglip_tiles(),
        text_config=cohere2_text(tokenizer),
        image_token_index=tokenizer.convert_tokens_to_ids(IMAGE_TOKENS["image_token"]),
        vision_feature_layer=-1,
        vision_feature_select_strategy="full",
        downsample_factor=DOWNSAMPLE,
    )
    processor = AyaVisionProcessor(
        image_processor=gotocr2_tiles(),
        tokenizer=tokenizer,
        patch_size=PATCH * DOWNSAMPLE,
        img_size=TILE,
        chat_template=template,
    )
    model = AyaVisionForConditionalGeneration(config)
    randomise_norms(model)
    return model, processor


#: The checkpoints this module builds, by name.
BUILDERS = {"aya_vision": build_aya_vision}


#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builders' documented
#: configurations above, never off the code under test.
CONTRACTS = {
    # envoys/testing/aya_vision.py: SigLIP on 32 px tiles of 4 px patches (64 a tile), 2 blocks, post_layernorm; 16 tokens
    # a tile after the 2x2 pixel shuffle, [tiles, 4, 4, hidden] out of the projector; a 32x32 image is 1 tile (16
    # tokens), a 64 wide, 48 high one 2x2 tiles + the thumbnail (80); the projector reads the last block before the norm.
    "aya_vision": Row(
        loads=Loads(("AyaVisionForConditionalGeneration", "AyaVisionProcessor", "TokenizersBackend")),
        image_tokens=(16, 80),
        sizes=Sizes(num_layers=2, patch_size=4, image_size=32, **SIGLIP),
        stream=batched((1, 64), (5, 64)),
        projected=square((1, 16), (5, 16)),
        projector_reads=Reads("layer_output", block=-1),
        final_norm=True,
        rules=(scatter("aya_vision"), *SIGLIP_ATTENTION, *COHERE2_ATTENTION),
        native={
            **encoder_tower("model.vision_tower"), "projector": "model.multi_modal_projector",
            **text_model("model.language_model", {**TEXT_BLOCK, "post_attention_layernorm": "input_layernorm"}),
        },
    ),
}
