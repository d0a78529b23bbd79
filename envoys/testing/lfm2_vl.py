"""A tiny LFM2-VL checkpoint: a SigLIP2 NaFlex tower, a projector over 2x2 patch blocks, an LFM2 hybrid text model.

The builder returns an unsaved (`Lfm2VlForConditionalGeneration`,
`Lfm2VlProcessor`) pair with random float32 weights (seed the torch generator
first; :func:`envoys.testing.build` does). The stock image processor
(`Lfm2VlImageProcessor`) resizes each image so that both sides are multiples
of ``PATCH * DOWNSAMPLE`` = 8 pixels and it holds at most ``MAX_IMAGE_TOKENS``
= 20 image tokens (80 patches of 4 pixels), cuts it into flat patches and pads
each to ``ROWS`` = 80 rows (``pixel_attention_mask`` 0 on the padding). An
image too large for that (more than twice the budget) is cut into 32 pixel
tiles (8x8 patches, 16 tokens each) on a canvas of 2 to ``MAX_TILES`` = 4
tiles picked for its aspect ratio, followed by a thumbnail resized within the
budget; each tile and the thumbnail is one row of the tower. So a 32x32 image
is one row of 64 real patches (8x8), 16 image tokens; a 64 wide x 48 high one
is 2x2 tiles (64 patches each) and a 40 wide x 24 high thumbnail (10x6 = 60
patches, 5x3 = 15 tokens): 5 rows and 4 * 16 + 15 = 79 image tokens.
"""

from __future__ import annotations

from transformers import (
    Lfm2Config,
    Lfm2VlConfig,
    Lfm2VlForConditionalGeneration,
    Lfm2VlImageProcessor,
    Lfm2VlProcessor,
    Siglip2VisionConfig,
)

from .contract import ENCODER_BLOCK, SIGLIP, Loads, PatternRow, Row, Sizes, attention, batched, blocks, scatter, slots, text_model
from .llava import INTERLEAVE_TEMPLATE
from .norms import randomise_norms
from .sizes import text_sizes, vision_sizes
from .tokenizer import TokenizersBackend, word_level_tokenizer

