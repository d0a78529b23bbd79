"""A tiny DeepSeek-OCR 2 checkpoint: a SAM encoder with its neck, then a Qwen2-style decoder over the SAM grid and
learned queries, run twice in one forward (each image's global view, then the local crops of the images the processor
crops), on a mixture-of-experts text model.

The builder returns an unsaved (`DeepseekOcr2ForConditionalGeneration`,
`DeepseekOcr2Processor`) pair with random float32 weights.

The sizes are the real ones over 4: the decoder's learned queries are fixed
tables, 256 rows for a view of more than 144 folded cells and 144 for a
smaller one (``DeepseekOcr2VisionModel`` names them for 1024 px and 768 px),
so the global view is `GLOBAL` = 256 px and a crop `TILE` = 192 px, with a
SAM patch of `PATCH` = 4 (the processor's ``patch_size`` 4 and
``downsample_ratio`` 4 count the tokens as the model makes them).

The SAM stack: 2 blocks of width 32, 2 heads of 16, an MLP 64 wide
(``mlp_dim``), an absolute position grid of 64x64 (``image_size`` 256);
block 0 attends in windows of 8x8 patches, block 1 globally
(``global_attn_indexes`` [1]). Its neck maps to 16 channels, and two stride-2
convolutions fold the grid 4x per side to 24, then 32 channels; its weights
are drawn with ``initializer_range`` 0.02 (the SAM config's default, 1e-10,
makes its output vanish). So a view is 64x64 = 4096 SAM patches and 16x16 =
256 folded patches, followed by 256 queries (512 decoder rows); a crop
48x48 = 2304 SAM patches, 12x12 = 144 folded patches and 144 queries (288
rows). The decoder: 2 blocks of width 32, 2 query heads and 1 key-value head
of 16, an MLP 64 wide, full attention. The projector maps 32 to the text
width.

The image processor (``DeepseekOcr2ImageProcessor``: global view 256 px,
padded to a square; crops of 192 px on the canvas of 2 to 6 crops closest to
the image's aspect ratio) cuts an image whose longer side is over 192 px: the
32x32 test image makes none, the `SECOND` = 256 (wide) x 128 (high) one 2
columns x 1 row. Tokens: each crop's
144 queries, then the view's 256, then one separator: 257 and 2 * 144 + 257 =
545.

The text model: 2 blocks of width 32, 2 query and 2 key-value heads of 16;
block 0 a dense MLP 64 wide, block 1 a mixture of `EXPERTS` = 4 experts,
`TOP_K` = 2 a token (softmax router, greedy top-k), 32 wide, plus 1 shared
expert. The LayerNorms (the SAM stack's, the neck's) are drawn from U(0.5,
1.5) and the RMSNorms too (`randomise_norms`); the host's ``view_separator``,
the SAM position grid and relative position tables (zero at init) from
N(0, 1), N(0, 1) and N(0, 0.1).

The tokenizer is word-level (`envoys.testing.tokenizer`), DeepSeek's
begin/end tokens, ``<image>``, and a short chat template.
"""

from __future__ import annotations

import torch
from transformers import (
    DeepseekOcr2Config,
    DeepseekOcr2ForConditionalGeneration,
    DeepseekOcr2ImageProcessor,
    DeepseekOcr2Processor,
)
from transformers.models.deepseek_ocr2.modeling_deepseek_ocr2 import DeepseekOcr2SamVisionAttention

from .contract import (
    SIGLIP,
    Loads,
    MoeRow,
    PatternRow,
    Row,
    Sizes,
    attention,
    batched,
    blocks,
    router,
    scatter,
    text_model,
)
from .deepseek import OCR_IMAGE_TOKEN, OCR_TEMPLATE, deepseek_ocr_tokenizer, randomise_sam_stack
from .norms import randomise_norms
from .sizes import text_sizes

PATCH = 4
#: The global view's side and a local crop's, in pixels.
GLOBAL, TILE = 256, 192
#: The contract suite's second image, (width, height): cropped into 2 x 1.
SECOND = (256, 128)
EXPERTS, TOP_K = 4, 2


def randomise_weights(model: DeepseekOcr2ForConditionalGeneration) -> None:
    """The norms (`randomise_norms`); the host's view_separator and the SAM position grid from N(0, 1), the SAM
    attention's relative positions (zero at init) from N(0, 0.1)."""
    randomise_norms(model)
    randomise_sam_stack(model, DeepseekOcr2SamVisionAttention)
    with torch.no_grad():
        model.model.view_separator.normal_()


