"""A tiny Llama 4 checkpoint: the tiled tower with its pixel-shuffle adapter, on a MoE / dense text model.

The builder returns an unsaved (`Llama4ForConditionalGeneration`,
`Llama4Processor`) pair with random float32 weights (seed the torch generator
first; :func:`envoys.testing.build` does), the stock `Llama4ImageProcessor` and
the stock chat template.

Tiles are 32x32 pixels with 8x8 patches: 16 patches a tile, plus the CLS
token the tower appends last (17 rows), and the pixel shuffle (ratio 0.5)
folds each 2x2 block of patches into one image token, so a tile gives 4
image tokens (``<|patch|>``, the config's image token). The image processor
cuts an image into at most ``max_patches`` = 4 tiles on a canvas of whole
tiles (without distortion, upscaling to the smallest canvas that fits), and
adds a global tile (the whole image resized to one tile) when it made more
than one: a 32x32 image is 1 tile (4 tokens); 64 wide x 32 high is 1x2 tiles
plus the global one, 3 tiles (12 tokens). The prompt marks each image with
one ``<|image|>`` token, which receives no feature.
"""

from __future__ import annotations

from transformers import Llama4Config, Llama4ForConditionalGeneration, Llama4Processor

try:
    from transformers import Llama4ImageProcessor
except ImportError:  # older releases (4.57 to 5.2 at least) name the same processor with its Fast suffix
    from transformers import Llama4ImageProcessorFast as Llama4ImageProcessor
from packaging.version import Version
from transformers.models.llama4.processing_llama4 import chat_template as LLAMA4_CHAT_TEMPLATE

from .contract import TEXT_BLOCK, TRANSFORMERS, Loads, MoeRow, Row, Sizes, attention, batched, blocks, flat, router, scatter, text_model
from .rope import rope
from .tokenizer import word_level_tokenizer

