"""A tiny Qwen3-VL-MoE checkpoint: Qwen3-VL's tower and DeepStack on a mixture-of-experts text model.

The tower, tokenizer and processor are Qwen3-VL's (`envoys.testing.qwen`; the
stock ``Qwen3VLProcessor`` that the Qwen3-VL-MoE checkpoints name, with
Qwen3-VL's image and video processors). Patch 8, merged 2x2: a 32x32 image
is 16 patches and 4 image tokens, 48 high x 64 wide 48 patches and 12 tokens.
"""

from __future__ import annotations

import torch
from transformers import Qwen3VLMoeConfig, Qwen3VLMoeForConditionalGeneration, Qwen3VLProcessor

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
#: The text blocks whose MLP is dense (``mlp_only_layers``): block 1; block 0 is a mixture of experts.
DENSE = [1]


def build_qwen3_vl_moe() -> tuple[Qwen3VLMoeForConditionalGeneration, Qwen3VLProcessor]:
    """Imitates Qwen/Qwen3-VL-30B-A3B-Instruct.

    Tower: Qwen3-VL's, 2 blocks, width 32, 2 heads, patch 8, 16 learned
    position embeddings, DeepStack tapping block 0
    (``deepstack_visual_indexes`` [0]: its merged feature is added after text
    block 0). Text: 2 layers, width 32, 2 query heads / 1 key-value head,
    head_dim 16, interleaved M-RoPE sections [4, 2, 2], tied embeddings;
    block 0's MLP a mixture of 4 experts (``moe_intermediate_size`` 32), 2 a
    token, no shared expert; block 1's a dense MLP 64 wide (``mlp_only_layers``
    [1]: the real checkpoint has none dense, the config allows it, and a
    dense block shows what the surface says of one). The routers' weights are
    drawn from N(0, 1) (their init's 0.02 leaves every token's scores nearly
    equal) and every norm's weight at random.
    """
    tokenizer = _tokenizer()
    config = Qwen3VLMoeConfig(
        text_config=_text(
            tokenizer,
            head_dim=16,
            **rope(5_000_000.0, mrope_section=[4, 2, 2], mrope_interleaved=True),
            num_experts=EXPERTS,
            num_experts_per_tok=TOP_K,
            moe_intermediate_size=32,
            decoder_sparse_step=1,
            mlp_only_layers=DENSE,
            tie_word_embeddings=True,
        ),
        vision_config=_qwen3_vision(PATCH, depth=2, deepstack_visual_indexes=[0]),
        tie_word_embeddings=True,
        **_token_ids(tokenizer),
    )
    model = Qwen3VLMoeForConditionalGeneration(config)
    with torch.no_grad():
        for layer in model.model.language_model.layers:
            gate = getattr(layer.mlp, "gate", None)
            if gate is not None:
                gate.weight.normal_(0.0, 1.0)
    randomise_norms(model)
    return model, _qwen3_processor(PATCH, tokenizer)


#: The checkpoints this module builds, by name.
BUILDERS = {"qwen3_vl_moe": build_qwen3_vl_moe}


#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builders' documented
#: configurations above, never off the code under test.
CONTRACTS = {
    # envoys/testing/qwen3_vl_moe.py: qwen3_vl's tower with 2 blocks, patch 8; DeepStack taps block 0, added after text
    # block 0 of 2; text block 0 a mixture of 4 experts, block 1 dense (mlp_only_layers [1]).
    "qwen3_vl_moe": Row(
        loads=Loads(("Qwen3VLMoeForConditionalGeneration", "Qwen3VLProcessor", "TokenizersBackend")),
        image_tokens=(4, 12),
        sizes=Sizes(num_layers=2, patch_size=8, image_size="image_grid_thw", **SIGLIP),
        stream=packed(16, 48),
        projected=flat((1, 4), (1, 12)),
        projector_reads=Reads("layer_output", block=-1, unbatched=True),
        pattern=PER_IMAGE_PATTERN,
        deepstack_taps=1,
        vision_unavailable=NO_WINDOWS,
        text_gaps={"deepstack_output": (1,), "mlp.router_logits": (1,)},
        rules=(scatter("qwen3_vl_moe"), "qwen3_vl_moe.vision-attention", "qwen3_vl_moe.deepstack",
               *attention("qwen3_vl_moe", "Qwen3VLMoeTextAttention"), router("qwen3_vl_moe", "Qwen3VLMoeTextTopKRouter")),
        video=VideoRow(tokens=8, stream=(1, 32, 32), grid=(2, 2, 2)),
        native={
            "vision": "model.visual", "projector": "model.visual.merger",
            "vision.patch_embed": "model.visual.patch_embed",
            **blocks("vision.layers", "model.visual.blocks", {**QWEN_VIT_BLOCK, "mlp.down_proj": "mlp.linear_fc2"}),
            **text_model("model.language_model"), "layers.0.mlp.gate": "model.language_model.layers.0.mlp.gate",
        },
        # the text model's routers: block 0 a mixture of 4 experts, 2 a token
        moe=MoeRow(sparse=(0,), experts=4, top_k=2),
    ),
}
