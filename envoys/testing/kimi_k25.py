"""A tiny Kimi K2.5 checkpoint: MoonViT (a packed ViT attending per image) and a projector on a DeepSeek-V3 text model.

The builder returns an unsaved (`Kimi_K25ForConditionalGeneration`,
`Kimi_K25Processor`) pair with random float32 weights. The tower
(``model.vision_tower``) has 2 blocks of width 32, 2 heads of 16, an MLP 64
wide, patch 4, a learned 8x8 position grid (resampled to each image's grid),
a 2D rotary embedding, a final LayerNorm, then a 2x2 temporal merge; the
projector (``model.mm_projector``) norms each merged block's four patches and
maps them with two linears to the text width. The image processor
(`Kimi_K25ImageProcessor`, patch 4, merge 2, at most 64 patches a side) lays
each image's patches out in raster order: a 32x32 image is 8x8 = 64 patches
and 4x4 = 16 image tokens, a 48 (high) x 64 (wide) one 12x16 = 192 patches
and 6x8 = 48 tokens.

The text model is DeepSeek-V3's: 2 blocks of width 32, multi-head latent
attention (2 heads; queries and keys of 8 + 8 dims without and with rotary
positions, queries through a 16-wide low-rank ``q_a_proj`` / ``q_b_proj`` as
the real checkpoint's, keys and values expanded from a 16-wide latent, values
12 wide),
block 0 a dense gated MLP 64 wide (``first_k_dense_replace`` 1), block 1 a
mixture of 4 routed experts, 2 a token, 32 wide, plus one shared expert,
routed by plain top-k (one expert group). The router's weight is drawn from
N(0, 1) (it starts at zero), every norm's weight at random (`randomise_norms`).
A text attention with a full-rank ``q_proj`` (``q_lora_rank`` None) would not
load back: transformers 5.24's kimi_k25 weight conversion, reversed on save,
takes the text attention's ``q_proj`` for the tower's (the pattern
``attn.q_proj`` matches ``self_attn.q_proj``) and fuses it into a ``wqkv``
that the load cannot split.
The tokenizer is word-level (`envoys.testing.tokenizer`), with Kimi's media
markers and a shortened chat template.
"""

from __future__ import annotations

import torch
from transformers import (
    Kimi_K25Config,
    Kimi_K25ForConditionalGeneration,
    Kimi_K25ImageProcessor,
    Kimi_K25Processor,
    Kimi_K25VideoProcessor,
)

from .contract import (
    NO_WINDOWS,
    PER_IMAGE_PATTERN,
    QWEN_VIT_BLOCK,
    SIGLIP,
    Loads,
    MoeRow,
    Row,
    Sizes,
    attention,
    batched,
    blocks,
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
#: The largest side the processor keeps, in patches.
MAX_SIDE = 64
EXPERTS = 4
TOP_K = 2

#: Kimi K2.5's chat template, shortened: role markers, each image between its media markers.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_' + message['role'] + '|>' + message['role'] + '<|im_middle|>' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for item in message['content'] %}"
    "{% if item['type'] == 'image' %}{{ '<|media_begin|>image<|media_content|><|media_pad|><|media_end|>' }}"
    "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '<|im_end|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_assistant|>assistant<|im_middle|>' }}{% endif %}"
)

_SPECIAL = ["[EOS]", "<|im_user|>", "<|im_assistant|>", "<|im_system|>", "<|im_middle|>", "<|im_end|>",
            "<|media_begin|>", "<|media_content|>", "<|media_end|>"]
_NAMED = {"image_token": "<|media_pad|>", "video_token": "<|kimi_k25_video_placeholder|>"}


def _tokenizer() -> TokenizersBackend:
    return word_level_tokenizer(special_tokens=_SPECIAL, named_tokens=_NAMED, chat_template=CHAT_TEMPLATE,
                                eos_token="[EOS]", pad_token="[EOS]")


def _processing() -> dict[str, object]:
    return {"patch_size": PATCH, "merge_size": MERGE, "size": {"max_height": MAX_SIDE, "max_width": MAX_SIDE}}