TILE = 32
PATCH = 8
SHUFFLE_RATIO = 0.5
VISION_WIDTH = 32
#: Image tokens per tile: the tile's patches, pixel-shuffled by ``SHUFFLE_RATIO`` a side.
TOKENS_PER_TILE = int((TILE // PATCH) ** 2 * SHUFFLE_RATIO**2)  # 4

#: The tokens the stock processor and chat template write, by the processor's attribute names.
IMAGE_TOKENS = {
    "image_token": "<|image|>",
    "patch_token": "<|patch|>",
    "start_of_image_token": "<|image_start|>",
    "end_of_image_token": "<|image_end|>",
    "tile_x_separator_token": "<|tile_x_separator|>",
    "tile_y_separator_token": "<|tile_y_separator|>",
}
SPECIAL = ["<|begin_of_text|>", "<|eot|>", "<|header_start|>", "<|header_end|>", "<|finetune_right_pad_id|>"]


def _tokenizer():
    return word_level_tokenizer(
        special_tokens=SPECIAL,
        named_tokens=IMAGE_TOKENS,
        chat_template=LLAMA4_CHAT_TEMPLATE,
        bos_token="<|begin_of_text|>",
        eos_token="<|eot|>",
        pad_token="<|finetune_right_pad_id|>",
    )


def build_llama4() -> tuple[Llama4ForConditionalGeneration, Llama4Processor]:
    """Imitates meta-llama/Llama-4-Scout-17B-16E-Instruct.

    Tower: 2 blocks, width 32, 2 heads (head_dim 16, 2D rotary), patch 8 on
    32x32 tiles, CLS last; ``layernorm_post``, then the CLS is dropped and the
    pixel-shuffle adapter (``vision_adapter``) maps each tile's 16 patches to
    4 tokens of ``vision_output_dim`` 32 (its MLP's ``intermediate_size`` is
    the shuffled width, 32 / 0.5**2 = 128, which the block MLPs share;
    ``projector_input_dim == projector_output_dim == vision_output_dim``).
    Projector: ``multi_modal_projector``, one linear map to the text width.
    Text: 2 layers, width 32, 2 query heads / 1 key-value head of dim 16;
    layer 0 is MoE (2 experts, top 1, a shared expert) with RoPE, query/key
    L2 norm and chunked attention (``attention_chunk_size`` 16), layer 1 is
    dense with no RoPE, full attention and attention-temperature tuning
    (``floor_scale`` 4, so the queries' scale grows along a short prompt).
    """
    tokenizer = _tokenizer()
    ids = {name: tokenizer.convert_tokens_to_ids(token) for name, token in IMAGE_TOKENS.items()}
    vision = {
        "hidden_size": VISION_WIDTH,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": int(VISION_WIDTH / SHUFFLE_RATIO**2),
        "image_size": TILE,
        "patch_size": PATCH,
        "pixel_shuffle_ratio": SHUFFLE_RATIO,
        "vision_output_dim": 32,
        "projector_input_dim": 32,
        "projector_output_dim": 32,
        **rope(10000.0),
    }
    text = {
        "vocab_size": len(tokenizer),
        "hidden_size": 32,
        "intermediate_size": 64,
        "intermediate_size_mlp": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 16,
        "num_local_experts": 2,
        "num_experts_per_tok": 1,
        "moe_layers": [0],
        "no_rope_layers": [1, 0],
        "attention_chunk_size": 16,
        "floor_scale": 4,
        "max_position_embeddings": 1024,
        **rope(500000.0),
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }
    config = Llama4Config(
        vision_config=vision,
        text_config=text,
        image_token_index=ids["patch_token"],
        boi_token_index=ids["start_of_image_token"],
        eoi_token_index=ids["end_of_image_token"],
        # the text model's; transformers 4.57 to 5.0 read it off the top-level config, which has none of its own there
        pad_token_id=tokenizer.pad_token_id,
    )
    processor = Llama4Processor(
        image_processor=Llama4ImageProcessor(size={"height": TILE, "width": TILE}, max_patches=4),
        tokenizer=tokenizer,
        patch_size=PATCH,
        pixel_shuffle_ratio=SHUFFLE_RATIO,
        chat_template=LLAMA4_CHAT_TEMPLATE,
    )
    return Llama4ForConditionalGeneration(config), processor


#: The checkpoints this module builds, by name.
BUILDERS = {"llama4": build_llama4}


#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builders' documented
#: configurations above, never off the code under test.
CONTRACTS = {
    # envoys/testing/llama4.py: 32 px tiles of 8 px patches plus the CLS last (17 rows), 4 tokens a tile; 32x32 is 1
    # tile, 64 wide x 32 high 1x2 tiles + the global one; layernorm_post; the adapter inside the tower transforms
    # tower_output before the projector; MLP 128 wide (32 / 0.5**2). Text block 0 a MoE, block 1 dense (no router).
    "llama4": Row(
        loads=Loads(("Llama4ForConditionalGeneration", "Llama4Processor", "TokenizersBackend"), feature_token="<|patch|>"),
        image_tokens=(4, 12),
        sizes=Sizes(num_layers=2, vision_hidden_size=32, num_heads=2, head_dim=16, intermediate_size=128, patch_size=8,
                    image_size=32),
        stream=batched((1, 17), (3, 17)),
        # the root flattens the tiles before the projector; from transformers 5.25 get_image_features projects per tile
        projected=batched((1, 4), (3, 4)) if TRANSFORMERS >= Version("5.25") else flat((1, 4), (3, 4)),
        projector_reads=None,
        second_image=(64, 32),
        prefix=1,
        final_norm=True,
        forward_bug=True,
        text_gaps={"mlp.router_logits": (1,)},
        rules=(scatter("llama4"), "llama4.text-block", *attention("llama4", "Llama4TextAttention"),
               *attention("llama4", "Llama4VisionAttention", kernel="vision-eager-attention"),
               router("llama4", "Llama4Router")),
        native={
            "vision": "vision_model", "projector": "multi_modal_projector",
            "vision.norm": "vision_model.layernorm_post", "vision.patch_embed": "vision_model.patch_embedding",
            **blocks("vision.layers", "vision_model.model.layers", {**TEXT_BLOCK,
                "self_attn.o_proj": "self_attn.o_proj"}),
            **text_model("language_model.model", {**TEXT_BLOCK, "mlp": "feed_forward"}),
            "lm_head": "language_model.lm_head",
        },
        # the text model's routers: block 0 a mixture of 2 experts, top 1; its router returns (scores, logits) and
        # every expert runs on every token, weighted by the scores
        moe=MoeRow(sparse=(0,), experts=2, top_k=1, router="router", logits_item=1, every_expert_runs=True),
    ),
}
