"""A tiny EXAONE 4.5 checkpoint (model_type exaone4_5): Qwen2.5-VL's windowed tower with grouped key-value heads and a
fused ``qkv``, on an EXAONE 4.0 text model.

The builder returns a randomly initialised float32 model and the stock
processor (``Exaone4_5_Processor`` over Qwen2-VL's image and video processors,
as EXAONE 4.5's checkpoints name them), with the Qwen-VL builders' tokenizer,
chat template and pixel bounds (`envoys.testing.qwen`). Tower: 2 blocks, width
32, 2 query heads and 1 key-value head of 16, SiLU MLP 64 wide (with biases),
patch 4 (``temporal_patch_size`` 2), ``window_size`` 16 px = 2x2 merge units =
4x4 patches, block 0 windowed and block 1 full attention
(``fullatt_block_indexes`` [1]), merger to the text width 32; so 32x32 is 64
patches in 4 windows and 16 image tokens, 48x64 is 192 patches in 12 windows
and 48 tokens. Text: 2 EXAONE 4.0 blocks (norms after each sublayer, none
before), width 32, 2 query heads / 1 key-value head of 16, MLP 64 wide, block 0
sliding-window attention (window 4096) and block 1 global. Norm weights are
drawn at random (`randomise_norms`).
"""

from __future__ import annotations

from transformers import (
    Exaone4_5_Config,
    Exaone4_5_ForConditionalGeneration,
    Exaone4_5_Processor,
    PreTrainedModel,
    ProcessorMixin,
    Qwen2VLVideoProcessor,
)

from .contract import PER_IMAGE_PATTERN, QWEN_VIT_BLOCK, SIGLIP, Loads, Reads, Row, Sizes, attention, blocks, flat, packed, scatter, text_model
from .norms import randomise_norms
from .qwen import CHAT_TEMPLATE, HALF, MERGE, _image_processor, _text, _token_ids, _tokenizer, _video_processor
from .rope import rope

PATCH = 4


def build_exaone4_5() -> tuple[PreTrainedModel, ProcessorMixin]:
    """Imitates LGAI-EXAONE/EXAONE-4.5: the module docstring's tower and text model, ``Exaone4_5_Processor``."""
    tokenizer = _tokenizer()
    ids = _token_ids(tokenizer)
    config = Exaone4_5_Config(
        text_config={"model_type": "exaone4", **_text(tokenizer, **rope(1_000_000.0), sliding_window_pattern=2)},
        vision_config={
            "depth": 2,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 2,
            "num_key_value_heads": 1,
            "hidden_act": "silu",
            "patch_size": PATCH,
            "spatial_merge_size": MERGE,
            "temporal_patch_size": 2,
            "window_size": 16,
            "fullatt_block_indexes": [1],
            "out_hidden_size": 32,
        },
        image_token_id=ids["image_token_id"],
        video_token_id=ids["video_token_id"],
    )
    processor = Exaone4_5_Processor(
        image_processor=_image_processor(PATCH, HALF, HALF),
        tokenizer=tokenizer,
        video_processor=_video_processor(Qwen2VLVideoProcessor, PATCH, HALF, HALF),
        chat_template=CHAT_TEMPLATE,
    )
    model = Exaone4_5_ForConditionalGeneration(config)
    randomise_norms(model)
    return model, processor


#: The checkpoints this module builds, by name.
BUILDERS = {"exaone4_5": build_exaone4_5}


#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builders' documented
#: configurations above, never off the code under test.
CONTRACTS = {
    # envoys/testing/exaone4_5.py: Qwen2.5-VL's windowed tower (patch 4, 16 px windows, block 1 full attention, 2 query
    # heads and 1 key-value head): 32x32 is 64 patches and 16 tokens, 48x64 is 192 and 48; blocks and merger in window
    # order, restored after the merger; EXAONE 4.0 text blocks, normed after each sublayer (sliding, then global).
    "exaone4_5": Row(
        loads=Loads(("Exaone4_5_ForConditionalGeneration", "Exaone4_5_Processor", "TokenizersBackend")),
        image_tokens=(16, 48),
        sizes=Sizes(num_layers=2, patch_size=4, image_size="image_grid_thw", **SIGLIP),
        stream=packed(64, 192),
        projected=flat((1, 16), (1, 48)),
        projector_reads=Reads("layer_output", block=-1, unbatched=True),
        pattern=PER_IMAGE_PATTERN,
        features_are_projected=False,
        rules=(scatter("exaone4_5"), "exaone4_5.vision-attention", "exaone4_5.eager-attention", "exaone4_5.vision-windows",
               *attention("exaone4", "Exaone4Attention")),
        native={
            "vision": "model.visual", "projector": "model.visual.merger",
            "vision.patch_embed": "model.visual.patch_embed",
            **blocks("vision.layers", "model.visual.blocks", {**QWEN_VIT_BLOCK, "mlp.up_proj": "mlp.up_proj",
                "mlp.down_proj": "mlp.down_proj"}),
            **text_model("model.language_model", {"self_attn": "self_attn", "mlp": "mlp",
                "attention_output_norm": "post_attention_layernorm", "mlp_output_norm": "post_feedforward_layernorm"}),
        },
    ),
}
