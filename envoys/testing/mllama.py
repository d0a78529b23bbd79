"""A tiny Mllama checkpoint (model_type mllama, Llama 3.2 Vision): a tiled tower in two stacks, a projector, and a
text model whose cross-attention layers read the image.

The builder returns an unsaved (`MllamaForConditionalGeneration`,
`MllamaProcessor`) pair with random float32 weights. Tiles are ``TILE`` = 32
pixels with patches of 8: 16 patches a tile, plus the CLS the tower puts
first (17 rows), which the tower pads to 24 rows (a multiple of 8) between
its stacks. The image processor (`MllamaImageProcessor`) resizes an image
onto the canvas of whole tiles that fits it best among the arrangements of
at most ``MAX_TILES`` = 4 tiles, cuts it into those tiles and pads the list
to ``MAX_TILES`` (the padding tiles are masked out): a 32x32 image is 1 tile,
a 64 wide x 32 high one 1x2 tiles. The prompt marks each image with one
``<|image|>`` token; every text token after it attends to its tiles.
"""

from __future__ import annotations

import torch
from transformers import MllamaConfig, MllamaForConditionalGeneration, MllamaImageProcessor, MllamaProcessor

from .contract import TEXT_BLOCK, Loads, PatternRow, Reads, Row, Sizes, Tiled, attention, batched, blocks, scatter
from .norms import randomise_norms
from .tokenizer import word_level_tokenizer

