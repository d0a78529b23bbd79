"""A tiny Unlimited-OCR checkpoint: a SAM encoder with its neck, then a CLIP-style encoder over the SAM grid, run twice
in one forward (each image's global view, then the local crops of the images the processor crops), on a
mixture-of-experts text model.

The builder returns an unsaved (`UnlimitedOcrForConditionalGeneration`,
`UnlimitedOcrProcessor`) pair with random float32 weights.

The SAM stack: 2 blocks of width 32, 2 heads of 16, an MLP 64 wide
(``mlp_dim``), patch `PATCH` = 4, an absolute position grid of 16x16
(``image_size`` 64); block 0 attends in windows of 3x3 patches, block 1
globally (``global_attn_indexes`` [1]). Its neck maps to 16 channels, and two
stride-2 convolutions fold the grid 4x per side to 24, then 32 channels; its
weights are drawn with the CLIP's ``initializer_range`` 0.02 (the SAM
config's default, 1e-10, makes its output vanish). The
CLIP stack: 2 blocks of width 32 (the folded grid's channels), 2 heads of
16, an MLP 64 wide, a learned CLS and positions on a 4x4 grid (``image_size``
16, ``patch_size`` 4). So a 64x64 global view is 16x16 = 256 SAM patches,
4x4 = 16 CLIP patches (17 rows, CLS first) and 16 image tokens; a 32x32 crop
8x8 = 64 SAM patches and 2x2 = 4 tokens. The projector maps 32 + 32 = 64
channels to the text width.

The image processor (``UnlimitedOcrImageProcessor``: global view `GLOBAL` =
64 px, padded to a square, crops of `TILE` = 32 px, 2 to `MAX_CROPS` = 4 a
crop grid) cuts an image whose longer side is over 32 px: the 32x32 test
image makes none, the 64 (wide) x 48 (high) one 2 columns x 2 rows (the
processor's closest canvas of 2 to 4 crops). Tokens: each image's crops
stitched into one token grid, 4 x 4 for the second image, a newline after
each of its 4 token rows (4 * 5 = 20), then its view's 4 token rows of 4 and
a newline each (20), then one separator: 21 and 41.

The text model: 2 blocks of width 32, 2 query and 2 key-value heads of 16,
a reference sliding window of `SLIDING_WINDOW` = 16; block 0 a dense MLP 64
wide, block 1 a mixture of `EXPERTS` = 4 experts, `TOP_K` = 2 a token
(softmax router, greedy top-k), 32 wide, plus 1 shared expert. The
LayerNorms (both stacks', the neck's) are drawn from U(0.5, 1.5)
(`randomise_norms`), the RMSNorms from N(1, 0.5); the host's
``image_newline`` and ``view_separator`` and the SAM position grid from
N(0, 1) (the SAM's is zero at init), the SAM attention's relative position
tables (zero at init) from N(0, 0.1).

The tokenizer is word-level (`envoys.testing.tokenizer`), DeepSeek's
begin/end tokens, ``<image>``, and a short chat template.
"""

from __future__ import annotations

import torch
from transformers import (
    UnlimitedOcrConfig,
    UnlimitedOcrForConditionalGeneration,
    UnlimitedOcrImageProcessor,
    UnlimitedOcrProcessor,
)
from transformers.models.unlimited_ocr.modeling_unlimited_ocr import UnlimitedOcrSamVisionAttention, UnlimitedOcrTextRMSNorm

from .contract import (
    SIGLIP,
    Loads,
    MoeRow,
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
GLOBAL, TILE = 64, 32
MAX_CROPS = 4
EXPERTS, TOP_K = 4, 2
SLIDING_WINDOW = 16


def randomise_weights(model: UnlimitedOcrForConditionalGeneration) -> None:
    """The LayerNorms from U(0.5, 1.5) (`randomise_norms`), the RMSNorms from N(1, 0.5); the host's learned rows and
    the SAM position grid (zero at init) from N(0, 1), the SAM attention's relative positions (zero at init) from
    N(0, 0.1)."""
    randomise_norms(model)
    randomise_sam_stack(model, UnlimitedOcrSamVisionAttention)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, UnlimitedOcrTextRMSNorm):
                module.weight.normal_(1.0, 0.5)
        inner = model.model
        inner.image_newline.normal_()
        inner.view_separator.normal_()