def build_deepseek_ocr2() -> tuple[DeepseekOcr2ForConditionalGeneration, DeepseekOcr2Processor]:
    """Imitates deepseek-community/DeepSeek-OCR-2 at a quarter of its sizes: the module docstring's towers, projector
    and text model, ``DeepseekOcr2Processor``."""
    tokenizer = deepseek_ocr_tokenizer()
    text = text_sizes(
        tokenizer,
        num_key_value_heads=2,
        mlp_layer_types=["dense", "sparse"],
        n_routed_experts=EXPERTS,
        num_experts_per_tok=TOP_K,
        moe_intermediate_size=32,
        n_shared_experts=1,
    )
    vision = {
        "sam_config": {
            "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "mlp_dim": 64, "patch_size": PATCH,
            "image_size": GLOBAL, "window_size": 8, "global_attn_indexes": [1], "output_channels": 16,
            "downsample_channels": [24, 32], "initializer_range": 0.02,  # 1e-10 by default: a tower of zeros
        },
        "encoder_config": {
            "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
            "num_key_value_heads": 1,
        },
    }
    config = DeepseekOcr2Config(text_config=text, vision_config=vision,
                                image_token_id=tokenizer.convert_tokens_to_ids(OCR_IMAGE_TOKEN))
    # the SAM blocks pick their attention class when built: eager, as every load of the saved checkpoint gets
    model = DeepseekOcr2ForConditionalGeneration._from_config(config, attn_implementation="eager")
    randomise_weights(model)
    image_processor = DeepseekOcr2ImageProcessor(size={"height": GLOBAL, "width": GLOBAL}, tile_size=TILE)
    processor = DeepseekOcr2Processor(image_processor=image_processor, tokenizer=tokenizer,
                                      chat_template=OCR_TEMPLATE, patch_size=PATCH, downsample_ratio=4)
    return model, processor


#: The checkpoints this module builds, by name.
BUILDERS = {"deepseek_ocr2": build_deepseek_ocr2}

#: A SAM block's native names under the standard ones.
SAM_BLOCK = {
    "self_attn": "attn", "self_attn.o_proj": "attn.proj", "input_layernorm": "layer_norm1",
    "post_attention_layernorm": "layer_norm2", "mlp": "mlp", "mlp.up_proj": "mlp.lin1", "mlp.down_proj": "mlp.lin2",
}

#: What the contract suite expects of this checkpoint (`envoys.testing.contract`), read off the builder's documented
#: configuration above, never off the code under test.
CONTRACTS = {
    # envoys/testing/deepseek_ocr2.py: model.vision is the tower's first run, on the 256x256 global views, one row per
    # image. vision.layers is the decoder: 16x16 = 256 folded patch rows then 256 queries (512 rows), width 32, 2 heads
    # of 16, MLP 64, a final norm (vision.norm); patch_embeddings is the SAM patch convolution's, 64x64 = 4096 rows of
    # 32 (patch 4, image_size 256). The tower returns the 256 normed query rows (projector.input, no block's value); the
    # projector maps each to width 32. Tokens: 257 (no crops) and 545 (2 crops of 144 before the view's 256 and the
    # separator), so image_features is not projector.output alone. Text: block 0 dense, block 1 a mixture of 4 experts.
    "deepseek_ocr2": Row(
        loads=Loads(("DeepseekOcr2ForConditionalGeneration", "DeepseekOcr2Processor", "TokenizersBackend")),
        image_tokens=(257, 545),
        second_image=SECOND,
        sizes=Sizes(num_layers=2, patch_size=PATCH, image_size=GLOBAL, **SIGLIP),
        stream=batched((1, 512), (1, 512)),
        final_norm=True,
        pattern=PatternRow(masked=True),  # causal over the queries (test_deepseek_ocr2 checks where)
        patch_embeddings=batched((1, 4096), (1, 4096)),
        projected=batched((1, 256), (1, 256)),
        projector_reads=None,
        features_are_projected=False,
        text_gaps={"mlp.router_logits": (0,)},
        rules=(scatter("deepseek_ocr2"), *attention("deepseek_ocr2", "DeepseekOcr2VisionAttention"),
               "deepseek_ocr2.vision-attention", "deepseek_ocr2.vision-windows",
               "deepseek_ocr2.DeepseekOcr2TextAttention", router("deepseek_ocr2", "DeepseekOcr2TextTopkRouter")),
        native={
            "vision": "model.vision_tower", "projector": "model.multi_modal_projector",
            "vision.patch_embed": "model.vision_tower.sam_encoder.patch_embed",
            "vision.norm": "model.vision_tower.vision_encoder.norm",
            **blocks("vision.layers", "model.vision_tower.vision_encoder.layers"),
            **blocks("vision.sam_layers", "model.vision_tower.sam_encoder.layers", SAM_BLOCK),
            **text_model("model.language_model"),
        },
        moe=MoeRow(sparse=(1,), experts=EXPERTS, top_k=TOP_K),
    ),
}
