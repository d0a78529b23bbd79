"""A tiny MiniMax M3 VL checkpoint: a packed CLIP-shaped tower attending per image, a projector merging 2x2 patches,
on a mixture-of-experts text model with a lightning indexer's block-sparse attention.

The builder returns an unsaved (`MiniMaxM3SparseForConditionalGeneration`,
`MiniMaxM3VLProcessor`) pair with random float32 weights. The tower
(``model.vision_tower``) has 2 blocks of width 32, 2 heads of 16, an MLP 64
wide, patch 4 two frames deep, a 2x2 merge, a 3D rotary embedding and no final
norm. The image processor (``MiniMaxM3VLImageProcessor``, patch 4, merge 2,
resized to multiples of 8 px between 4 and 4096 merged tokens' worth of
pixels, so a test image keeps its size) lays each image's patches out in
merge-block order: a 32x32 image is 8x8 = 64 patches and 4x4 = 16 image
tokens, a 48 (high) x 64 (wide) one 12x16 = 192 patches and 6x8 = 48 tokens.
The projector maps every patch to width 32 through a hidden layer 64 wide,
then each merge block's four rows (128) through another to width 32.

The text model is MiniMax M3's: 2 blocks of width 32, 2 query heads and 2
key-value heads of 16, half of each head rotated (``partial_rotary_factor``
0.5: 8 dims), with query and key RMSNorms. Block 0 attends fully (``layer_types``
``full_attention``) and has a dense gated MLP 64 wide; block 1's attention is
block-sparse (``minimax_m3_sparse``): a lightning indexer of 2 heads of 8
scores blocks of `INDEX_BLOCK` = 4 keys and keeps each query's best
`INDEX_TOPK_BLOCKS` = 2 (its own block, `INDEX_LOCAL_BLOCKS` = 1, always
among them), and its MLP is a mixture of 4 experts, 2 a token, 32 wide, plus
a shared expert 32 wide. The router's correction bias stays at zero (its
init), so its choice is the logits' plain top-k. Every norm's weight is drawn:
the tower's LayerNorms' from U(0.5, 1.5) (`randomise_norms`), the text
model's RMSNorms (which scale by ``1 + weight``, zeros at init) from N(0, 0.5).

The tokenizer is word-level (`envoys.testing.tokenizer`), with MiniMax's
image and video markers (``]<]image[>[``, each image's run between
``]<]start of image[>[`` and ``]<]end of image[>[``) and a shortened chat
template with MiniMax's turn markers.
"""

from __future__ import annotations

import torch
from transformers import (
    MiniMaxM3SparseForConditionalGeneration,
    MiniMaxM3VLConfig,
    MiniMaxM3VLImageProcessor,
    MiniMaxM3VLProcessor,
    MiniMaxM3VLVideoProcessor,
)
from transformers.models.minimax_m3_vl.modeling_minimax_m3_vl import MiniMaxM3VLRMSNorm

from .contract import (
    ENCODER_BLOCK,
    NO_WINDOWS,
    PER_IMAGE_PATTERN,
    SIGLIP,
    Loads,
    MoeRow,
    Reads,
    Row,
    Sizes,
    attention,
    blocks,
    flat,
    packed,
    router,
    scatter,
    text_model,
)
from .norms import randomise_norms
from .sizes import text_sizes
from .tokenizer import TokenizersBackend, word_level_tokenizer

PATCH = 4
MERGE = 2
EXPERTS = 4
TOP_K = 2
#: Keys per block the indexer scores, blocks each query keeps, and the blocks before a query's own always kept.
INDEX_BLOCK = 4
INDEX_TOPK_BLOCKS = 2
INDEX_LOCAL_BLOCKS = 1

#: The tokens ``MiniMaxM3VLProcessor`` writes (its class constants), by the attribute names the tokenizer gives them.
NAMED = {
    "image_token": "]<]image[>[",
    "video_token": "]<]video[>[",
    "vision_start_token": "]<]start of image[>[",
    "vision_end_token": "]<]end of image[>[",
}
BOS, TURN, END, PAD = "]~!b[", "]~b]", "[e~[", "]!p~["

#: MiniMax's chat template, shortened: its turn markers (the assistant's turn is ``ai``), each image written as the
#: processor's placeholder, which it expands between the start and end markers.
CHAT_TEMPLATE = (
    BOS
    + "{% for message in messages %}"
    "{{ '" + TURN + "' + ('ai' if message['role'] == 'assistant' else message['role']) + '\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for item in message['content'] %}"
    "{% if item['type'] == 'image' %}{{ '" + NAMED["image_token"] + "' }}"
    "{% elif item['type'] == 'video' %}{{ '" + NAMED["video_token"] + "' }}"
    "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '" + END + "\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '" + TURN + "ai\n' }}{% endif %}"
)


