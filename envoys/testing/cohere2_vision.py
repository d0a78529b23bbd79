"""A tiny Cohere 2 Vision checkpoint: Aya Vision's tiles, tower and text model (`envoys.testing.tiles`, `envoys.testing.cohere`), its own
projector and processor.

The builder returns an unsaved (`Cohere2VisionForConditionalGeneration`,
`Cohere2VisionProcessor`) pair with random float32 weights (seed the torch
generator first; :func:`envoys.testing.build` does). Sizes are Aya Vision's:
32 pixel tiles of 4 pixel patches (64 a tile), 16 image tokens a tile after
the 2x2 pixel shuffle, up to 4 tiles and a thumbnail; the image processor's
own canvas rule tiles a 32x32 image as 1 tile (16 tokens), a 64 wide x 48 high
one as 2x2 + the thumbnail (80), a 64 wide x 32 high one as 2x1 + the
thumbnail (48).
"""

from __future__ import annotations

from transformers import (
    Cohere2VisionConfig,
    Cohere2VisionForConditionalGeneration,
    Cohere2VisionImageProcessor,
    Cohere2VisionProcessor,
)

from .cohere import IMAGE_TOKENS, cohere2_text, cohere_template, cohere_tokenizer
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
from .tiles import DOWNSAMPLE, MAX_TILES, TILE, TOKENS_PER_TILE, siglip_tiles


def build_cohere2_vision() -> tuple[Cohere2VisionForConditionalGeneration, Cohere2VisionProcessor]:
    """Imitates CohereLabs/command-a-vision-07-2025 (its 512 pixel tiles of 16 pixel patches, 256 tokens a tile, up
    to 12 tiles).

    SigLIP tower (no CLS, ``post_layernorm`` over the patches): 2 blocks,
    width 32, 2 heads, patch 4 on 32x32 tiles, 64 patches. The projector reads
    ``last_hidden_state`` (after ``post_layernorm``), pixel-shuffles each tile
    2x2 to 16 tokens and maps each block's 128 features to 32 with a SwiGLU
    (``alignment_intermediate_size`` 64, 32 after the gate). Cohere 2 text
    model: `envoys.testing.cohere.cohere2_text`. Every norm's weight and bias
    are drawn at random. The chat template writes one ``<|IMG_PATCH|>`` per
    image, which the processor expands to ``<|START_OF_IMG|>``, 16
    ``<|IMG_PATCH|>`` + ``<|IMG_LINE_BREAK|>`` per tile (the thumbnail last),
    ``<|END_OF_IMG|>``; the image processor's ``patch_size`` is image tokens a
    tile side, 4 (the checkpoint's 16).
    """
    template = cohere_template(IMAGE_TOKENS["image_token"])
    tokenizer = cohere_tokenizer(dict(IMAGE_TOKENS), template)
    config = Cohere2VisionConfig(
        vision_config=siglip_tiles(),
        text_config=cohere2_text(tokenizer),
        image_token_id=tokenizer.image_token_id,
        downsample_factor=DOWNSAMPLE,
        alignment_intermediate_size=64,
    )
    processor = Cohere2VisionProcessor(
        image_processor=Cohere2VisionImageProcessor(
            size={"height": TILE, "width": TILE}, patch_size=int(TOKENS_PER_TILE**0.5), min_patches=1,
            max_patches=MAX_TILES,
        ),
        tokenizer=tokenizer,
        chat_template=template,
    )
    model = Cohere2VisionForConditionalGeneration(config)
    randomise_norms(model)
    return model, processor


#: The checkpoints this module builds, by name.
BUILDERS = {"cohere2_vision": build_cohere2_vision}


#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builders' documented
#: configurations above, never off the code under test.
CONTRACTS = {
    # envoys/testing/cohere2_vision.py: Aya Vision's sizes and tiling; the projector reads tower_output (after the norm).
    "cohere2_vision": Row(
        loads=Loads(("Cohere2VisionForConditionalGeneration", "Cohere2VisionProcessor", "TokenizersBackend")),
        image_tokens=(16, 80),
        sizes=Sizes(num_layers=2, patch_size=4, image_size=32, **SIGLIP),
        stream=batched((1, 64), (5, 64)),
        projected=square((1, 16), (5, 16)),
        projector_reads=Reads("tower_output"),
        final_norm=True,
        rules=(scatter("cohere2_vision"), *SIGLIP_ATTENTION, *COHERE2_ATTENTION),
        native={
            **encoder_tower("model.vision_tower"), "projector": "model.multi_modal_projector",
            **text_model("model.language_model", {**TEXT_BLOCK, "post_attention_layernorm": "input_layernorm"}),
        },
    ),
}
