"""A tiny LLaVA-OneVision-1.5 checkpoint (model_type llava_onevision1_5): a packed RICE ViT with a CLS row before
each image's (each frame's) patches, on a Qwen3 text model.

The builder returns a randomly initialised float32 model and the stock
processor (``Exaone4_5_Processor``, as transformers maps the model_type, over
Qwen2-VL's image and video processors), with the Qwen-VL builders' tokenizer,
chat template and pixel bounds (`envoys.testing.qwen`). The tower takes one frame
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

from .contract import NO_WINDOWS, PER_IMAGE_PATTERN, QWEN_VIT_BLOCK, Loads, Row, Sizes, VideoRow, attention, blocks, flat, packed, scatter, text_model
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


#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builders' documented
#: configurations above, never off the code under test.
CONTRACTS = {
    # envoys/testing/llava_onevision1_5.py: the Qwen ViT's layout, patch 8, 2x2 merge: 32x32 is 16 patches and 4 tokens,
    # 48x64 is 48 and 12; a CLS row before each image's patches in the blocks (dropped after the last one, so
    # tower_output, the merger's input, has none); GELU MLP 64 wide; Qwen3 text blocks.
    "llava_onevision1_5": Row(
        loads=Loads(("LlavaOnevision15ForConditionalGeneration", "Exaone4_5_Processor", "TokenizersBackend")),
        image_tokens=(4, 12),
        sizes=Sizes(num_layers=2, vision_hidden_size=32, num_heads=2, head_dim=16, intermediate_size=64, patch_size=8,
                    image_size="image_grid_thw"),
        stream=packed(1 + 16, 1 + 48),
        projected=flat((1, 4), (1, 12)),
        projector_reads=None,  # the last block's output without each image's CLS row (tests/test_llava_onevision1_5.py)
        prefix=1,
        drops_prefix=True,
        pattern=PER_IMAGE_PATTERN,
        vision_unavailable=NO_WINDOWS,
        rules=(scatter("llava_onevision1_5"), "llava_onevision1_5.vision-attention", "llava_onevision1_5.eager-attention",
               *attention("qwen3", "Qwen3Attention")),
        # envoys/testing/llava_onevision1_5.py: patch 8, one frame a temporal unit, merge 2x2: 4 units of 4x4 patches (64),
        # each after its CLS row in the blocks (68 rows), and 2x2 tokens each (16).
        video=VideoRow(tokens=16, stream=(1, 4 + 64, 32), grid=(4, 2, 2), tower=(1, 64, 32)),
        native={
            "vision": "model.visual", "projector": "model.visual.merger",
            "vision.patch_embed": "model.visual.patch_embed",
            **blocks("vision.layers", "model.visual.blocks", {**QWEN_VIT_BLOCK, "mlp.up_proj": "mlp.fc1",
                "mlp.down_proj": "mlp.fc2"}),
            **text_model("model.language_model"),
        },
    ),
}