def _tokenizer() -> TokenizersBackend:
    return word_level_tokenizer(special_tokens=[BOS, TURN, END, PAD], named_tokens=NAMED, chat_template=CHAT_TEMPLATE,
                                eos_token=END, pad_token=PAD, bos_token=BOS)


def _processing() -> dict[str, object]:
    """Patch 4, merge 2, and pixel bounds of 4 to 4096 merged tokens (8 x 8 px each): a test image keeps its size."""
    factor = PATCH * MERGE
    return {"patch_size": PATCH, "merge_size": MERGE, "min_pixels": 4 * factor**2, "max_pixels": 4096 * factor**2}


def randomise_norm_weights(model: torch.nn.Module) -> None:
    """Draw every norm's weight: the LayerNorms' from U(0.5, 1.5) (`randomise_norms`), then the RMSNorms', which scale
    by ``1 + weight`` from zeros, from N(0, 0.5)."""
    randomise_norms(model)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, MiniMaxM3VLRMSNorm):
                module.weight.normal_(0.0, 0.5)


def build_minimax_m3_vl() -> tuple[MiniMaxM3SparseForConditionalGeneration, MiniMaxM3VLProcessor]:
    """Imitates MiniMaxAI/MiniMax-M3: the module docstring's tower, projector and text model, ``MiniMaxM3VLProcessor``."""
    tokenizer = _tokenizer()
    text = text_sizes(
        tokenizer,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=1024,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
        layer_types=["full_attention", "minimax_m3_sparse"],
        mlp_layer_types=["dense", "sparse"],
        dense_intermediate_size=64,
        intermediate_size=32,
        shared_intermediate_size=32,
        num_local_experts=EXPERTS,
        num_experts_per_tok=TOP_K,
        index_n_heads=2,
        index_head_dim=8,
        index_block_size=INDEX_BLOCK,
        index_topk_blocks=INDEX_TOPK_BLOCKS,
        index_local_blocks=INDEX_LOCAL_BLOCKS,
        tie_word_embeddings=False,
    )
    vision = {
        "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
        "patch_size": PATCH, "temporal_patch_size": 2, "spatial_merge_size": MERGE,
    }
    config = MiniMaxM3VLConfig(
        text_config=text,
        vision_config=vision,
        image_token_index=tokenizer.convert_tokens_to_ids(NAMED["image_token"]),
        video_token_index=tokenizer.convert_tokens_to_ids(NAMED["video_token"]),
        projector_hidden_size=64,
        tie_word_embeddings=False,
    )
    model = MiniMaxM3SparseForConditionalGeneration(config)
    randomise_norm_weights(model)
    processor = MiniMaxM3VLProcessor(
        image_processor=MiniMaxM3VLImageProcessor(**_processing()),
        tokenizer=tokenizer,
        video_processor=MiniMaxM3VLVideoProcessor(**_processing()),
        chat_template=CHAT_TEMPLATE,
    )
    return model, processor


#: The checkpoints this module builds, by name.
BUILDERS = {"minimax_m3_vl": build_minimax_m3_vl}


#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builders' documented
#: configurations above, never off the code under test.
CONTRACTS = {
    # envoys/testing/minimax_m3_vl.py: packed, 4 px patches in merge-block order, no final norm: 32x32 is 64 patches and
    # 16 tokens, 48x64 is 192 and 48; the projector (after the tower) reads the last block's stream without its leading
    # 1 and gives one row per token; 2 blocks, width 32, 2 heads of 16, MLP 64. Text: block 0 full attention and a
    # dense MLP (no router), block 1 the indexer's sparse attention and a mixture of 4 experts, 2 a token.
    "minimax_m3_vl": Row(
        loads=Loads(("MiniMaxM3SparseForConditionalGeneration", "MiniMaxM3VLProcessor", "TokenizersBackend")),
        image_tokens=(16, 48),
        sizes=Sizes(num_layers=2, patch_size=4, image_size="image_grid_thw", **SIGLIP),
        stream=packed(64, 192),
        projected=flat((1, 16), (1, 48)),
        projector_reads=Reads("tower_output", unbatched=True),
        pattern=PER_IMAGE_PATTERN,
        vision_unavailable=NO_WINDOWS,
        text_gaps={"mlp.router_logits": (0,)},
        rules=(scatter("minimax_m3_vl"), "minimax_m3_vl.vision-attention",
               *attention("minimax_m3_vl", "MiniMaxM3VLAttention"), router("minimax_m3_vl", "MiniMaxM3VLTopKRouter")),
        native={
            "vision": "model.vision_tower", "projector": "model.multi_modal_projector",
            "vision.patch_embed": "model.vision_tower.embeddings",
            **blocks("vision.layers", "model.vision_tower.layers", ENCODER_BLOCK),
            **text_model("model.language_model"),
        },
        # the text model's routers: block 1 a mixture of 4 experts, 2 a token
        moe=MoeRow(sparse=(1,), experts=4, top_k=2),
    ),
}
