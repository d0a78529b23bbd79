"""A tiny LLaVA-NeXT-Video checkpoint: LLaVA-NeXT's CLIP tower on tiles, a Llama text model, a video pooler.

The builder returns an unsaved (`LlavaNextVideoForConditionalGeneration`,
`LlavaNextVideoProcessor`) pair with random float32 weights (seed the torch
generator first; :func:`envoys.testing.build` does): `llava.clip_tower` (3
blocks, CLS first, 32x32 tiles of 8x8 patches) with LLaVA-NeXT's tiny image
processor (`llava_next.anyres_image_processor`: the grid resolutions
``GRID_PINPOINTS``), a Llama text model as on the ``llava-clip`` checkpoint.
"""

from __future__ import annotations

from transformers import (
    LlamaConfig,
    LlavaNextVideoConfig,
    LlavaNextVideoForConditionalGeneration,
    LlavaNextVideoProcessor,
    LlavaNextVideoVideoProcessor,
)

from .contract import CLIP_ATTENTION, LLAMA_ATTENTION, SIGLIP, Loads, Reads, Row, Sizes, VideoRow, batched, encoder_tower, scatter, text_model
from .llava import PATCH_SIZE, VICUNA_TEMPLATE, clip_tower, vicuna_tokenizer
from .llava_next import GRID_PINPOINTS, TILE_SIZE, anyres_image_processor
from .norms import randomise_norms
from .sizes import text_sizes
from .tokenizer import as_the_processor_takes


def build_llava_next_video() -> tuple[LlavaNextVideoForConditionalGeneration, LlavaNextVideoProcessor]:
    """Imitates llava-hf/LLaVA-NeXT-Video-7B-hf.

    CLIP tower (CLS token first, ``pre_layrnorm``): 3 blocks, width 32, 2
    heads, patch 8 on 32x32 tiles, so 1 + 16 positions per tile. Llama text
    model: 2 layers, width 32, 2 heads, BOS prepended by the tokenizer,
    ``<image>`` and ``<video>`` tokens. The projector reads block -2's output
    without the CLS token (``vision_feature_layer=-2``, strategy
    ``"default"``). Images are tiled as on the ``llava_next`` checkpoint (its
    image processor, LlavaNextImageProcessor, and ``GRID_PINPOINTS``): a 32x32
    image is 3 tiles and 36 image tokens (16 for the base tile, a 4x4 unpadded
    grid, 4 newline rows); a 64 wide, 48 high one is 5 tiles and 70 tokens
    (16 + 6x8 + 6). Videos (LlavaNextVideoVideoProcessor: the shortest edge
    resized to 32, a 32x32 centre crop) are pooled 2x2 (``spatial_pool_mode``
    "average", stride 2) after block -2: 4 ``<video>`` tokens a frame.
    """
    tokenizer = as_the_processor_takes(vicuna_tokenizer(video=True), LlavaNextVideoProcessor)
    config = LlavaNextVideoConfig(
        vision_config=clip_tower(),
        text_config=LlamaConfig(**text_sizes(tokenizer, num_key_value_heads=2)),
        image_token_index=tokenizer.image_token_id,
        video_token_index=tokenizer.video_token_id,
        image_grid_pinpoints=GRID_PINPOINTS,
        vision_feature_layer=-2,
        vision_feature_select_strategy="default",
        spatial_pool_mode="average",
        spatial_pool_stride=2,
        image_seq_length=(TILE_SIZE // PATCH_SIZE) ** 2,
        video_seq_length=(TILE_SIZE // PATCH_SIZE // 2) ** 2 * 8,
        projector_hidden_act="gelu",
    )
    processor = LlavaNextVideoProcessor(
        video_processor=LlavaNextVideoVideoProcessor(
            size={"shortest_edge": TILE_SIZE}, crop_size={"height": TILE_SIZE, "width": TILE_SIZE}
        ),
        image_processor=anyres_image_processor(),
        tokenizer=tokenizer,
        chat_template=VICUNA_TEMPLATE,
        patch_size=PATCH_SIZE,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
    )
    model = LlavaNextVideoForConditionalGeneration(config)
    randomise_norms(model)  # ones and zeros at init: a norm that only standardises
    return model, processor


#: The checkpoints this module builds, by name.
BUILDERS = {"llava_next_video": build_llava_next_video}


#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builders' documented
#: configurations above, never off the code under test.
CONTRACTS = {
    # envoys/testing/llava_next_video.py: llava_next's tiles and pinpoints on llava-clip's CLIP tower (1 + 16 positions, 3
    # blocks); a 32x32 image is 3 tiles and 36 image tokens, a 64 wide, 48 high one 5 tiles and 70; the projector reads
    # block -2 without CLS, per tile, and the host unpads the grid and adds newline rows.
    "llava_next_video": Row(
        loads=Loads(("LlavaNextVideoForConditionalGeneration", "LlavaNextVideoProcessor", "TokenizersBackend")),
        image_tokens=(36, 70),
        sizes=Sizes(num_layers=3, patch_size=8, image_size=32, **SIGLIP),
        stream=batched((3, 17), (5, 17)),
        projected=batched((3, 16), (5, 16)),
        projector_reads=Reads("layer_output", block=-2, drop_first=1),
        prefix=1,
        features_are_projected=False,
        rules=(scatter("llava_next_video"), *CLIP_ATTENTION, *LLAMA_ATTENTION),
        # envoys/testing/llava_next_video.py: the CLIP tower (patch 8, CLS first) on every frame, 1 + 16 rows; block -2's
        # 4x4 patches average-pooled 2x2: 2x2 tokens a frame.
        video=VideoRow(tokens=16, stream=(4, 17, 32), grid=(4, 2, 2)),
        native={
            **encoder_tower("model.vision_tower", norm=False), "projector": "model.multi_modal_projector",
            **text_model("model.language_model"),
        },
    ),
}
