"""A tiny Granite-Docling checkpoint: Idefics 3's tiled ViT with its connector inside the tower, DeepStack, a Granite
text model.

The builder returns an unsaved (`GraniteDoclingForConditionalGeneration`,
`GraniteDoclingProcessor`) pair with random float32 weights (seed the torch
generator first; :func:`envoys.testing.build` does) and the stock processor
(`GraniteDoclingImageProcessor`, which needs torchvision).

Sizes: tiles of ``TILE`` = 32 pixels (the vision config's ``image_size``),
patches of ``PATCH`` = 4, so 64 patches (8x8) a tile. The connector's coarse
path pixel-shuffles each 4x4 block of patches (``scale_factor`` 4) into one
image token, ``TOKENS_PER_TILE`` = 4 a tile; its fine path (the processor
called with ``fine_route=True``) shuffles 2x2 blocks, 16 tokens a tile. The
image processor picks a canvas of up to ``MAX_TILES`` = 4 tiles for the
image's aspect ratio and appends a thumbnail where there are several: a 32x32
image is 1 tile (4 tokens), a 64 wide x 48 high one 2x2 tiles + the thumbnail
(5 tiles, 20 tokens).
"""

from __future__ import annotations

from transformers import (
    GraniteDoclingConfig,
    GraniteDoclingForConditionalGeneration,
    GraniteDoclingImageProcessor,
    GraniteDoclingProcessor,
)
from transformers.models.granite_docling.configuration_granite_docling import (
    GraniteDoclingTextConfig,
    GraniteDoclingVisionConfig,
)

from .contract import ENCODER_BLOCK, SIGLIP, Loads, Reads, Row, Sizes, attention, batched, blocks, flat, scatter, text_model
from .norms import randomise_norms
from .sizes import text_sizes, vision_sizes
from .tokenizer import WORDS, TokenizersBackend, word_level_tokenizer

