"""A tiny Muse Spark checkpoint: Muse Glimmer's tower and host, on a text model whose blocks gate the residual stream.

The processor is the stock ``MuseSparkProcessor`` with Muse Glimmer's stock
image and video processors (`envoys.testing.muse_glimmer`: patch 8, merged
2x2, a 32x32 image 4 image tokens, 48 high x 64 wide 12), the stock
``MuseSparkFeatureExtractor`` for audio, and a word-level tokenizer holding
the tokens the processor writes (the Muse vision tokens and the audio ones).
"""

from __future__ import annotations

import torch
from transformers import (
    MuseSparkConfig,
    MuseSparkFeatureExtractor,
    MuseSparkForConditionalGeneration,
    MuseSparkProcessor,
)

from .contract import (
    PER_IMAGE_PATTERN,
    QWEN_VIT_BLOCK,
    SIGLIP,
    TEXT_BLOCK,
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
from .muse_glimmer import (
    CHAT_TEMPLATE,
    MERGE,
    TURN_TOKENS,
    VISION_TOKENS,
    muse_image_processor,
    muse_video_processor,
    muse_vision,
)
from .norms import randomise_norms
from .rope import rope
from .sizes import text_sizes
from .tokenizer import TokenizersBackend, word_level_tokenizer

#: The audio tokens ``MuseSparkProcessor`` writes.
AUDIO_TOKENS = ["<|audio|>", "<|soft_audio_start|>", "<|soft_audio_end|>"]
#: The spread of each residual gate's parameter (transformers draws it from N(0, 0.02), where every gate is nearly
#: alpha 0.87, beta 0.5): N(0, 1), divided by the temperature 0.3, puts beta anywhere in (0, 1) channel by channel.
GATE_SPREAD = 1.0


def muse_spark_tokenizer() -> TokenizersBackend:
    """The turn tokens, the vision tokens and the audio tokens the Muse Spark processor writes, special."""
    return word_level_tokenizer(
        special_tokens=[*TURN_TOKENS, *VISION_TOKENS, *AUDIO_TOKENS],
        named_tokens={"image_token": "<|patch|>"},
        chat_template=CHAT_TEMPLATE,
        bos_token="<|begin_of_text|>",
        eos_token="<|eot|>",
        pad_token="<|pad|>",
    )


def randomise_residual_gates(model: torch.nn.Module) -> None:
    """Draw every residual gate's parameter from N(0, `GATE_SPREAD`), so each channel has its own alpha and beta."""
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("_residual_gate.gate"):
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * GATE_SPREAD)