def build_kimi_k25() -> tuple[Kimi_K25ForConditionalGeneration, Kimi_K25Processor]:
    """Imitates moonshotai/Kimi-K2.5: the module docstring's tower, projector and text model, ``Kimi_K25Processor``."""
    tokenizer = _tokenizer()
    text = text_sizes(
        tokenizer,
        model_type="deepseek_v3",
        num_key_value_heads=2,
        q_lora_rank=16,
        kv_lora_rank=16,
        qk_nope_head_dim=8,
        qk_rope_head_dim=8,
        v_head_dim=12,
        first_k_dense_replace=1,
        n_routed_experts=EXPERTS,
        num_experts_per_tok=TOP_K,
        n_group=1,
        topk_group=1,
        n_shared_experts=1,
        moe_intermediate_size=32,
        tie_word_embeddings=False,
    )
    vision = {
        "patch_size": PATCH, "pos_emb_height": 8, "pos_emb_width": 8, "num_attention_heads": 2,
        "num_hidden_layers": 2, "hidden_size": 32, "intermediate_size": 64, "merge_kernel_size": [MERGE, MERGE],
    }
    config = Kimi_K25Config(
        text_config=text,
        vision_config=vision,
        projection_hidden_size=32,
        image_token_id=tokenizer.convert_tokens_to_ids(_NAMED["image_token"]),
        video_token_id=tokenizer.convert_tokens_to_ids(_NAMED["video_token"]),
        vision_start_token_id=tokenizer.convert_tokens_to_ids("<|media_begin|>"),
        vision_end_token_id=tokenizer.convert_tokens_to_ids("<|media_end|>"),
        tie_word_embeddings=False,
    )
    model = Kimi_K25ForConditionalGeneration(config)
    with torch.no_grad():
        for layer in model.model.language_model.layers:
            gate = getattr(layer.mlp, "gate", None)
            if gate is not None:
                gate.weight.normal_(0.0, 1.0)
    randomise_norms(model)
    processor = Kimi_K25Processor(
        image_processor=Kimi_K25ImageProcessor(**_processing()),
        tokenizer=tokenizer,
        video_processor=Kimi_K25VideoProcessor(**_processing()),
        chat_template=CHAT_TEMPLATE,
    )
    return model, processor


#: The checkpoints this module builds, by name.
BUILDERS = {"kimi_k25": build_kimi_k25}


#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builders' documented
#: configurations above, never off the code under test.
CONTRACTS = {
    # envoys/testing/kimi_k25.py: MoonViT, packed, 4 px patches in raster order merged 2x2: 32x32 is 64 patches and 16
    # tokens, 48x64 is 192 and 48; a final norm (final_layernorm); the tower gathers each merge block of tower_output
    # before the projector (tests/test_kimi_k25.py says how), whose output is [tokens, 1, hidden]; 2 blocks, width 32,
    # 2 heads of 16, MLP 64. DeepSeek-V3 text: block 0 dense (no router), block 1 a mixture of experts.
    "kimi_k25": Row(
        loads=Loads(("Kimi_K25ForConditionalGeneration", "Kimi_K25Processor", "TokenizersBackend")),
        image_tokens=(16, 48),
        sizes=Sizes(num_layers=2, patch_size=4, image_size="image_grid_thw", **SIGLIP),
        stream=packed(64, 192),
        projected=batched((16, 1), (48, 1)),
        projector_reads=None,
        final_norm=True,
        pattern=PER_IMAGE_PATTERN,
        vision_unavailable=NO_WINDOWS,
        text_gaps={"mlp.router_logits": (0,)},
        rules=(scatter("kimi_k25"), "kimi_k25.vision-attention", "kimi_k25.eager-attention",
               *attention("deepseek_v3", "DeepseekV3Attention"),
               router("deepseek_v3", "DeepseekV3TopkRouter")),
        native={
            "vision": "model.vision_tower", "projector": "model.mm_projector",
            "vision.norm": "model.vision_tower.final_layernorm", "vision.patch_embed": "model.vision_tower.patch_embed",
            **blocks("vision.layers", "model.vision_tower.layers", {**QWEN_VIT_BLOCK, "mlp.up_proj": "mlp.fc1",
                "mlp.down_proj": "mlp.fc2"}),
            **text_model("model.language_model"),
        },
        # the text model's routers: block 1 a mixture of 4 experts, 2 a token
        moe=MoeRow(sparse=(1,), experts=4, top_k=2),
    ),
}