TILE = 32
PATCH = 4
SCALE_FACTOR = 4
TOKENS_PER_TILE = (TILE // PATCH // SCALE_FACTOR) ** 2  # 4
FINE_TOKENS_PER_TILE = (TILE // PATCH // (SCALE_FACTOR // 2)) ** 2  # 16
MAX_TILES = 4
#: The tower blocks whose outputs the connector merges for DeepStack (after text blocks 0 and 1 of 3).
DEEPSTACK_INDEXES = [0, 1]
TEXT_LAYERS = 3

#: The tokens the processor writes around the tiles: ``<row_r_col_c>`` before each grid tile (up to 4 a side here),
#: ``<global-img>`` before the thumbnail, ``<fake_token_around_image>`` around each tile.
TILE_TOKENS = tuple(f"<row_{row}_col_{col}>" for row in range(1, MAX_TILES + 1) for col in range(1, MAX_TILES + 1))
NAMED = {"image_token": "<image>", "fake_image_token": "<fake_token_around_image>", "global_image_token": "<global-img>"}

#: ibm-granite/granite-docling-258M's turns, reduced: ``<|start_of_role|>user<|end_of_role|><image>text<|end_of_text|>``.
TEMPLATE = (
    "{% for message in messages %}<|start_of_role|>{{ message['role'] }}<|end_of_role|>"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for line in message['content'] %}{% if line['type'] == 'text' %}{{ line['text'] }}"
    "{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}{% endif %}<|end_of_text|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|start_of_role|>assistant<|end_of_role|>{% endif %}"
)


def _tokenizer() -> TokenizersBackend:
    return word_level_tokenizer(
        special_tokens=["<|end_of_text|>", "<|start_of_role|>", "<|end_of_role|>", "<|pad|>", *TILE_TOKENS],
        named_tokens=NAMED,
        chat_template=TEMPLATE,
        eos_token="<|end_of_text|>",
        pad_token="<|pad|>",
        words=(*WORDS, "user", "assistant"),
    )


def build_granite_docling() -> tuple[GraniteDoclingForConditionalGeneration, GraniteDoclingProcessor]:
    """Imitates ibm-granite/granite-for-docling-500m (512 pixel tiles of 16 pixel patches, 64 tokens a tile on the
    coarse path, 256 on the fine one, DeepStack from tower blocks 3, 7 and 10, up to 32 tiles).

    Tower (``GraniteDoclingVisionModel``): 2 blocks, width 32, 2 heads, MLP
    64 wide, 32x32 tiles of 4x4 patches, ``post_layernorm``; the connector
    inside it layer-norms the tower's output (``ln_in``), pixel-shuffles it
    4x4 (coarse) or 2x2 (fine), maps it to 32, adds the fixed 2D position
    embedding, then ``ln_mid``, GELU, ``mlp_fc2`` and ``ln_out``; each path's
    two DeepStack mergers take tower blocks 0 and 1 (`DEEPSTACK_INDEXES`),
    added after text blocks 0 and 1. A density router (hidden 16) scores each
    prompt's tiles. Granite text model: 3 blocks, width 32, 2 query heads /
    1 key-value head, MLP 64 wide, with the config's default multipliers
    (embeddings times 12, each sublayer's output times 0.263 before it joins
    the stream, attention scaled by 0.015625, logits divided by 4). Every
    norm's weight and bias are drawn at random.
    """
    tokenizer = _tokenizer()
    vision = GraniteDoclingVisionConfig(**vision_sizes(
        image_size=TILE, patch_size=PATCH, out_hidden_size=32, scale_factor=SCALE_FACTOR,
        deepstack_visual_indexes=DEEPSTACK_INDEXES, use_fine_route=True,
    ))
    text = GraniteDoclingTextConfig(**text_sizes(tokenizer, num_hidden_layers=TEXT_LAYERS, tie_word_embeddings=True))
    config = GraniteDoclingConfig(
        vision_config=vision,
        text_config=text,
        image_token_id=tokenizer.convert_tokens_to_ids(NAMED["image_token"]),
        pad_token_id=tokenizer.pad_token_id,
        density_router_hidden_size=16,
        tie_word_embeddings=True,
    )
    processor = GraniteDoclingProcessor(
        image_processor=GraniteDoclingImageProcessor(
            size={"height": TILE, "width": TILE}, crop_to_patches=True, min_patches=1, max_patches=MAX_TILES,
        ),
        tokenizer=tokenizer,
        image_seq_len=TOKENS_PER_TILE,
        chat_template=TEMPLATE,
    )
    model = GraniteDoclingForConditionalGeneration(config)
    randomise_norms(model)
    return model, processor


#: The checkpoints this module builds, by name.
BUILDERS = {"granite_docling": build_granite_docling}


#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builders' documented
#: configurations above, never off the code under test.
CONTRACTS = {
    # envoys/testing/granite_docling.py: 32 px tiles of 4 px patches (64 a tile), 4 tokens a tile on the coarse path (4x4
    # shuffle); 32x32 is 1 tile (no thumbnail), 64 wide x 48 high 2x2 tiles + the thumbnail (20); post_layernorm; the
    # connector (inside the tower) reads tower_output and returns (features, DeepStack features), its features flat;
    # DeepStack taps after text blocks 0 and 1 of 3; the Granite text model multiplies the embeddings by 12.
    "granite_docling": Row(
        loads=Loads(("GraniteDoclingForConditionalGeneration", "GraniteDoclingProcessor", "TokenizersBackend")),
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
        native={
            "vision": "model.vision_model", "projector": "model.vision_model.connector",
            "vision.norm": "model.vision_model.post_layernorm",
            "vision.patch_embed": "model.vision_model.embeddings.patch_embedding",
            **blocks("vision.layers", "model.vision_model.encoder.layers", ENCODER_BLOCK),
            **text_model("model.text_model"), "model.density_router": "model.density_router",
        },
    ),
}
