"""A tiny Nemotron-H Omni checkpoint: a RADIO tower on a NemotronH (Mamba2 / attention / MoE) text model.

The builder returns an unsaved (`NemotronH_Omni_Reasoning_V3`,
`NemotronH_Omni_Reasoning_V3Processor`) pair with random float32 weights
(seed the torch generator first; :func:`envoys.tiny.build` does), with the
family's stock image processor (torchvision), video processor and audio
feature extractor (the processor requires all three; the model has no audio
tower, ``audio_config`` None, so audio is off).

The image processor keeps an image's own patch grid when both sides are
multiples of 16 pixels (``patch_size`` 8 times the pixel-shuffle merge of 2)
and the grid holds 4 to 256 patches, so a 32x32 image is a 4x4 grid (16
patches, 4 image tokens) and a 64-wide, 48-high one a 6x8 grid (48 patches,
12 image tokens). The tower puts 2 cls and 3 register tokens before each
image's patches.
"""

from __future__ import annotations

import torch
from transformers import (
    NemotronH_Omni_Reasoning_V3,
    NemotronH_Omni_Reasoning_V3_Config,
    NemotronH_Omni_Reasoning_V3ImageProcessor,
    NemotronH_Omni_Reasoning_V3Processor,
    NemotronH_Omni_Reasoning_V3VideoProcessor,
    ParakeetFeatureExtractor,
)

from .tokenizer import TokenizersBackend, word_level_tokenizer

PATCH_SIZE = 8

#: ChatML; each image is ``<image>`` on its own line, which the processor expands to ``<img><image>...</img>``.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for item in message['content'] %}"
    "{% if item['type'] == 'image' %}{{ '<image>\n' }}"
    "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

#: The processor's attribute names for its tokens, and the tokens.
NAMED_TOKENS = {
    "image_token": "<image>",
    "image_start_token": "<img>",
    "image_end_token": "</img>",
    "video_token": "<video>",
    "audio_token": "<so_embedding>",
}


def _tokenizer() -> TokenizersBackend:
    return word_level_tokenizer(
        special_tokens=["<pad>", "<s>", "</s>", "<|im_start|>", "<|im_end|>", "<so_start>", "<so_end>"],
        named_tokens=NAMED_TOKENS,
        chat_template=CHAT_TEMPLATE,
        bos_token="<s>",
        eos_token="<|im_end|>",
        pad_token="<pad>",
    )


def _randomise_what_init_leaves_constant(model: NemotronH_Omni_Reasoning_V3) -> None:
    """The tower's layer scales (init: all ``layerscale_value``) and linear biases (init: zero), drawn at random.

    With them constant a block's attention and MLP outputs would equal the
    layer scales' outputs, and a value read at the wrong one would pass.
    """
    with torch.no_grad():
        for name, parameter in model.vision_model.named_parameters():
            if name.endswith("lambda1"):
                parameter.uniform_(0.5, 1.5)
            elif name.endswith("bias"):
                parameter.normal_(0.0, 0.02)


def build_nemotron_h_omni() -> tuple[NemotronH_Omni_Reasoning_V3, NemotronH_Omni_Reasoning_V3Processor]:
    """Imitates nvidia/Nemotron-3-Nano-Omni-30B-A3B-Reasoning-BF16 (without its audio tower).

    RADIO tower: 2 blocks, width 32, 2 heads, MLP 64 wide (``mlp_ratio`` 2),
    patch 8, a position table for images up to 64 pixels a side, 2 cls and 3
    register tokens per image, video patches of 2 frames (the video path is
    built, unused). Projector: pixel shuffle 2x2 (``downsample_ratio`` 0.5),
    RMSNorm over 128, 64 wide, to the text width 32. NemotronH text model:
    width 32, four blocks of one mixer each, ``layers_block_type`` Mamba2
    (``linear_attention``), MoE, attention (``full_attention``), MoE (the real
    checkpoint's pattern begins Mamba2, MoE, Mamba2, ..., with an attention
    block every few); attention with 2 query heads / 1 key-value head of
    dim 16; Mamba2 with 4 heads of dim 8, 2 groups, state 8, conv kernel 4,
    chunks of 16; MoE with 4 routed experts (2 per token) 16 wide and a
    shared expert 16 wide.
    """
    tokenizer = _tokenizer()
    ids = {name: tokenizer.convert_tokens_to_ids(token) for name, token in NAMED_TOKENS.items()}
    config = NemotronH_Omni_Reasoning_V3_Config(
        vision_config={
            "hidden_size": 32,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "mlp_ratio": 2.0,
            "patch_size": PATCH_SIZE,
            "max_img_size": 64,
            "num_cls_tokens": 2,
            "num_registers": 3,
            "summary_idxs": [0, 1],
            "video_temporal_patch_size": 2,
        },
        text_config={
            "vocab_size": len(tokenizer),
            "hidden_size": 32,
            "layers_block_type": ["linear_attention", "moe", "full_attention", "moe"],
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 16,
            "intermediate_size": 64,
            "mamba_num_heads": 4,
            "mamba_head_dim": 8,
            "n_groups": 2,
            "ssm_state_size": 8,
            "conv_kernel": 4,
            "chunk_size": 16,
            "n_routed_experts": 4,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 16,
            "moe_shared_expert_intermediate_size": 16,
            "max_position_embeddings": 512,
            "pad_token_id": tokenizer.pad_token_id,
            "bos_token_id": tokenizer.bos_token_id,
            "eos_token_id": tokenizer.eos_token_id,
        },
        vision_hidden_size=32,
        projector_hidden_size=64,
        downsample_ratio=0.5,
        video_temporal_patch_size=2,
        image_token_id=ids["image_token"],
        video_token_id=ids["video_token"],
        audio_token_id=ids["audio_token"],
    )
    processor = NemotronH_Omni_Reasoning_V3Processor(
        image_processor=NemotronH_Omni_Reasoning_V3ImageProcessor(
            patch_size=PATCH_SIZE, downsample_ratio=0.5, min_num_patches=4, max_num_patches=256
        ),
        video_processor=NemotronH_Omni_Reasoning_V3VideoProcessor(
            patch_size=PATCH_SIZE, downsample_ratio=0.5, video_target_num_patches=16
        ),
        tokenizer=tokenizer,
        feature_extractor=ParakeetFeatureExtractor(),
        chat_template=CHAT_TEMPLATE,
    )
    model = NemotronH_Omni_Reasoning_V3(config)
    _randomise_what_init_leaves_constant(model)
    return model, processor


#: The checkpoints this module builds, by name.
BUILDERS = {"nemotron_h_omni": build_nemotron_h_omni}
