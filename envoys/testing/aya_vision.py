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

Its tiles and tower are `envoys.testing.tiles`', its tokenizer, template and
text model `envoys.testing.cohere`'s.
"""

from __future__ import annotations

from transformers import (
    AyaVisionConfig,
    AyaVisionForConditionalGeneration,
    AyaVisionProcessor,
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
from .tiles import DOWNSAMPLE, PATCH, TILE, gotocr2_tiles, siglip_tiles


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
