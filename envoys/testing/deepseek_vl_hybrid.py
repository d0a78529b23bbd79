"""A tiny DeepSeek-VL-Hybrid checkpoint: DeepSeek-VL's SigLIP tower and Llama text model, plus a SAM high-res tower.

The builder returns an unsaved (`DeepseekVLHybridForConditionalGeneration`,
`DeepseekVLHybridProcessor`) pair with random float32 weights (seed the torch
generator first; :func:`envoys.testing.build` does). The low-res side is
DeepSeek-VL's (SigLIP, 2 blocks, 8 px patches on 32x32, 16
patches); the high-res tower is SAM's ViT on 64x64 images of 8 px patches (an
8x8 grid): 2 blocks of width 32, 2 heads, block 0 global, block 1 attending
in 3x3 windows (the grid padded to 9x9: 9 windows an image). The stock image
processor (`DeepseekVLHybridImageProcessor`) resizes each image so its longer
side is 64, pads it to a square (``high_res_pixel_values``), then resizes that
to 32x32 (``pixel_values``): 16 image tokens an image, whatever its size.
"""

from __future__ import annotations

import torch
from transformers import (
    DeepseekVLHybridConfig,
    DeepseekVLHybridForConditionalGeneration,
    DeepseekVLHybridImageProcessor,
    DeepseekVLHybridProcessor,
    SamVisionConfig,
)

from .contract import LLAMA_ATTENTION, SIGLIP, SIGLIP_ATTENTION, Loads, Reads, Row, Sizes, batched, encoder_tower, scatter, text_model
from .deepseek import DEEPSEEK_TEMPLATE, deepseek_tokenizer, llama_text
from .llava import IMAGE_SIZE, IMAGE_TOKENS, siglip_tower
from .norms import randomise_norms

HIGH_RES_SIZE = 64
HIGH_RES_PATCH = 8
WINDOW = 3  # does not divide the 8x8 grid: the windowed block pads it to 9x9, as the real 64x64 grid to 70x70 in 14s


def sam_tower() -> SamVisionConfig:
    """SAM's ViT: 2 blocks of width 32, 2 heads, MLP 64 wide, 8 px patches on 64x64 images; block 0 global, block
    1 in 3x3 windows; its neck 8 channels wide. Weights drawn with SigLIP's spread (``initializer_range`` 0.02; SAM's
    default, 1e-10, makes every block's additions vanish next to its stream)."""
    return SamVisionConfig(
        hidden_size=32, output_channels=8, num_hidden_layers=2, num_attention_heads=2, mlp_dim=64,
        image_size=HIGH_RES_SIZE, patch_size=HIGH_RES_PATCH, window_size=WINDOW, global_attn_indexes=[0],
        initializer_range=0.02,
    )  # fmt: skip


def randomise_zero_inits(model: DeepseekVLHybridForConditionalGeneration) -> None:
    """Draw the parameters SAM and the hybrid start at zero: the absolute and relative position embeddings, and
    ``high_res_vision_alpha``, the weight of the global block's path into the high-res features (zero would make
    that path, and any edit of it, a no-op)."""
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith(("pos_embed", "rel_pos_h", "rel_pos_w", "high_res_vision_alpha")):
                parameter.normal_(0.0, 0.5)


def build_deepseek_vl_hybrid() -> tuple[DeepseekVLHybridForConditionalGeneration, DeepseekVLHybridProcessor]:
    """Imitates deepseek-community/deepseek-vl-7b-chat.

    Low-res: `llava.siglip_tower` (2 blocks, width 32, 8 px patches on 32x32,
    ``post_layernorm``). High-res: `sam_tower` on 64x64; the host reads its
    neck's output and the global block 0's output (through its own neck,
    ``high_res_vision_neck``, times ``high_res_vision_alpha``), each brought
    to the low-res 4x4 grid by ``high_res_vision_proj`` (32 channels). The
    aligner projects both to 16 wide each, joins them (high-res first) and
    maps them to the text width 32: 16 image tokens an image. Norms and the
    zero-initialised parameters (`randomise_zero_inits`) are drawn at random.
    """
    tokenizer = deepseek_tokenizer()
    config = DeepseekVLHybridConfig(
        vision_config=siglip_tower().to_dict(),
        high_res_vision_config=sam_tower().to_dict(),
        text_config=llama_text(tokenizer).to_dict(),
        image_token_id=tokenizer.image_token_id,
    )
    # SAM picks its attention class when built: eager, as every load of the saved checkpoint gets (`tiny._save`)
    model = DeepseekVLHybridForConditionalGeneration._from_config(config, attn_implementation="eager")
    randomise_norms(model)
    randomise_zero_inits(model)
    processor = DeepseekVLHybridProcessor(
        image_processor=DeepseekVLHybridImageProcessor(
            size={"height": IMAGE_SIZE, "width": IMAGE_SIZE},
            high_res_size={"height": HIGH_RES_SIZE, "width": HIGH_RES_SIZE},
        ),
        tokenizer=tokenizer,
        chat_template=DEEPSEEK_TEMPLATE,
        num_image_tokens=IMAGE_TOKENS,
    )
    return model, processor


#: The checkpoints this module builds, by name.
BUILDERS = {"deepseek_vl_hybrid": build_deepseek_vl_hybrid}


#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builders' documented
#: configurations above, never off the code under test.
CONTRACTS = {
    # envoys/testing/deepseek_vl_hybrid.py: DeepSeek-VL's SigLIP tower (model.vision) and 16 image tokens an image; the
    # aligner's first argument is its tower_output (the second, the SAM tower's, tests/test_deepseek_vl_hybrid.py); the
    # SAM tower's blocks run the rules of GOT-OCR 2.0's (rewrites/sam_vision.py).
    "deepseek_vl_hybrid": Row(
        loads=Loads(("DeepseekVLHybridForConditionalGeneration", "DeepseekVLHybridProcessor", "TokenizersBackend")),
        image_tokens=(16, 16),
        sizes=Sizes(num_layers=2, patch_size=8, image_size=32, **SIGLIP),
        stream=batched((1, 16), (1, 16)),
        projected=batched((1, 16), (1, 16)),
        projector_reads=Reads("tower_output"),
        final_norm=True,
        rules=(scatter("deepseek_vl_hybrid"), "sam.vision-attention", "sam.vision-windows", *SIGLIP_ATTENTION,
               *LLAMA_ATTENTION),
        native={
            **encoder_tower("model.vision_model"), "projector": "model.aligner", **text_model("model.language_model"),
            "high_res_vision": "model.high_res_vision_model",
            "high_res_vision.patch_embed": "model.high_res_vision_model.vision_encoder.patch_embed",
            "high_res_vision.neck": "model.high_res_vision_model.vision_encoder.neck",
            "high_res_vision.layers": "model.high_res_vision_model.vision_encoder.layers",
            "high_res_vision.layers.*.self_attn": "model.high_res_vision_model.vision_encoder.layers.*.attn",
        },
    ),
}
