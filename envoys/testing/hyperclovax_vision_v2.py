"""A tiny HyperCLOVAX Vision v2 checkpoint: Qwen2.5-VL's tower, a linear projector, a HyperCLOVAX text model.

The tower is the tiny Qwen2.5-VL's (`envoys.testing.qwen.qwen2_5_vl_vision`):
2 blocks, width 32, 2 heads, SiLU MLP 64 wide, patch 4, ``window_size`` 16
px (2x2 merge units), block 0 windowed and block 1 full attention, its merger
to ``out_hidden_size`` 24 (not the text width, so the projector, a linear from
24 to 32, changes the width). The processor is transformers'
``HyperCLOVAXVisionV2Processor`` on Qwen-VL's image and video processors (as
the auto classes map the model_type), with the Qwen pixel bounds of
`envoys.testing.qwen`: a 32x32 image is 64 patches in 4 windows and 16 image
tokens; a 48 (high) x 64 (wide) one is 192 patches in 12 windows and 48
tokens. The tokenizer is the byte-level BPE of `envoys.testing.qwen` (with Qwen's
chat markers; ``<|image_pad|>`` is the processor's default image token): a
saved HyperCLOVAX Vision v2 tokenizer loads back as a ``GPT2Tokenizer``, which
transformers rebuilds from the vocabulary and merges, as the real one is.
"""

from __future__ import annotations

from transformers import (
    GPT2Tokenizer,
    HyperCLOVAXConfig,
    HyperCLOVAXVisionV2Config,
    HyperCLOVAXVisionV2ForConditionalGeneration,
    HyperCLOVAXVisionV2Processor,
    Qwen2VLVideoProcessor,
)

from .contract import PER_IMAGE_PATTERN, QWEN_VIT_BLOCK, SIGLIP, TEXT_BLOCK, Loads, Row, Sizes, attention, blocks, flat, packed, scatter, text_model
from .norms import randomise_norms
from .qwen import (
    CHAT_TEMPLATE,
    OPENAI_CLIP_MEAN,
    OPENAI_CLIP_STD,
    QWEN2_5_VL_PATCH,
    _image_processor,
    _text,
    _token_ids,
    _tokenizer,
    _video_processor,
    qwen2_5_vl_vision,
)

#: The text model's MuP scales: the token embeddings are multiplied by EMBEDDING_MULTIPLIER before the first
#: block, the head's output by LOGITS_SCALING.
EMBEDDING_MULTIPLIER = 10.0
LOGITS_SCALING = 0.125


def build_hyperclovax_vision_v2() -> tuple[HyperCLOVAXVisionV2ForConditionalGeneration, HyperCLOVAXVisionV2Processor]:
    """Imitates naver-hyperclovax/HyperCLOVAX-SEED-Think-32B.

    Tower: the tiny Qwen2.5-VL's, merger to 24 wide; projector: a linear from 24
    to the text width 32. Text (HyperCLOVAX): 2 layers, width 32, 2 query heads
    / 1 key-value head of dim 16, gated SiLU MLP 64 wide, Peri-LN blocks
    (``use_post_norm``: ``post_norm1`` after the attention, ``post_norm2`` after
    the MLP), ``embedding_multiplier`` 10 and ``logits_scaling`` 0.125 (MuP),
    ``residual_multiplier`` 1 (the config's default; with another value the
    blocks' attention_output and mlp_output are Unavailable, see the family),
    tied embeddings. Every norm's weight is drawn (`randomise_norms`).
    """
    tokenizer = _tokenizer(byte_level=True, tokenizer_class=GPT2Tokenizer)
    ids = _token_ids(tokenizer)
    text = HyperCLOVAXConfig(**_text(
        tokenizer,
        head_dim=16,
        embedding_multiplier=EMBEDDING_MULTIPLIER,
        logits_scaling=LOGITS_SCALING,
        use_post_norm=True,
        tie_word_embeddings=True,
    ))
    config = HyperCLOVAXVisionV2Config(
        text_config=text.to_dict(),
        vision_config={"model_type": "qwen2_5_vl_vision", **qwen2_5_vl_vision(out_hidden_size=24)},
        image_token_id=ids["image_token_id"],
        video_token_id=ids["video_token_id"],
        tie_word_embeddings=True,
    )
    model = HyperCLOVAXVisionV2ForConditionalGeneration(config)
    randomise_norms(model)
    processor = HyperCLOVAXVisionV2Processor(
        image_processor=_image_processor(QWEN2_5_VL_PATCH, OPENAI_CLIP_MEAN, OPENAI_CLIP_STD),
        tokenizer=tokenizer,
        video_processor=_video_processor(Qwen2VLVideoProcessor, QWEN2_5_VL_PATCH, OPENAI_CLIP_MEAN, OPENAI_CLIP_STD),
        chat_template=CHAT_TEMPLATE,
    )
    return model, processor


#: The checkpoints this module builds, by name.
BUILDERS = {"hyperclovax_vision_v2": build_hyperclovax_vision_v2}


#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builders' documented
#: configurations above, never off the code under test.
CONTRACTS = {
    # envoys/testing/hyperclovax_vision_v2.py: the tiny Qwen2.5-VL tower (patch 4: 32x32 is 64 patches and 16 tokens, 48x64
    # is 192 and 48, windowed block 0, full block 1), its merger inside it; the projector, a linear after the tower,
    # reads the merger's output restored to merge-block order (test_hyperclovax_vision_v2.py); the text model
    # multiplies the embeddings by 10 (embedding_multiplier).
    "hyperclovax_vision_v2": Row(
        loads=Loads(("HyperCLOVAXVisionV2ForConditionalGeneration", "HyperCLOVAXVisionV2Processor", "GPT2Tokenizer")),
        image_tokens=(16, 48),
        sizes=Sizes(num_layers=2, patch_size=4, image_size="image_grid_thw", **SIGLIP),
        stream=packed(64, 192),
        projected=flat((1, 16), (1, 48)),
        projector_reads=None,
        pattern=PER_IMAGE_PATTERN,
        embedding_multiplier=10.0,
        rules=(scatter("hyperclovax_vision_v2"), "qwen2_5_vl.vision-attention", "qwen2_5_vl.eager-attention",
               "qwen2_5_vl.vision-windows",
               *attention("hyperclovax", "HyperCLOVAXAttention")),
        native={
            "vision": "model.vision_model", "projector": "model.projector",
            "vision.patch_embed": "model.vision_model.patch_embed",
            **blocks("vision.layers", "model.vision_model.blocks", {**QWEN_VIT_BLOCK, "mlp.up_proj": "mlp.up_proj",
                "mlp.down_proj": "mlp.down_proj"}),
            **text_model("model.language_model", {**TEXT_BLOCK, "attention_output_norm": "post_norm1",
                "mlp_output_norm": "post_norm2"}),
            "vision.merger": "model.vision_model.merger",
        },
    ),
}
