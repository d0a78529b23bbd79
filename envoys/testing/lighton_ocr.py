"""A tiny LightOnOCR checkpoint: the Pixtral tower, Mistral 3's patch-merging projector, a Qwen3 text model.

The builder returns an unsaved (`LightOnOcrForConditionalGeneration`,
`LightOnOcrProcessor`) pair with random float32 weights (seed the torch
generator first; :func:`envoys.testing.build` does).

Images keep their own size as on Mistral 3 (`envoys.testing.pixtral`): the
stock Pixtral image processor scales an image down only when its longest side
is over 64 px, then rounds each side up to a multiple of 8 px, the vision patch
(4 px) times ``spatial_merge_size`` (2). A 32x32 image is 8x8 = 64 patches and
4x4 = 16 image tokens; a 48 (high) x 64 (wide) image is 12x16 = 192 patches and
6x8 = 48 image tokens. Unlike Mistral 3's, LightOnOCR's processor writes only
the image tokens, ``<|image_pad|>`` once per token, with no row-break or end
token between or after them. The tokenizer is Qwen's ChatML with its vision
markers (`envoys.testing.qwen`'s template), ``<|vision_pad|>`` and
``<|vision_end|>`` standing as the break and end tokens the processor requires.
"""

from __future__ import annotations

from transformers import LightOnOcrConfig, LightOnOcrForConditionalGeneration, LightOnOcrProcessor, Qwen3Config

from .contract import PIXTRAL_ATTENTION, PIXTRAL_BLOCK, SIGLIP, Loads, Reads, Row, Sizes, attention, blocks, flat, packed, scatter, text_model
from .norms import randomise_norms
from .pixtral import pixtral_image_processor, pixtral_tower
from .qwen import CHAT_TEMPLATE
from .sizes import text_sizes
from .tokenizer import TokenizersBackend, word_level_tokenizer

PATCH_SIZE = 4
MERGE = 2


def lighton_tokenizer() -> TokenizersBackend:
    """A word-level tokenizer with Qwen's ChatML tokens and the image, break and end tokens LightOnOCR's processor reads."""
    return word_level_tokenizer(
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>"],
        named_tokens={
            "image_token": "<|image_pad|>",
            "image_break_token": "<|vision_pad|>",
            "image_end_token": "<|vision_end|>",
        },
        chat_template=CHAT_TEMPLATE,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
    )


def build_lighton_ocr() -> tuple[LightOnOcrForConditionalGeneration, LightOnOcrProcessor]:
    """Imitates lightonai/LightOnOCR-1B-1025.

    Pixtral tower: 2 blocks, width 32, 2 heads (head_dim 16), gated SiLU MLP 64
    wide, patch 4, no final norm; ``image_size`` 64 is the longest side the
    processor keeps. Projector (``vision_projection``): RMSNorm, a 2x2 patch
    merger (``spatial_merge_size`` 2), two linears without biases to the text
    width, reading the tower's ``last_hidden_state`` (there is no
    ``vision_feature_layer``). Qwen3 text model: 2 layers, width 32, 2 query
    heads / 1 key-value head of dim 16 (q/k norms), tied embeddings. Every
    norm's weight is drawn (`randomise_norms`), so the projector's norm is not
    the identity on standardised rows.
    """
    tokenizer = lighton_tokenizer()
    text = Qwen3Config(**text_sizes(
        tokenizer,
        head_dim=16,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
    ))
    config = LightOnOcrConfig(
        vision_config=pixtral_tower(PATCH_SIZE).to_dict(),
        text_config=text.to_dict(),
        image_token_id=tokenizer.image_token_id,
        spatial_merge_size=MERGE,
        tie_word_embeddings=True,
    )
    processor = LightOnOcrProcessor(
        image_processor=pixtral_image_processor(PATCH_SIZE * MERGE),
        tokenizer=tokenizer,
        patch_size=PATCH_SIZE,
        spatial_merge_size=MERGE,
        chat_template=CHAT_TEMPLATE,
    )
    model = LightOnOcrForConditionalGeneration(config)
    randomise_norms(model)
    return model, processor


#: The checkpoints this module builds, by name.
BUILDERS = {"lighton_ocr": build_lighton_ocr}


#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builders' documented
#: configurations above, never off the code under test.
CONTRACTS = {
    # envoys/testing/lighton_ocr.py: Mistral 3's tower, processor sizes and projector (64 and 192 patches, 16 and 48
    # tokens); the projector reads the tower's last_hidden_state (no final norm: the last block's stream), unbatched.
    "lighton_ocr": Row(
        loads=Loads(("LightOnOcrForConditionalGeneration", "LightOnOcrProcessor", "TokenizersBackend")),
        image_tokens=(16, 48),
        sizes=Sizes(num_layers=2, patch_size=4, image_size="image_sizes", **SIGLIP),
        stream=packed(64, 192),
        projected=flat((1, 16), (1, 48)),
        projector_reads=Reads("tower_output", unbatched=True),
        rules=(scatter("lighton_ocr"), *PIXTRAL_ATTENTION, *attention("qwen3", "Qwen3Attention")),
        native={
            "vision": "model.vision_encoder", "projector": "model.vision_projection",
            "vision.patch_embed": "model.vision_encoder.patch_conv",
            **blocks("vision.layers", "model.vision_encoder.transformer.layers", PIXTRAL_BLOCK),
            **text_model("model.language_model"),
        },
    ),
}