PATCH = 4
DOWNSAMPLE = 2
TILE = 32
MAX_TILES = 4
MAX_IMAGE_TOKENS = 20
#: The padded patch axis: the processor's max(MAX_IMAGE_TOKENS * DOWNSAMPLE**2, (TILE // PATCH)**2) = 80 rows.
ROWS = max(MAX_IMAGE_TOKENS * DOWNSAMPLE**2, (TILE // PATCH) ** 2)
#: The text blocks: a short-convolution block, then an attention block.
LAYER_TYPES = ["conv", "full_attention"]

#: LFM2-VL's turns: ``<|startoftext|>``, then ChatML; each image is ``<image>``.
LFM2_VL_TEMPLATE = "{{ bos_token }}" + INTERLEAVE_TEMPLATE

#: The tokens LFM2-VL's processor writes around and between an image's tokens, by the names it reads.
IMAGE_TOKENS = {
    "image_token": "<image>",
    "image_start_token": "<|image_start|>",
    "image_end_token": "<|image_end|>",
    "image_thumbnail_token": "<|img_thumbnail|>",
}
#: The tile markers the processor writes before each tile's tokens, ``<|img_row_R_col_C|>``.
TILE_TOKENS = [f"<|img_row_{row}_col_{col}|>" for row in range(1, MAX_TILES + 1) for col in range(1, MAX_TILES + 1)]


def lfm2_tokenizer() -> TokenizersBackend:
    """LFM2's tokenizer, reduced: ``<|startoftext|>`` (BOS), ``<|im_start|>``, ``<|im_end|>`` (EOS), ``<|pad|>``,
    and the image tokens (`IMAGE_TOKENS`, `TILE_TOKENS`)."""
    return word_level_tokenizer(
        special_tokens=["<|pad|>", "<|startoftext|>", "<|im_start|>", "<|im_end|>", *TILE_TOKENS],
        named_tokens=IMAGE_TOKENS,
        chat_template=LFM2_VL_TEMPLATE,
        bos_token="<|startoftext|>",
        eos_token="<|im_end|>",
        pad_token="<|pad|>",
    )


def build_lfm2_vl() -> tuple[Lfm2VlForConditionalGeneration, Lfm2VlProcessor]:
    """Imitates LiquidAI/LFM2-VL-450M (its 512 pixel tiles of 16 pixel patches, 256 tokens an image, 2 to 10 tiles).

    SigLIP2 NaFlex tower (no pooling head, ``post_layernorm`` over the
    patches): 2 blocks, width 32, 2 heads, MLP 64 wide, a linear patch
    embedding of 4x4 pixel patches and a learned 8x8 position table
    (``num_patches`` 64) resized to each image's grid. The projector
    (``downsample_factor`` 2) folds each 2x2 block of the tower's output into
    one token: layer norm over its 128 features, then two linear layers (32
    wide) to the text width 32. LFM2 text model: 2 blocks of width 32, block 0
    a gated short convolution (kernel 3), block 1 attention (2 query heads, 1
    key-value head of 16), each with a SwiGLU MLP 64 wide (``feed_forward``; no
    automatic width adjustment), tied embeddings. Every norm's weight and
    bias are drawn at random (`randomise_norms`). Processor: see the module
    docstring (``max_image_tokens`` 20, ``min_image_tokens`` 4, tiles of 32
    pixels, 2 to 4 tiles and a thumbnail).
    """
    tokenizer = lfm2_tokenizer()
    config = Lfm2VlConfig(
        vision_config=Siglip2VisionConfig(**vision_sizes(patch_size=PATCH, num_patches=64, vision_use_head=False)),
        text_config=Lfm2Config(**text_sizes(
            tokenizer, layer_types=LAYER_TYPES, conv_L_cache=3, block_auto_adjust_ff_dim=False,
            tie_word_embeddings=True,
        )),
        image_token_id=tokenizer.image_token_id,
        projector_hidden_size=32,
        downsample_factor=DOWNSAMPLE,
    )
    processor = Lfm2VlProcessor(
        image_processor=Lfm2VlImageProcessor(
            encoder_patch_size=PATCH, downsample_factor=DOWNSAMPLE, tile_size=TILE, min_tiles=2, max_tiles=MAX_TILES,
            min_image_tokens=4, max_image_tokens=MAX_IMAGE_TOKENS, do_image_splitting=True, use_thumbnail=True,
        ),
        tokenizer=tokenizer,
        chat_template=LFM2_VL_TEMPLATE,
    )
    model = Lfm2VlForConditionalGeneration(config)
    randomise_norms(model)
    return model, processor


#: The checkpoints this module builds, by name.
BUILDERS = {"lfm2_vl": build_lfm2_vl}


#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builders' documented
#: configurations above, never off the code under test.
CONTRACTS = {
    # envoys/testing/lfm2_vl.py: every row padded to 80 patches of 4 px (max_image_tokens 20 x 2**2); 32x32 is one row of
    # 8x8 real patches and 16 tokens, 64 wide x 48 high 2x2 tiles of 8x8 + a 10x6 thumbnail (5 rows, 4 * 16 + 15 = 79
    # tokens); post_layernorm; the projector gives every row 80 / 2**2 = 20 slots, padding slots included, which the
    # host drops. Text blocks: a short convolution, then attention.
    "lfm2_vl": Row(
        loads=Loads(("Lfm2VlForConditionalGeneration", "Lfm2VlProcessor", "TokenizersBackend")),
        image_tokens=(16, 79),
        sizes=Sizes(num_layers=2, patch_size=4, image_size="spatial_shapes", **SIGLIP),
        stream=batched((1, 80), (5, 80)),
        projected=slots((1, 20), (5, 20)),
        projector_reads=None,
        final_norm=True,
        pattern=PatternRow(padded=True),
        features_are_projected=False,
        text_gaps={"attention_output": (0,), "self_attn.": (0,)},
        rules=(scatter("lfm2_vl"), *attention("siglip2", "Siglip2Attention"), *attention("lfm2", "Lfm2Attention")),
        native={
            "vision": "model.vision_tower", "projector": "model.multi_modal_projector",
            "vision.norm": "model.vision_tower.post_layernorm",
            "vision.patch_embed": "model.vision_tower.embeddings.patch_embedding",
            **blocks("vision.layers", "model.vision_tower.encoder.layers", ENCODER_BLOCK),
            **text_model("model.language_model", {"mlp": "feed_forward", "input_layernorm": "operator_norm",
                "post_attention_layernorm": "ffn_norm"}, norm="embedding_norm"),
            "layers.1.self_attn": "model.language_model.layers.1.self_attn",
            "layers.1.self_attn.q_norm": "model.language_model.layers.1.self_attn.q_layernorm",
        },
    ),
}