def build_muse_spark() -> tuple[MuseSparkForConditionalGeneration, MuseSparkProcessor]:
    """Imitates meta-models/Muse-Spark-Open-816B-A42B.

    Tower, adapter, projection and embedding norm: Muse Glimmer's
    (`envoys.testing.muse_glimmer.build_muse_glimmer`). Text: 2 blocks, width
    32, 2 query heads / 1 key-value head of 16, gated attention with a
    weightless q/k RMSNorm and a weightless norm of the heads' output; block 0
    sliding (window 16, RoPE), block 1 global with no position embedding;
    block 0's MLP dense (64 wide), block 1's a mixture of 4 experts, 2 a token
    (the block's stream pooled to 16 wide and normed, each expert 32 wide
    and normed after, unpooled to 32), its router's logits times
    ``output_multiplier`` 0.5 before a sigmoid (no score-correction bias:
    zero, transformers' init). Each sublayer's output is normed
    (``post_attention_layernorm`` weightless, ``post_feedforward_layernorm``
    scaled before it norms) and joins the stream through a residual gate,
    ``alpha * residual + beta * normed`` per channel, its parameter drawn
    from N(0, 1) (`randomise_residual_gates`), temperature 0.3. Logits times
    ``output_multiplier`` 0.5 then soft-capped at 20. Audio tower: 4 stages of
    widths 8, 8, 16, 32, one conv block each, patch sizes 16, 6, 5, 4 (1920
    samples a token), output 32 wide. Every norm with a weight has it drawn at
    random.
    """
    tokenizer = muse_spark_tokenizer()
    config = MuseSparkConfig(
        text_config=text_sizes(
            tokenizer,
            head_dim=16,
            sliding_window=16,
            layer_types=["sliding_attention", "full_attention"],
            mlp_layer_types=["dense", "sparse"],
            num_local_experts=4,
            num_experts_per_tok=2,
            moe_hidden_size=16,
            moe_intermediate_size=32,
            output_multiplier=0.5,
            **rope(10_000.0),
        ),
        vision_config=muse_vision(),
        audio_config={"hidden_sizes": [8, 8, 16, 32], "depths": [1, 1, 1, 1], "out_hidden_size": 32},
        image_token_id=tokenizer.convert_tokens_to_ids("<|patch|>"),
        video_token_id=tokenizer.convert_tokens_to_ids("<|video|>"),
        audio_token_id=tokenizer.convert_tokens_to_ids("<|audio|>"),
        out_hidden_size=32 * MERGE * MERGE,
        projector_hidden_size=48,
    )
    model = MuseSparkForConditionalGeneration(config)
    randomise_norms(model)
    randomise_residual_gates(model)
    processor = MuseSparkProcessor(image_processor=muse_image_processor(), video_processor=muse_video_processor(),
                                   feature_extractor=MuseSparkFeatureExtractor(), tokenizer=tokenizer,
                                   chat_template=CHAT_TEMPLATE)
    return model, processor


#: The checkpoints this module builds, by name.
BUILDERS = {"muse_spark": build_muse_spark}


#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builders' documented
#: configurations above, never off the code under test.
CONTRACTS = {
    # The tower is Muse Glimmer's (envoys/testing/muse_glimmer.py): patch 8, merged 2x2, a 32x32 image 16 patches and 4
    # tokens, 64 wide x 48 high 48 and 12; block 0 in windows of 4x4 patches, block 1 per image; ln_post after the window
    # order is undone, a pixel shuffle, the adapter, a projection and a norm. Each text block has two residual gates; block
    # 1's MLP is a mixture of 4 experts, 2 a token, whose router multiplies its logits by output_multiplier, 0.5.
    "muse_spark": Row(
        loads=Loads(("MuseSparkForConditionalGeneration", "MuseSparkProcessor", "TokenizersBackend")),
        image_tokens=(4, 12),
        sizes=Sizes(num_layers=2, patch_size=8, image_size="image_grid_thw", **SIGLIP),
        stream=packed(16, 48),
        projected=flat((1, 4), (1, 12)),
        projector_reads=None,
        final_norm=True,
        restores_window_order=True,
        features_are_projected=False,
        pattern=PER_IMAGE_PATTERN,
        rules=(scatter("muse_spark"), "muse_spark.vision-windows", "muse_spark.vision-attention",
               "muse_spark.residual-gate", *attention("muse_spark", "MuseSparkTextAttention"),
               router("muse_spark", "MuseSparkTopkRouter")),
        moe=MoeRow(sparse=(1,), experts=4, top_k=2, logits_scale=0.5),
        text_gaps={"mlp.router_logits": (0,)},
        native={
            "vision": "model.vision_tower", "projector": "model.vision_projection",
            "vision.norm": "model.vision_tower.ln_post",
            **blocks("vision.layers", "model.vision_tower.layers", {**QWEN_VIT_BLOCK, "mlp.up_proj": "mlp.fc1",
                "mlp.down_proj": "mlp.fc2"}),
            **text_model("model.language_model", {**TEXT_BLOCK, "attention_gate": "post_attention_residual_gate",
                                                  "mlp_gate": "post_feedforward_residual_gate"}),
        },
    ),
}