TILE = 32
PATCH = 8
MAX_TILES = 4
#: A tile's rows in the tower: its patches and the CLS.
TILE_ROWS = (TILE // PATCH) ** 2 + 1  # 17
#: The rows the tower pads each tile to between its stacks (a multiple of 8).
PADDED_TILE_ROWS = -(-TILE_ROWS // 8) * 8  # 24
#: The local stack's layers whose outputs the tower's output carries beside the global stack's.
INTERMEDIATE_LAYERS = (0,)
#: The text blocks that cross-attend to the image, and the others.
CROSS_LAYERS = (1,)
SELF_LAYERS = (0, 2)

IMAGE_TOKEN = "<|image|>"
SPECIAL = ["<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>", "<|finetune_right_pad_id|>",
           "<|python_tag|>", IMAGE_TOKEN]

#: Llama 3.2 Vision's chat template in short: a header per turn, an image entry as ``<|image|>`` before the text.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' %}<|image|>{% elif content['type'] == 'text' %}{{ content['text'] }}"
    "{% endif %}{% endfor %}{% endif %}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)


def _tokenizer():
    return word_level_tokenizer(
        special_tokens=SPECIAL,
        named_tokens={"image_token": IMAGE_TOKEN},
        chat_template=CHAT_TEMPLATE,
        bos_token="<|begin_of_text|>",
        eos_token="<|eot_id|>",
        pad_token="<|finetune_right_pad_id|>",
    )


def randomise_gates(model: MllamaForConditionalGeneration) -> None:
    """Draw every gate Mllama initialises at zero (or at pi/4) from U(0.3, 1.2), so each gate scales its term by
    its own factor and a cross layer is no identity (at zero, ``tanh(0) = 0`` silences the image)."""
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.rpartition(".")[2] in ("gate", "gate_attn", "gate_ffn", "cross_attn_attn_gate", "cross_attn_mlp_gate"):
                parameter.uniform_(0.3, 1.2)


def build_mllama() -> tuple[MllamaForConditionalGeneration, MllamaProcessor]:
    """Imitates meta-llama/Llama-3.2-11B-Vision-Instruct (448 pixel tiles of 14 pixel patches, 4 tiles at most, 32
    local and 8 global tower layers, a cross-attention layer every fifth text block).

    Tower: width 32, 2 heads, MLP 64 wide, patch 8 on 32x32 tiles; 2 local
    layers (``transformer``) then 2 gated global layers
    (``global_transformer``); its output is the global stack's stream beside
    local layer 0's (``intermediate_layers_indices`` [0]), 64 wide. Projector:
    one linear map 64 -> 32. Text: 3 Llama blocks, width 32, 2 query heads /
    1 key-value head of dim 16, block 1 a cross-attention layer. Every norm's
    weight and bias and every gate are drawn at random.
    """
    tokenizer = _tokenizer()
    config = MllamaConfig(
        vision_config={
            "hidden_size": 32, "attention_heads": 2, "intermediate_size": 64, "num_hidden_layers": 2,
            "num_global_layers": 2, "image_size": TILE, "patch_size": PATCH, "max_num_tiles": MAX_TILES,
            "intermediate_layers_indices": list(INTERMEDIATE_LAYERS),
            "vision_output_dim": 32 * (1 + len(INTERMEDIATE_LAYERS)),
            "supported_aspect_ratios": [[1, 1], [1, 2], [1, 3], [1, 4], [2, 1], [2, 2], [3, 1], [4, 1]],
        },
        text_config={
            "vocab_size": len(tokenizer), "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 3,
            "num_attention_heads": 2, "num_key_value_heads": 1, "cross_attention_layers": list(CROSS_LAYERS),
            "max_position_embeddings": 1024, "bos_token_id": tokenizer.bos_token_id,
            "eos_token_id": tokenizer.eos_token_id, "pad_token_id": tokenizer.pad_token_id,
        },
        image_token_index=tokenizer.convert_tokens_to_ids(IMAGE_TOKEN),
    )
    model = MllamaForConditionalGeneration(config)
    randomise_norms(model)
    randomise_gates(model)
    processor = MllamaProcessor(
        image_processor=MllamaImageProcessor(size={"height": TILE, "width": TILE}, max_image_tiles=MAX_TILES),
        tokenizer=tokenizer,
        chat_template=CHAT_TEMPLATE,
    )
    return model, processor


#: The checkpoints this module builds, by name.
BUILDERS = {"mllama": build_mllama}


#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builder's documented
#: configuration above, never off the code under test.
CONTRACTS = {
    # 32 px tiles of 8 px patches, the CLS first: 17 rows a tile, padded to 24 between the stacks; every image is 4
    # tiles (padding tiles included), so a local or global block's row is one image's 4 * 24 = 96 rows; tower_output and
    # projector.output are [1, images, 4, 17, ...]; the image token is one <|image|> an image, which no feature fills.
    "mllama": Row(
        loads=Loads(("MllamaForConditionalGeneration", "MllamaProcessor", "TokenizersBackend")),
        image_tokens=(1, 1),
        sizes=Sizes(num_layers=2, vision_hidden_size=32, num_heads=2, head_dim=16, intermediate_size=64, patch_size=8,
                    image_size=32),
        stream=batched((1, MAX_TILES * PADDED_TILE_ROWS), (1, MAX_TILES * PADDED_TILE_ROWS)),
        projected=Tiled(((MAX_TILES, TILE_ROWS), (MAX_TILES, TILE_ROWS))),
        projector_reads=Reads("tower_output"),
        patch_embeddings=batched((MAX_TILES, TILE_ROWS - 1), (MAX_TILES, TILE_ROWS - 1)),
        tower_output=Tiled(((MAX_TILES, TILE_ROWS), (MAX_TILES, TILE_ROWS))),
        cross_layers=CROSS_LAYERS,
        # a cross-attention block has no self_attn; a self-attention block no cross_attn and no gates
        text_gaps={"self_attn.": CROSS_LAYERS, "cross_attn.": SELF_LAYERS, "attention_gate": SELF_LAYERS,
                   "mlp_gate": SELF_LAYERS},
        # the attention masks each image's padding tiles and each tile's padding rows
        pattern=PatternRow(padded=True),
        # the gates are on the global stack's blocks alone: the local blocks (vision.layers) have none
        vision_unavailable={"attention_gate": "gates are off", "mlp_gate": "gates are off"},
        rules=(scatter("mllama"), *attention("mllama", "MllamaTextSelfAttention"), "mllama.MllamaTextCrossAttention",
               "mllama.MllamaVisionAttention"),
        native={
            "vision": "model.vision_model", "projector": "model.multi_modal_projector",
            "vision.patch_embed": "model.vision_model.patch_embedding",
            **blocks("vision.layers", "model.vision_model.transformer.layers", {**TEXT_BLOCK}),
            **blocks("vision.global_layers", "model.vision_model.global_transformer.layers", {**TEXT_BLOCK}),
            "embed_tokens": "model.language_model.embed_tokens", "norm": "model.language_model.norm",
            "layers": "model.language_model.layers", "layers.1.cross_attn": "model.language_model.layers.1.cross_attn",
            "layers.0.self_attn": "model.language_model.layers.0.self_attn",
            "layers.2.self_attn": "model.language_model.layers.2.self_attn",
            "lm_head": "lm_head",
        },
    ),
}
