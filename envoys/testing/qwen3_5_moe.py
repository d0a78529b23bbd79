"""A tiny Qwen3.5-MoE checkpoint: Qwen3.5's tower on a gated-DeltaNet hybrid text model whose every block is a mixture
of experts.

The tower, tokenizer and processor are Qwen3.5's (`envoys.testing.qwen`: the
stock ``Qwen3VLProcessor`` that the Qwen3.5-MoE checkpoints name, with
Qwen3-VL's image and video processors, and a byte-level BPE tokenizer, which
transformers rebuilds as ``Qwen3_5Tokenizer`` for this model_type too). Patch
8, merged 2x2: a 32x32 image is 16 patches and 4 image tokens, 48 high x 64
wide 48 patches and 12 tokens.
"""

from __future__ import annotations

import torch
from transformers import PreTrainedModel, Qwen3VLProcessor

from .contract import (
    NO_WINDOWS,
    PER_IMAGE_PATTERN,
    QWEN_VIT_BLOCK,
    SIGLIP,
    Loads,
    MoeRow,
    Reads,
    Row,
    Sizes,
    VideoRow,
    attention,
    blocks,
    flat,
    packed,
    router,
    scatter,
    text_model,
)
from .norms import randomise_norms
from .qwen import _qwen3_processor, _qwen3_vision, _text, _token_ids, _tokenizer
from .rope import rope

PATCH = 8
EXPERTS = 4
TOP_K = 2
#: Block 0 a gated DeltaNet, block 1 full attention (the real checkpoints' 3:1 pattern, cut to two blocks).
LAYER_TYPES = ["linear_attention", "full_attention"]


def build_qwen3_5_moe() -> tuple[PreTrainedModel, Qwen3VLProcessor]:
    """Imitates Qwen/Qwen3.5-35B-A3B.

    Tower: Qwen3.5's (Qwen3-VL's without DeepStack), 2 blocks, width 32, 2
    heads, patch 8, 16 learned position embeddings. Text: 2 layers,
    ``layer_types`` linear, full; full attention with 2 query heads
    (output-gated) / 1 key-value head, head_dim 32 with partial rotary factor
    0.25 (8 rotary dims, interleaved M-RoPE sections [2, 1, 1]); linear
    attention with 2 key heads / 4 value heads of dim 16, conv kernel 4. Every
    block's MLP is a mixture (the model has no dense block): 4 experts
    (``moe_intermediate_size`` 32), 2 a token, and a shared expert 32 wide
    behind its sigmoid gate (``shared_expert_gate``). The routers' weights are
    drawn from N(0, 1) (their init's 0.02 leaves every token's scores nearly
    equal); every norm's weight at random (`randomise_norms`), and the
    text model's RMSNorms', which it scales by ``1 + weight`` and initialises
    at zero, from U(-0.5, 0.5).
    """
    # Imported here: Qwen3.5-MoE came in transformers 5.2, and the other Qwen builders work before it.
    from transformers import Qwen3_5MoeConfig, Qwen3_5MoeForConditionalGeneration

    tokenizer = _tokenizer(byte_level=True)
    config = Qwen3_5MoeConfig(
        text_config=_text(
            tokenizer,
            head_dim=32,
            layer_types=LAYER_TYPES,
            linear_conv_kernel_dim=4,
            linear_key_head_dim=16,
            linear_value_head_dim=16,
            linear_num_key_heads=2,
            linear_num_value_heads=4,
            num_experts=EXPERTS,
            num_experts_per_tok=TOP_K,
            moe_intermediate_size=32,
            shared_expert_intermediate_size=32,
            **rope(10_000_000.0, partial_rotary_factor=0.25, mrope_section=[2, 1, 1], mrope_interleaved=True),
        ),
        vision_config=_qwen3_vision(PATCH, depth=2),
        **_token_ids(tokenizer),
    )
    model = Qwen3_5MoeForConditionalGeneration(config)
    with torch.no_grad():
        for layer in model.model.language_model.layers:
            layer.mlp.gate.weight.normal_(0.0, 1.0)
        randomise_norms(model)
        for module in model.modules():
            if type(module).__name__ == "Qwen3_5MoeRMSNorm":
                module.weight.uniform_(-0.5, 0.5)
    return model, _qwen3_processor(PATCH, tokenizer)


#: The checkpoints this module builds, by name.
BUILDERS = {"qwen3_5_moe": build_qwen3_5_moe}


#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builders' documented
#: configurations above, never off the code under test.
CONTRACTS = {
    # envoys/testing/qwen3_5_moe.py: Qwen3.5's tower (no DeepStack), 2 blocks, patch 8; text blocks linear, full attention,
    # each a mixture of 4 experts and a shared expert (none dense).
    "qwen3_5_moe": Row(
        loads=Loads(("Qwen3_5MoeForConditionalGeneration", "Qwen3VLProcessor", "Qwen3_5Tokenizer")),
        image_tokens=(4, 12),
        sizes=Sizes(num_layers=2, patch_size=8, image_size="image_grid_thw", **SIGLIP),
        stream=packed(16, 48),
        projected=flat((1, 4), (1, 12)),
        projector_reads=Reads("layer_output", block=-1, unbatched=True),
        pattern=PER_IMAGE_PATTERN,
        vision_unavailable=NO_WINDOWS,
        text_gaps={"attention_output": (0,), "self_attn.": (0,), "linear_attn.": (1,)},
        rules=(scatter("qwen3_5_moe"), "qwen3_5_moe.vision-attention", "qwen3_5_moe.gated-deltanet",
               *attention("qwen3_5_moe", "Qwen3_5MoeAttention"), router("qwen3_5_moe", "Qwen3_5MoeTopKRouter")),
        video=VideoRow(tokens=8, stream=(1, 32, 32), grid=(2, 2, 2)),
        native={
            "vision": "model.visual", "projector": "model.visual.merger",
            "vision.patch_embed": "model.visual.patch_embed",
            **blocks("vision.layers", "model.visual.blocks", {**QWEN_VIT_BLOCK, "mlp.down_proj": "mlp.linear_fc2"}),
            **text_model("model.language_model", {"mlp": "mlp", "input_layernorm": "input_layernorm",
                "post_attention_layernorm": "post_attention_layernorm"}),
            "layers.1.self_attn": "model.language_model.layers.1.self_attn",
            "layers.0.linear_attn": "model.language_model.layers.0.linear_attn",
            "layers.1.mlp.shared_expert_gate": "model.language_model.layers.1.mlp.shared_expert_gate",
        },
        # the text model's routers: blocks 0 and 1 mixtures of 4 experts, 2 a token
        moe=MoeRow(sparse=(0, 1), experts=4, top_k=2),
    ),
}
