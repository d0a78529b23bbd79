"""A tiny Ovis2 checkpoint (model_type ovis2): a tiled AIMv2-style tower, a visual tokenizer, a Qwen2 text model.

The builder returns an unsaved (`Ovis2ForConditionalGeneration`,
`Ovis2Processor`) pair with random float32 weights. Tiles are ``TILE`` = 32
pixels (the vision config's ``image_size``) with patches of 4, so 64 patches
(8x8) a tile; the visual tokenizer folds each 2x2 block of patches
(``hidden_stride`` 2) into one image token, so a tile gives
``TOKENS_PER_TILE`` = 16 image tokens (4x4). The image processor
(`Ovis2ImageProcessor`, ``crop_to_patches``) picks the fewest tiles of up to
``MAX_TILES`` = 4 that cover 90% of the image, cuts the resized image into
them and, when there are several, puts the whole image resized to one tile
(the thumbnail) before them: a 32x32 image is 1 tile (16 tokens), a 64 wide x
48 high one the thumbnail + 2x2 tiles (80). The visual vocabulary has
``VISUAL_VOCAB`` = 64 entries, the last 5 of them the indicator tokens'.
"""

from __future__ import annotations

from transformers import (
    Ovis2Config,
    Ovis2ForConditionalGeneration,
    Ovis2ImageProcessor,
    Ovis2Processor,
    Ovis2VisionConfig,
)

from .contract import SIGLIP, Loads, Row, Sizes, attention, batched, blocks, scatter, text_model
from .norms import randomise_norms
from .qwen import CHAT_TEMPLATE, _text
from .tokenizer import TokenizersBackend, word_level_tokenizer

TILE = 32
PATCH = 4
HIDDEN_STRIDE = 2
TOKENS_PER_TILE = (TILE // PATCH // HIDDEN_STRIDE) ** 2  # 16
MAX_TILES = 4
VISUAL_VOCAB = 64

#: The tokens Ovis2's processor writes around each image's tiles, in the order of the config's
#: ``visual_indicator_token_ids`` (the last 5 rows of the visual embedding table, in this order).
INDICATOR_TOKENS = ("<IMG_START>", "<IMG_GRID>", "<IMG_COL>", "<IMG_ROW>", "<IMG_END>")
#: The image token the processor repeats for each of a tile's tokens; ``<image>`` is the prompt's placeholder.
IMAGE_TOKEN = "<IMG_ATOM>"

#: Qwen's ChatML, each image written as the processor's ``<image>`` placeholder.
OVIS2_TEMPLATE = CHAT_TEMPLATE.replace("<|vision_start|><|image_pad|><|vision_end|>", "<image>\n")


def ovis2_tokenizer() -> TokenizersBackend:
    """A Qwen-style tokenizer with Ovis2's image placeholder, image token and indicator tokens as special tokens."""
    return word_level_tokenizer(
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<image>", IMAGE_TOKEN, *INDICATOR_TOKENS],
        named_tokens={"image_token": "<image>"},
        chat_template=OVIS2_TEMPLATE,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
    )


def build_ovis2() -> tuple[Ovis2ForConditionalGeneration, Ovis2Processor]:
    """Imitates thisisiron/Ovis2-2B-hf (448 pixel tiles of 14 pixel patches, ``hidden_stride`` 2: 256 tokens a tile).

    Tower (AIMv2-style: RMS norms, SwiGLU MLP, no CLS): 2 blocks, width 32,
    2 heads, MLP 64 wide, patch 4 on 32x32 tiles; then the visual tokenizer's
    head (a linear map of each folded 2x2 block's 128 features to the 59
    visual words, a LayerNorm, a softmax) and the 64 x 32 visual embedding
    table. Text: 2 Qwen2 blocks, width 32. Every norm's weight and bias are
    drawn at random. The processor writes each image as ``<IMG_START>``, the
    first tile's 16 ``<IMG_ATOM>``, ``<IMG_GRID>``, then each grid tile's 16
    (``<IMG_COL>`` between the tiles of a row, ``<IMG_ROW>`` between rows) and
    ``<IMG_END>``.
    """
    tokenizer = ovis2_tokenizer()
    ids = tokenizer.convert_tokens_to_ids
    config = Ovis2Config(
        vision_config=Ovis2VisionConfig(
            hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, image_size=TILE,
            patch_size=PATCH, hidden_stride=HIDDEN_STRIDE, vocab_size=VISUAL_VOCAB, num_visual_indicator_tokens=5,
        ),
        text_config={"model_type": "qwen2", **_text(tokenizer)},
        image_token_id=ids(IMAGE_TOKEN),
        visual_indicator_token_ids=[ids(token) for token in INDICATOR_TOKENS],
        vocab_size=len(tokenizer),
        hidden_size=32,
    )
    processor = Ovis2Processor(
        image_processor=Ovis2ImageProcessor(
            size={"height": TILE, "width": TILE}, crop_to_patches=True, min_patches=1, max_patches=MAX_TILES,
        ),
        tokenizer=tokenizer,
        chat_template=OVIS2_TEMPLATE,
        image_seq_length=TOKENS_PER_TILE,
    )
    model = Ovis2ForConditionalGeneration(config)
    randomise_norms(model)
    return model, processor


#: The checkpoints this module builds, by name.
BUILDERS = {"ovis2": build_ovis2}


#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builders' documented
#: configurations above, never off the code under test.
CONTRACTS = {
    # envoys/testing/ovis2.py: 32 px tiles of 4 px patches (64 a tile), 2 blocks, a final RMS norm; 16 tokens a tile after
    # the 2x2 fold; a 32x32 image is 1 tile (16 tokens), a 64 wide, 48 high one the thumbnail + 2x2 tiles (80); the
    # projector reads the visual tokenizer's probabilities, padded (tests/test_ovis2.py).
    "ovis2": Row(
        loads=Loads(("Ovis2ForConditionalGeneration", "Ovis2Processor", "TokenizersBackend"), feature_token=IMAGE_TOKEN,
                    also_written=INDICATOR_TOKENS),
        image_tokens=(16, 80),
        sizes=Sizes(num_layers=2, patch_size=4, image_size=32, **SIGLIP),
        stream=batched((1, 64), (5, 64)),
        projected=batched((1, 16), (5, 16)),
        projector_reads=None,
        final_norm=True,
        rules=(scatter("ovis2"), *attention("ovis2", "Ovis2VisionAttention"), *attention("qwen2", "Qwen2Attention")),
        native={
            "vision": "model.vision_tower", "projector": "model.visual_embeddings_table",
            "vision.norm": "model.vision_tower.transformer.rms_norm",
            "vision.patch_embed": "model.vision_tower.transformer.embeddings.patch_embedding",
            **blocks("vision.layers", "model.vision_tower.transformer.encoder.layers", {"self_attn": "attention",
                "self_attn.o_proj": "attention.out_proj", "input_layernorm": "rms_norm1",
                "post_attention_layernorm": "rms_norm2", "mlp": "ffn", "mlp.up_proj": "ffn.up_proj",
                "mlp.down_proj": "ffn.down_proj"}),
            **text_model("model.language_model"),
        },
    ),
}
