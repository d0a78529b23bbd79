"""A tiny Mistral Large 4 checkpoint: Mistral 3's Pixtral tower and projector on an MLA / sparse-attention / MoE text model.

The builder returns an unsaved (`MistralLarge4ForConditionalGeneration`,
`PixtralProcessor`) pair with random float32 weights (seed the torch
generator first; :func:`envoys.testing.build` does). The tower, the projector,
the processor and the tokenizer are the tiny Mistral 3's (`envoys.testing.pixtral`):
a 32x32 image is 8x8 = 64 patches and 4x4 = 16 image tokens, a 48 (high) x 64
(wide) image 12x16 = 192 patches and 6x8 = 48 image tokens.

The text model is Mistral Large 4's: 2 blocks of width 32, each with
multi-head latent attention (2 heads; queries of 8 + 8 dims without and with
rotary positions, keys and values expanded from a 16-wide latent, values 12
wide) whose keys are chosen by a DeepSeek sparse-attention indexer (2 heads of
16; each query attends to its top `INDEX_TOPK` = 8 keys by the indexer's
score), then a dense gated MLP 64 wide on block 0 and, on block 1, a
mixture of 4 routed experts (2 per token, 32 wide) plus one shared expert.
The root soft-caps the logits at 30. Every parameter the model initialises to
an identity (LeRoPE's ``alpha`` at 0, the softmax scalings' ``scale`` at 0 and
``bias`` at 1, the norms' weights at 1) is drawn, so each does something.
"""

from __future__ import annotations

import torch
from transformers import (
    MistralLarge4Config,
    MistralLarge4ForConditionalGeneration,
    MistralLarge4TextConfig,
    PixtralProcessor,
)

from .contract import (
    PIXTRAL_ATTENTION,
    PIXTRAL_BLOCK,
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
from .pixtral import PATCH_SIZE, WRAPPER, mistral_tokenizer, pixtral_processor, pixtral_tower
from .sizes import text_sizes

#: Mistral Large 4's YaRN over a 512-token pretraining window (its config's default), here stretched to the tiny
#: model's 1024 positions.
YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "original_max_position_embeddings": 512, "beta_fast": 32.0,
        "beta_slow": 1.0, "attention_factor": 1.0}

#: Keys each query attends to, as the indexer picks them: fewer than a prompt's tokens, so the attention is sparse.
INDEX_TOPK = 8


def randomise_identities(model: torch.nn.Module) -> None:
    """Draw the parameters Mistral Large 4 initialises to the identity: LeRoPE's ``alpha`` (the log-scale of the
    rotary frequencies) from N(0, 0.1), each softmax scaling's ``scale`` from N(0, 0.1) and ``bias`` from U(0.5, 1.5),
    and every norm's weight (`randomise_norms`)."""
    randomise_norms(model)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("rotary_emb.alpha") or name.endswith("softmax_scaling.scale"):
                parameter.normal_(0.0, 0.1)
            elif name.endswith("softmax_scaling.bias"):
                parameter.uniform_(0.5, 1.5)


def build_mistral_large4() -> tuple[MistralLarge4ForConditionalGeneration, PixtralProcessor]:
    """Imitates mistralai/Mistral-Large-4-1T-A52B.

    Pixtral tower and projector as the tiny Mistral 3's (`envoys.testing.pixtral`: patch 4, a 2x2 merge, the projector
    reading the last block). Text model: 2 blocks of width 32, 2 heads of multi-latent attention (``kv_lora_rank``
    16, ``qk_nope_head_dim`` 8, ``qk_rope_head_dim`` 8, ``v_head_dim`` 12) with a sparse-attention indexer keeping 8
    keys a query (2 heads of 16), block 0 a dense MLP 64 wide, block 1 a mixture of 4 experts, 2 a token, 32 wide,
    and one shared expert; untied head, logits soft-capped at 30.
    """
    tokenizer = mistral_tokenizer()
    text = MistralLarge4TextConfig(**text_sizes(
        tokenizer,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        rope_parameters={**YARN, "factor": 1024 / YARN["original_max_position_embeddings"]},
        kv_lora_rank=16,
        qk_nope_head_dim=8,
        qk_rope_head_dim=8,
        v_head_dim=12,
        index_topk=INDEX_TOPK,
        index_n_heads=2,
        index_head_dim=16,
        first_k_dense_replace=1,
        n_routed_experts=4,
        num_experts_per_tok=2,
        n_shared_experts=1,
        moe_intermediate_size=32,
        tie_word_embeddings=False,
    ))
    config = MistralLarge4Config(
        vision_config=pixtral_tower(PATCH_SIZE).to_dict(),
        text_config=text.to_dict(),
        image_token_index=tokenizer.image_token_id,
        **WRAPPER,
    )
    processor = pixtral_processor(tokenizer)
    model = MistralLarge4ForConditionalGeneration(config)
    randomise_identities(model)
    return model, processor


#: The checkpoints this module builds, by name.
BUILDERS = {"mistral_large4": build_mistral_large4}


#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builders' documented
#: configurations above, never off the code under test.
CONTRACTS = {
    # envoys/testing/mistral_large4.py: Mistral 3's tower, processor and projector (64 and 192 patches, 16 and 48 tokens,
    # the last block's packed row); the text model's latent attention on DeepSeek-V3.2's eager kernel; text block 0's
    # MLP dense (no router), block 1's a mixture of experts.
    "mistral_large4": Row(
        loads=Loads(("MistralLarge4ForConditionalGeneration", "PixtralProcessor", "TokenizersBackend")),
        image_tokens=(16, 48),
        sizes=Sizes(num_layers=2, patch_size=4, image_size="image_sizes", **SIGLIP),
        stream=packed(64, 192),
        projected=flat((1, 16), (1, 48)),
        projector_reads=Reads("layer_output", block=-1, unbatched=True),
        text_gaps={"mlp.router_logits": (0,)},
        rules=(scatter("mistral_large4"), *PIXTRAL_ATTENTION,
               *attention("mistral_large4", "MistralLarge4TextAttention"),
               router("mistral_large4", "MistralLarge4TextTopkRouter")),
        native={
            "vision": "model.vision_tower", "projector": "model.multi_modal_projector",
            "vision.patch_embed": "model.vision_tower.patch_conv",
            **blocks("vision.layers", "model.vision_tower.transformer.layers", PIXTRAL_BLOCK),
            **text_model("model.language_model"),
        },
        # the text model's routers: block 1 a mixture of 4 experts, 2 a token
        moe=MoeRow(sparse=(1,), experts=4, top_k=2),
    ),
}
