"""A tiny Video-LLaVA checkpoint: LLaVA 1.5's CLIP tower twice (images and videos), a Llama text model.

The builder returns an unsaved (`VideoLlavaForConditionalGeneration`,
`VideoLlavaProcessor`) pair with random float32 weights (seed the torch
generator first; :func:`envoys.testing.build` does): `llava.clip_tower` (3
blocks, CLS first, 32x32 images of 8x8 patches) as both the image tower and
the video tower, and a Llama text model as on the ``llava-clip`` checkpoint.
"""

from __future__ import annotations

from transformers import (
    LlamaConfig,
    VideoLlavaConfig,
    VideoLlavaForConditionalGeneration,
    VideoLlavaImageProcessor,
    VideoLlavaProcessor,
    VideoLlavaVideoProcessor,
)

from .contract import CLIP_ATTENTION, LLAMA_ATTENTION, SIGLIP, Loads, Reads, Row, Sizes, VideoRow, batched, encoder_tower, scatter, text_model
from .llava import IMAGE_SIZE, IMAGE_TOKENS, PATCH_SIZE, VICUNA_TEMPLATE, clip_tower, vicuna_tokenizer
from .norms import randomise_norms
from .sizes import text_sizes

#: Resize the shortest edge to 32, then centre-crop 32x32: the image processor's and the video processor's sizes.
CLIP_SIZES = {"size": {"shortest_edge": IMAGE_SIZE}, "crop_size": {"height": IMAGE_SIZE, "width": IMAGE_SIZE}}


def build_video_llava() -> tuple[VideoLlavaForConditionalGeneration, VideoLlavaProcessor]:
    """Imitates LanguageBind/Video-LLaVA-7B-hf.

    Two CLIP towers of one config (CLS first, ``pre_layrnorm``): 3 blocks,
    width 32, 2 heads, patch 8 on 32x32 images, so 1 + 16 positions an image
    (or a video frame). Llama text model: 2 layers, width 32, 2 heads, BOS
    prepended by the tokenizer, ``<image>`` and ``<video>`` tokens. The
    projector reads block -2's output without the CLS token
    (``vision_feature_layer=-2``, strategy ``"default"``), so an image gives
    16 features and the processor writes 16 + 1 (``num_additional_image_tokens``)
    - 1 = 16 ``<image>`` tokens. The stock processor: VideoLlavaImageProcessor
    and VideoLlavaVideoProcessor both resize the shortest edge to 32 and
    centre-crop 32x32; the image processor returns the images as
    ``pixel_values_images`` (its legacy output, the default in 5.24). A video
    of ``frames`` frames is ``frames * 17`` ``<video>`` tokens (the CLS kept).
    """
    tokenizer = vicuna_tokenizer(video=True)
    config = VideoLlavaConfig(
        vision_config=clip_tower(),
        text_config=LlamaConfig(**text_sizes(tokenizer, num_key_value_heads=2)),
        image_token_index=tokenizer.image_token_id,
        video_token_index=tokenizer.video_token_id,
        image_seq_length=IMAGE_TOKENS,
        video_seq_length=8 * (IMAGE_TOKENS + 1),
        vision_feature_layer=-2,
        vision_feature_select_strategy="default",
        projector_hidden_act="gelu",
    )
    processor = VideoLlavaProcessor(
        image_processor=VideoLlavaImageProcessor(**CLIP_SIZES),
        video_processor=VideoLlavaVideoProcessor(**CLIP_SIZES),
        tokenizer=tokenizer,
        patch_size=PATCH_SIZE,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        chat_template=VICUNA_TEMPLATE,
    )
    model = VideoLlavaForConditionalGeneration(config)
    randomise_norms(model)  # ones and zeros at init: a norm that only standardises
    return model, processor


#: The checkpoints this module builds, by name.
BUILDERS = {"video_llava": build_video_llava}


#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builders' documented
#: configurations above, never off the code under test.
CONTRACTS = {
    # envoys/testing/video_llava.py: llava-clip's CLIP tower (1 + 16 positions, 3 blocks) as the image tower, its
    # processor's sizes (32x32 crops, 16 image tokens an image); the projector reads block -2 without its CLS token and
    # the host scatters its output as it is.
    "video_llava": Row(
        loads=Loads(("VideoLlavaForConditionalGeneration", "VideoLlavaProcessor", "TokenizersBackend")),
        image_tokens=(16, 16),
        sizes=Sizes(num_layers=3, patch_size=8, image_size=32, **SIGLIP),
        stream=batched((1, 17), (1, 17)),
        projected=batched((1, 16), (1, 16)),
        projector_reads=Reads("layer_output", block=-2, drop_first=1),
        prefix=1,
        rules=(scatter("video_llava"), *CLIP_ATTENTION, *LLAMA_ATTENTION),
        # envoys/testing/video_llava.py: the video tower (CLIP, patch 8) on every frame, CLS kept: 17 tokens a frame, the
        # CLS on no grid cell.
        video=VideoRow(tokens=68, stream=(4, 17, 32), grid=(4, 4, 4)),
        native={
            **encoder_tower("model.image_tower", norm=False), "projector": "model.multi_modal_projector",
            **text_model("model.language_model"), "video": "model.video_tower",
        },
    ),
}
