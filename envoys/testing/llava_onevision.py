"""A tiny LLaVA-OneVision checkpoint: a SigLIP tower on anyres tiles, a two-layer projector, a Qwen2 text model.

The builder returns an unsaved (`LlavaOnevisionForConditionalGeneration`,
`LlavaOnevisionProcessor`) pair with random float32 weights (seed the torch
generator first; :func:`envoys.testing.build` does). Tiles are 32x32 with 8x8
patches, so 16 patches and 16 image tokens a tile; the grid resolutions
(``image_grid_pinpoints``) are every canvas of 1 to 6 tiles a side, as the
checkpoint's (36 of them, in 32 pixel tiles instead of 384), so an image alone
in its prompt is a base tile plus the grid tiles of the best canvas for its
size, and a large one's feature grid is shrunk (``vision_aspect_ratio``
"anyres_max_9": more than about 1.1 x 9 tiles' worth of patches).
"""

from __future__ import annotations

from transformers import (
    LlavaOnevisionConfig,
    LlavaOnevisionForConditionalGeneration,
    LlavaOnevisionImageProcessor,
    LlavaOnevisionProcessor,
    LlavaOnevisionVideoProcessor,
)

from .contract import SIGLIP, SIGLIP_ATTENTION, Loads, Reads, Row, Sizes, VideoRow, attention, batched, encoder_tower, scatter, text_model
from .llava import IMAGE_SIZE as TILE
from .llava import INTERLEAVE_TEMPLATE, interleave_tokenizer, qwen2_text, siglip_tower
from .llava import PATCH_SIZE as PATCH
from .norms import randomise_norms

TOKENS_PER_TILE = (TILE // PATCH) ** 2  # 16
#: The resolutions, (height, width) in pixels, an image may be resized and padded to: 1 to 6 tiles a side.
GRID_PINPOINTS = [[TILE * rows, TILE * columns] for rows in range(1, 7) for columns in range(1, 7)]


def build_llava_onevision() -> tuple[LlavaOnevisionForConditionalGeneration, LlavaOnevisionProcessor]:
    """Imitates llava-hf/llava-onevision-qwen2-0.5b-ov-hf (its 384 pixel tiles of 14 pixel patches, 729 tokens a tile).

    SigLIP tower (`envoys.testing.llava.siglip_tower`: no CLS, no pooling head,
    ``post_layernorm`` over the patches): 2 blocks, width 32, 2 heads, patch 8
    on 32x32 tiles, 16 patches. The projector reads the last block's output
    (``vision_feature_layer`` -1, strategy "full", before ``post_layernorm``),
    every patch, so a tile gives 16 features. Qwen2 text model
    (`envoys.testing.llava.qwen2_text`): 2 layers, width 32, 2 query heads / 1
    key-value head, tied embeddings. Every norm's weight and bias are drawn at
    random. The processor counts an image's tokens as the host packs them: a
    32x32 image is 2 tiles (the base tile and a 1x1 grid) and 36 tokens (16 +
    4x4 + 4 newline rows); a 64 wide, 48 high one 5 tiles (a 2x2 grid) and 70
    tokens (16 + 6x8 + 6: the padding's rows cropped); a 200 wide, 100 high one
    19 tiles (a 3x6 grid) and 152 tokens (16 + 8x16 + 8: its 12x24 feature grid
    shrunk by the interpolation). An image among several in one prompt
    (``images=[[a, b]]``) is one tile and 17 tokens (16 + 1 newline).

    Videos: the template writes ``<video>`` on its own line for a video entry
    (``video_token_index``). The video processor keeps every frame (no
    sampling), resizes each to one 32x32 tile (any size, no grid) and
    normalises it as the image processor does; the host runs the same tower
    on the frames, projects them, pools each frame's 4x4 features 2x2
    (bilinear) to 2x2 and appends one ``image_newline`` after the whole video,
    so a video of F frames is 4F + 1 tokens (4 frames: 17).
    """
    tokenizer = interleave_tokenizer(video=True)
    config = LlavaOnevisionConfig(
        vision_config=siglip_tower(),
        text_config=qwen2_text(tokenizer),
        image_token_index=tokenizer.image_token_id,
        video_token_index=tokenizer.video_token_id,
        image_grid_pinpoints=GRID_PINPOINTS,
        vision_feature_layer=-1,
        vision_feature_select_strategy="full",
        vision_aspect_ratio="anyres_max_9",
        tie_word_embeddings=True,
    )
    processor = LlavaOnevisionProcessor(
        image_processor=LlavaOnevisionImageProcessor(
            size={"height": TILE, "width": TILE},
            image_grid_pinpoints=GRID_PINPOINTS,
            image_mean=[0.5, 0.5, 0.5],
            image_std=[0.5, 0.5, 0.5],
        ),
        tokenizer=tokenizer,
        video_processor=LlavaOnevisionVideoProcessor(
            size={"height": TILE, "width": TILE}, image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5]
        ),
        num_image_tokens=TOKENS_PER_TILE,
        vision_feature_select_strategy="full",
        vision_aspect_ratio="anyres_max_9",
        chat_template=INTERLEAVE_TEMPLATE,
    )
    model = LlavaOnevisionForConditionalGeneration(config)
    randomise_norms(model)
    return model, processor


#: The checkpoints this module builds, by name.
BUILDERS = {"llava_onevision": build_llava_onevision}


#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builders' documented
#: configurations above, never off the code under test.
CONTRACTS = {
    # envoys/testing/llava_onevision.py: SigLIP on 32x32 tiles of 8 px patches (16 positions, no CLS), 2 blocks,
    # post_layernorm; a 32x32 image is 2 tiles (base + 1x1 grid) and 36 image tokens (16 + 4x4 + 4 newlines), a 64 wide,
    # 48 high one 5 tiles (base + 2x2) and 70 (16 + 6x8 + 6); the projector reads the last block before the norm, every
    # patch, per tile, and the host unpads the grid and adds newline rows, so image_features is not its output.
    "llava_onevision": Row(
        loads=Loads(("LlavaOnevisionForConditionalGeneration", "LlavaOnevisionProcessor", "TokenizersBackend")),
        image_tokens=(36, 70),
        sizes=Sizes(num_layers=2, patch_size=8, image_size=32, **SIGLIP),
        stream=batched((2, 16), (5, 16)),
        projected=batched((2, 16), (5, 16)),
        projector_reads=Reads("layer_output", block=-1),
        final_norm=True,
        features_are_projected=False,
        rules=(scatter("llava_onevision"), *SIGLIP_ATTENTION, *attention("qwen2", "Qwen2Attention")),
        # envoys/testing/llava_onevision.py: SigLIP (patch 8, no CLS) on every frame, 16 rows; pooled 2x2 to 2x2 tokens a
        # frame, then one image_newline after the last frame (16 + 1 tokens; the newline is on no frame's grid).
        video=VideoRow(tokens=17, stream=(4, 16, 32), grid=(4, 2, 2)),
        native={
            **encoder_tower("model.vision_tower"), "projector": "model.multi_modal_projector",
            **text_model("model.language_model"),
        },
    ),
}
