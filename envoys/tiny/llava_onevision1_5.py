"""A tiny LLaVA-OneVision-1.5 checkpoint (model_type llava_onevision1_5): a packed RICE ViT with a CLS row before
each image's (each frame's) patches, on a Qwen3 text model.

The builder returns a randomly initialised float32 model and the stock
processor (``Exaone4_5_Processor``, as transformers maps the model_type, over
Qwen2-VL's image and video processors), with the Qwen-VL builders' tokenizer,
chat template and pixel bounds (`envoys.tiny.qwen`). The tower takes one frame
per patch (no temporal patch), so both processors use ``temporal_patch_size``
1: a video's frames are its temporal units. Tower: 2 blocks, width 32, 2 heads
of 16, GELU MLP 64 wide, patch 8, merge 2x2, merger to the text width 32; so a
32x32 image is 16 patches (17 rows in the blocks, its CLS first) and 4 image
tokens, 48x64 is 48 patches (49 rows) and 12 tokens. Text: 2 Qwen3 blocks,
width 32. The CLS embedding and its rotary angle are drawn at random, as every
norm weight (`randomise_norms`).
"""

from __future__ import annotations

import torch
from transformers import (
    Exaone4_5_Processor,
    LlavaOnevision15Config,
    LlavaOnevision15ForConditionalGeneration,
    PreTrainedModel,
    ProcessorMixin,
    Qwen2VLVideoProcessor,
)

from .norms import randomise_norms
from .qwen import (
    CHAT_TEMPLATE,
    MERGE,
    OPENAI_CLIP_MEAN,
    OPENAI_CLIP_STD,
    _image_processor,
    _text,
    _token_ids,
    _tokenizer,
    _video_processor,
)
from .rope import rope

PATCH = 8


def build_llava_onevision1_5() -> tuple[PreTrainedModel, ProcessorMixin]:
    """Imitates lmms-lab/LLaVA-OneVision-1.5-8B-Instruct: the module docstring's tower and text model."""
    tokenizer = _tokenizer()
    config = LlavaOnevision15Config(
        text_config={"model_type": "qwen3", **_text(tokenizer, **rope(1_000_000.0))},
        vision_config={
            "depth": 2,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 2,
            "hidden_act": "gelu",
            "patch_size": PATCH,
            "spatial_merge_size": MERGE,
            "out_hidden_size": 32,
        },
        **_token_ids(tokenizer),
    )
    processor = Exaone4_5_Processor(
        image_processor=_image_processor(PATCH, OPENAI_CLIP_MEAN, OPENAI_CLIP_STD, temporal=1),
        tokenizer=tokenizer,
        video_processor=_video_processor(Qwen2VLVideoProcessor, PATCH, OPENAI_CLIP_MEAN, OPENAI_CLIP_STD, temporal=1),
        chat_template=CHAT_TEMPLATE,
    )
    model = LlavaOnevision15ForConditionalGeneration(config)
    randomise_norms(model)
    with torch.no_grad():  # the CLS row and its rotary angle, so that they differ from every patch row
        embeddings = model.model.visual.cls_embeddings
        embeddings.class_embedding.normal_()
        embeddings.class_pos_emb.uniform_(-1.0, 1.0)
    return model, processor


#: The checkpoints this module builds, by name.
BUILDERS = {"llava_onevision1_5": build_llava_onevision1_5}
