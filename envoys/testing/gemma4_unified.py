"""A tiny Gemma 4 Unified checkpoint: no vision tower, its vision embedder projecting raw patches into a Gemma 4 text model.

The builder returns an unsaved (`Gemma4UnifiedForConditionalGeneration`,
`Gemma4UnifiedProcessor`) pair with random float32 weights (seed the torch
generator first; :func:`envoys.testing.build` does). No audio embedder
(``audio_config=None``); the processor still carries its stock audio feature
extractor and video processor, and its tokenizer (Gemma 4's tiny one, the same
chat template and special tokens) the begin/end-of-audio tokens it insists on.

Images: the stock image processor resizes each image, keeping its aspect
ratio, to fill a budget of ``max_soft_tokens * pooling_kernel_size**2`` patches
of ``patch_size`` pixels (here 70 * 2**2 = 280 patches of 4x4 pixels), sides
multiples of ``pooling_kernel_size * patch_size`` (8 pixels), merges each 2x2
block of patches into one flat 8x8-pixel patch (``3 * 8**2 = 192`` values), in
raster order over the merged grid, and pads the patch axis with zero patches
at position (-1, -1) to exactly ``max_soft_tokens`` = 70 rows. Each real merged
patch is one image token: a 32x32 image becomes 64x64 pixels, 8x8 = 64 merged
patches and image tokens; a 48 (high) x 64 (wide) one becomes 56x72 pixels,
7x9 = 63.
"""

from __future__ import annotations

import torch
from transformers import (
    Gemma4UnifiedAudioFeatureExtractor,
    Gemma4UnifiedConfig,
    Gemma4UnifiedForConditionalGeneration,
    Gemma4UnifiedImageProcessor,
    Gemma4UnifiedProcessor,
    Gemma4UnifiedTextConfig,
    Gemma4UnifiedVideoProcessor,
    Gemma4UnifiedVisionConfig,
)

from .contract import NO_BLOCKS, Loads, PatternRow, Row, Sizes, attention, batched, scatter, text_model
from .gemma4 import CHAT_TEMPLATE, MAX_SOFT_TOKENS, PATCH_SIZE, POOLING_KERNEL_SIZE, _tokenizer
from .norms import randomise_norms

#: The embedder's width (the vision config's mm_embed_dim and output_proj_dims), apart from the text model's 32.
EMBED_DIM = 48


def build_gemma4_unified() -> tuple[Gemma4UnifiedForConditionalGeneration, Gemma4UnifiedProcessor]:
    """Imitates google/gemma-4-12B-it (model_type gemma4_unified), the image path only.

    Vision embedder: no blocks; patch 4, 2x2 merge (merged patches of 8x8
    pixels, 192 values), width 48 (``mm_embed_dim`` = ``output_proj_dims``),
    a position table of 16 per axis, 70 padded patch rows (``max_soft_tokens``).
    Text model: 4 blocks of width 32 ("sliding", "full", "sliding", "full"), 2
    query heads / 1 key-value head of 16 on every block (``global_head_dim`` 16
    on the full ones), MLP 64 wide, no KV sharing, tied embeddings, image tokens
    attending to each other both ways on the sliding blocks
    (``use_bidirectional_attention="vision"``, the config's default). The
    embedder's layer norms and each text block's ``layer_scalar`` are
    randomised so that they are not identities.
    """
    image_processor = Gemma4UnifiedImageProcessor(
        patch_size=PATCH_SIZE, max_soft_tokens=MAX_SOFT_TOKENS, pooling_kernel_size=POOLING_KERNEL_SIZE
    )
    video_processor = Gemma4UnifiedVideoProcessor(
        patch_size=PATCH_SIZE, max_soft_tokens=MAX_SOFT_TOKENS, pooling_kernel_size=POOLING_KERNEL_SIZE, num_frames=2
    )
    processor = Gemma4UnifiedProcessor(
        feature_extractor=Gemma4UnifiedAudioFeatureExtractor(),
        image_processor=image_processor,
        tokenizer=_tokenizer(),
        video_processor=video_processor,
        chat_template=CHAT_TEMPLATE,
        image_seq_length=MAX_SOFT_TOKENS,
    )
    tokenizer = processor.tokenizer  # the processor adds its video token to it
    vocab = len(tokenizer)
    vision = Gemma4UnifiedVisionConfig(
        patch_size=PATCH_SIZE,
        pooling_kernel_size=POOLING_KERNEL_SIZE,
        mm_embed_dim=EMBED_DIM,
        output_proj_dims=EMBED_DIM,
        mm_posemb_size=16,
    )
    text = Gemma4UnifiedTextConfig(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=4,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        global_head_dim=16,
        layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
        sliding_window=16,
        max_position_embeddings=1024,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
        tie_word_embeddings=True,
    )
    config = Gemma4UnifiedConfig(
        text_config=text,
        vision_config=vision,
        audio_config=None,
        image_token_id=tokenizer.image_token_id,
        boi_token_id=tokenizer.convert_tokens_to_ids("<|image>"),
        eoi_token_id=tokenizer.convert_tokens_to_ids("<image|>"),
        video_token_id=processor.video_token_id,
        audio_token_id=tokenizer.convert_tokens_to_ids("<|audio|>"),
        boa_token_id=tokenizer.convert_tokens_to_ids("<|audio>"),
        eoa_token_index=tokenizer.convert_tokens_to_ids("<audio|>"),
        tie_word_embeddings=True,
    )
    model = Gemma4UnifiedForConditionalGeneration(config)
    with torch.no_grad():
        randomise_norms(model.model.embed_vision)
        for layer in model.model.language_model.layers:
            layer.layer_scalar.copy_(torch.rand(1) + 0.5)
    return model, processor


#: The checkpoints this module builds, by name.
BUILDERS = {"gemma4_unified": build_gemma4_unified}


#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builders' documented
#: configurations above, never off the code under test.
CONTRACTS = {
    # envoys/testing/gemma4_unified.py: no tower blocks; every image's row padded to 70 merged 8x8-pixel patches
    # (max_soft_tokens), width 48; 32x32 has 8x8 = 64 real ones, 48 high x 64 wide 7x9 = 63, one image token each; the
    # projector (inside model.vision) gives every row, padding included, which the host drops. Text blocks: Gemma 4's,
    # no per-layer inputs.
    "gemma4_unified": Row(
        loads=Loads(("Gemma4UnifiedForConditionalGeneration", "Gemma4UnifiedProcessor", "TokenizersBackend")),
        image_tokens=(64, 63),
        sizes=Sizes(num_layers=0, vision_hidden_size=48, num_heads=0, head_dim=0, intermediate_size=0, patch_size=8,
                    image_size="image_position_ids"),
        stream=batched((1, 70), (1, 70)),
        projected=batched((1, 70), (1, 70)),
        projector_reads=None,
        pattern=PatternRow(unavailable=NO_BLOCKS, padded=True),
        features_are_projected=False,
        vision_unavailable={value: NO_BLOCKS for value in (
            "layer_input", "attention_output", "mlp_output", "layer_output", "self_attn.attention_output",
            "self_attn.attention_queries", "self_attn.attention_keys", "self_attn.attention_values",
            "self_attn.attention_head_outputs", "mlp.mlp_output")},
        text_gaps={"per_layer_input": (0, 1, 2, 3), "per_layer_output": (0, 1, 2, 3)},
        rules=(scatter("gemma4_unified"), *attention("gemma4_unified", "Gemma4UnifiedTextAttention")),
        native={
            "vision": "model.embed_vision", "projector": "model.embed_vision.multimodal_embedder",
            **text_model("model.language_model"),
        },
    ),
}
