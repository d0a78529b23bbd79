"""A tiny GLM-4.5V checkpoint (model_type glm4v_moe): GLM-4.1V's tower on a mixture-of-experts text model.

The tower, tokenizer and processor are GLM-4.1V's (`envoys.testing.glm`: the
stock ``Glm4vProcessor`` that transformers maps glm4v_moe to, with GLM-4.1V's
image and video processors). Patch 8, merged 2x2 by the convolution: a 32x32
image is 16 patches and 4 image tokens, 48 high x 64 wide 48 patches and 12
tokens.
"""

from __future__ import annotations

import torch
from transformers import (
    Glm4vImageProcessor,
    Glm4vMoeConfig,
    Glm4vMoeForConditionalGeneration,
    Glm4vProcessor,
    Glm4vVideoProcessor,
)

from .contract import (
    NO_WINDOWS,
    PER_IMAGE_PATTERN,
    QWEN_VIT_BLOCK,
    Loads,
    MoeRow,
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
from .glm import CHAT_TEMPLATE, _processing, _text, _token_ids, _tokenizer, _vision
from .norms import randomise_norms

EXPERTS = 4
TOP_K = 2
#: The text blocks whose MLP is dense (``first_k_dense_replace`` 1): block 0; block 1 is a mixture of experts.
DENSE = 1


def build_glm4v_moe() -> tuple[Glm4vMoeForConditionalGeneration, Glm4vProcessor]:
    """Imitates zai-org/GLM-4.5V.

    Tower: GLM-4.1V's (`envoys.testing.glm`'s module docstring: 2 blocks, width
    32, 2 heads of 16, patch 8, a final RMSNorm, a 2x2 convolution to 32 and
    the merger). Text: 2 plain pre-norm blocks (no post-norms, unlike
    GLM-4.1V's), width 32, 2 query heads / 1 key-value head of 16, half-rotary
    M-RoPE (sections [2, 1, 1]); block 0's MLP dense, 64 wide
    (``first_k_dense_replace`` 1); block 1's a mixture of 4 routed experts
    (``moe_intermediate_size`` 32), 2 a token, one expert group
    (``n_group`` = ``topk_group`` = 1) and no score-correction bias (zero, its
    init), so the router's choice is the top 2 of its logits, plus one shared
    expert 32 wide (``n_shared_experts`` 1) always added. The routers' weights
    are drawn from N(0, 1) (their init's 0.02 leaves every token's scores
    nearly equal) and every norm's weight at random (`randomise_norms`).
    """
    tokenizer = _tokenizer()
    config = Glm4vMoeConfig(
        text_config=_text(tokenizer) | {
            "n_routed_experts": EXPERTS,
            "num_experts_per_tok": TOP_K,
            "moe_intermediate_size": 32,
            "n_shared_experts": 1,
            "n_group": 1,
            "topk_group": 1,
            "first_k_dense_replace": DENSE,
        },
        vision_config=_vision(),
        **_token_ids(tokenizer),
    )
    processor = Glm4vProcessor(
        image_processor=Glm4vImageProcessor(**_processing()),
        tokenizer=tokenizer,
        video_processor=Glm4vVideoProcessor(**_processing()),
        chat_template=CHAT_TEMPLATE,
    )
    model = Glm4vMoeForConditionalGeneration(config)
    with torch.no_grad():
        for layer in model.model.language_model.layers:
            gate = getattr(layer.mlp, "gate", None)
            if gate is not None:  # the router of a sparse block; a dense block's MLP has none
                gate.weight.normal_(0.0, 1.0)
    randomise_norms(model)
    return model, processor


#: The checkpoints this module builds, by name.
BUILDERS = {"glm4v_moe": build_glm4v_moe}


#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builders' documented
#: configurations above, never off the code under test.
CONTRACTS = {
    # envoys/testing/glm4v_moe.py: GLM-4.1V's tower as envoys/testing/glm.py builds it (the rows above: packed, 16 and 48
    # patches, 4 and 12 tokens, a final norm, the convolution before the projector, its MLP out_hidden_size (32) wide);
    # text block 0 dense (first_k_dense_replace 1), block 1 a mixture of 4 experts and a shared expert.
    "glm4v_moe": Row(
        loads=Loads(("Glm4vMoeForConditionalGeneration", "Glm4vProcessor", "TokenizersBackend")),
        image_tokens=(4, 12),
        sizes=Sizes(num_layers=2, vision_hidden_size=32, num_heads=2, head_dim=16, intermediate_size=32, patch_size=8,
                    image_size="image_grid_thw"),
        stream=packed(16, 48),
        projected=flat((1, 4), (1, 12)),
        projector_reads=None,
        final_norm=True,
        pattern=PER_IMAGE_PATTERN,
        vision_unavailable=NO_WINDOWS,
        text_gaps={"mlp.router_logits": (0,)},
        rules=(scatter("glm4v_moe"), "glm4v_moe.vision-attention", *attention("glm4v_moe", "Glm4vMoeTextAttention"),
               router("glm4v_moe", "Glm4vMoeTextTopkRouter")),
        native={
            "vision": "model.visual", "projector": "model.visual.merger", "vision.norm": "model.visual.post_layernorm",
            "vision.patch_embed": "model.visual.patch_embed",
            **blocks("vision.layers", "model.visual.blocks", {**QWEN_VIT_BLOCK, "mlp.up_proj": "mlp.up_proj",
                "mlp.down_proj": "mlp.down_proj"}),
            **text_model("model.language_model"), "layers.1.mlp.gate": "model.language_model.layers.1.mlp.gate",
            "layers.1.mlp.shared_experts": "model.language_model.layers.1.mlp.shared_experts",
        },
        # the text model's routers: block 1 a mixture of 4 experts, 2 a token; one group, no score bias
        moe=MoeRow(sparse=(1,), experts=4, top_k=2),
    ),
}