def build_unlimited_ocr() -> tuple[UnlimitedOcrForConditionalGeneration, UnlimitedOcrProcessor]:
    """Imitates baidu/Unlimited-OCR: the module docstring's towers, projector and text model, ``UnlimitedOcrProcessor``."""
    tokenizer = deepseek_ocr_tokenizer()
    text = text_sizes(
        tokenizer,
        num_key_value_heads=2,
        sliding_window=SLIDING_WINDOW,
        mlp_layer_types=["dense", "sparse"],
        n_routed_experts=EXPERTS,
        num_experts_per_tok=TOP_K,
        moe_intermediate_size=32,
        n_shared_experts=1,
    )
    vision = {
        "sam_config": {
            "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "mlp_dim": 64, "patch_size": PATCH,
            "image_size": GLOBAL, "window_size": 3, "global_attn_indexes": [1], "output_channels": 16,
            "downsample_channels": [24, 32], "initializer_range": 0.02,  # 1e-10 by default: a tower of zeros
        },
        "encoder_config": {
            "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
            "image_size": 16, "patch_size": 4,
        },
    }
    config = UnlimitedOcrConfig(text_config=text, vision_config=vision,
                                image_token_id=tokenizer.convert_tokens_to_ids(OCR_IMAGE_TOKEN))
    # the SAM blocks pick their attention class when built: eager, as every load of the saved checkpoint gets
    model = UnlimitedOcrForConditionalGeneration._from_config(config, attn_implementation="eager")
    randomise_weights(model)
    image_processor = UnlimitedOcrImageProcessor(size={"height": GLOBAL, "width": GLOBAL}, tile_size=TILE,
                                                 max_patches=MAX_CROPS)
    processor = UnlimitedOcrProcessor(image_processor=image_processor, tokenizer=tokenizer,
                                      chat_template=OCR_TEMPLATE, patch_size=PATCH, downsample_ratio=4)
    return model, processor


#: The checkpoints this module builds, by name.
BUILDERS = {"unlimited_ocr": build_unlimited_ocr}

#: A CLIP block's native names under the standard ones (the family module's RENAME).
CLIP_BLOCK = {
    "self_attn": "self_attn", "self_attn.o_proj": "self_attn.out_proj", "input_layernorm": "layer_norm1",
    "post_attention_layernorm": "layer_norm2", "mlp": "mlp", "mlp.up_proj": "mlp.fc1", "mlp.down_proj": "mlp.fc2",
}
#: A SAM block's native names under the standard ones.
SAM_BLOCK = {
    "self_attn": "attn", "self_attn.o_proj": "attn.proj", "input_layernorm": "layer_norm1",
    "post_attention_layernorm": "layer_norm2", "mlp": "mlp", "mlp.up_proj": "mlp.lin1", "mlp.down_proj": "mlp.lin2",
}

#: What the contract suite expects of this checkpoint (`envoys.testing.contract`), read off the builder's documented
#: configuration above, never off the code under test.
CONTRACTS = {
    # envoys/testing/unlimited_ocr.py: model.vision is the tower's first run, on the 64x64 global views, one row per
    # image. vision.layers is the CLIP stack: 1 CLS + 4x4 = 17 rows, width 32, 2 heads of 16, MLP 64; patch_embeddings
    # is the SAM patch convolution's, 16x16 = 256 rows of 32 (patch 4, image_size 64). The tower returns the 16 CLIP
    # rows without CLS beside the SAM grid's 16 folded cells (projector.input, no block's value), the projector maps
    # each to width 32. Tokens: 21 (no crops) and 41 (2 x 2 crops before the view), so image_features is not
    # projector.output alone. Text: block 0 dense (no router), block 1 a mixture of 4 experts, 2 a token.
    "unlimited_ocr": Row(
        loads=Loads(("UnlimitedOcrForConditionalGeneration", "UnlimitedOcrProcessor", "TokenizersBackend")),
        image_tokens=(21, 41),
        sizes=Sizes(num_layers=2, patch_size=PATCH, image_size=GLOBAL, **SIGLIP),
        stream=batched((1, 17), (1, 17)),
        prefix=1,
        patch_embeddings=batched((1, 256), (1, 256)),
        projected=batched((1, 16), (1, 16)),
        projector_reads=None,
        features_are_projected=False,
        text_gaps={"mlp.router_logits": (0,)},
        rules=(scatter("unlimited_ocr"), *attention("unlimited_ocr", "UnlimitedOcrAttention"),
               "unlimited_ocr.vision-attention", "unlimited_ocr.vision-windows",
               "unlimited_ocr.UnlimitedOcrTextAttention",
               router("unlimited_ocr", "UnlimitedOcrTextTopkRouter")),
        native={
            "vision": "model.vision_tower", "projector": "model.multi_modal_projector",
            "vision.patch_embed": "model.vision_tower.sam_encoder.patch_embed",
            **blocks("vision.layers", "model.vision_tower.vision_encoder.encoder.layers", CLIP_BLOCK),
            **blocks("vision.sam_layers", "model.vision_tower.sam_encoder.layers", SAM_BLOCK),
            **text_model("model.language_model"),
        },
        moe=MoeRow(sparse=(1,), experts=EXPERTS, top_k=TOP_K),
    ),
}
