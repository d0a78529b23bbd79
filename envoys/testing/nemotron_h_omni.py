"""A tiny Nemotron-H Omni checkpoint: a RADIO tower on a NemotronH (Mamba2 / attention / MoE) text model.

The builder returns an unsaved (`NemotronH_Omni_Reasoning_V3`,
`NemotronH_Omni_Reasoning_V3Processor`) pair with random float32 weights
(seed the torch generator first; :func:`envoys.testing.build` does), with the
family's stock image processor (torchvision), video processor and audio
feature extractor, and a tiny Parakeet sound encoder (``audio_tower``) with
its projector (``embed_audio``).

The image processor keeps an image's own patch grid when both sides are
multiples of 16 pixels (``patch_size`` 8 times the pixel-shuffle merge of 2)
and the grid holds 4 to 256 patches, so a 32x32 image is a 4x4 grid (16
patches, 4 image tokens) and a 64-wide, 48-high one a 6x8 grid (48 patches,
12 image tokens). The tower puts 2 cls and 3 register tokens before each
image's patches.

Videos: the video processor keeps every frame (no sampling), resizes each,
keeping its aspect ratio, to a patch grid near ``video_target_num_patches``
(16), sides even (a square frame of any size: 4x4 patches, 32x32 pixels),
normalises it with ``norm_mean``/``norm_std`` (CLIP's, as the image
processor's; the class leaves them None and cannot run) and packs every 2
consecutive frames into one tubelet of 6 channels (an odd last frame
repeated): ``pixel_values_videos`` ``[videos, tubelets, 6, h, w]``. The
processor writes each tubelet as ``Frame i and frame i+1: `` +
``<img>`` + 4 ``<image>`` tokens + ``</img>`` (a square frame: 16 patches, 4
tokens after the 2x2 pixel shuffle), so a video of F square frames is
ceil(F / 2) x 4 tokens (4 frames: 8). Those are the IMAGE token
(``image_token_id``): ``<video>`` is only the template's placeholder, no
position of ``input_ids`` holds ``video_token_id``, and the host's video
scatter (``inputs_embeds_masked_scatter_1``) masks the image-token positions
too. An image and a video in one prompt fail in transformers (the video
scatter's mask counts the image's tokens as well).

Audio: the Parakeet feature extractor turns 16 kHz audio into 80-bin mel
frames every 10 ms (1 + samples // 160: a second is 101), and the sound
encoder subsamples them by 8 (three stride-2 convolutions), so a second of
audio is 13 ``<so_embedding>`` tokens (``audio_token_id``; 2 s: 26, about
12.5 a second), written between ``<so_start>`` and ``<so_end>``; the host
scatters them at ``inputs_embeds_masked_scatter_2``.
"""

from __future__ import annotations

import torch
from transformers import (
    AutoConfig,
    NemotronH_Omni_Reasoning_V3,
    NemotronH_Omni_Reasoning_V3_Config,
    NemotronH_Omni_Reasoning_V3ImageProcessor,
    NemotronH_Omni_Reasoning_V3Processor,
    NemotronH_Omni_Reasoning_V3VideoProcessor,
    ParakeetFeatureExtractor,
    PretrainedConfig,
)
from transformers.image_utils import OPENAI_CLIP_MEAN, OPENAI_CLIP_STD

from .contract import PER_IMAGE_PATTERN, SIGLIP, AudioRow, Loads, MoeRow, Row, Sizes, attention, blocks, flat, packed, router, scatter, text_model
from .norms import randomise_norms
from .tokenizer import TokenizersBackend, word_level_tokenizer

PATCH_SIZE = 8

#: ChatML; each image is ``<image>``, each video ``<video>`` and each audio clip ``<so_embedding>`` on its own line (the
#: processor's ``image_token``, ``video_token`` and ``audio_token``), which the processor expands: an image to
#: ``<img><image>...</img>``, a video to one such ``<img><image>...</img>`` run per tubelet after its frame labels (the
#: image token, not ``<video>``), an audio clip to ``<so_start><so_embedding>...<so_end>``.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for item in message['content'] %}"
    "{% if item['type'] == 'image' %}{{ '<image>\n' }}"
    "{% elif item['type'] == 'video' %}{{ '<video>\n' }}"
    "{% elif item['type'] == 'audio' %}{{ '<so_embedding>\n' }}"
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
    """The tower's layer scales (init: all ``layerscale_value``) and linear biases (init: zero), the sound encoder's
    biases (init: zero) and norms (init: ones and zeros), and the audio projector's norm, drawn at random.

    With them constant a block's attention and MLP outputs would equal the
    layer scales' outputs, and a value read at the wrong one would pass.
    """
    with torch.no_grad():
        for name, parameter in model.vision_model.named_parameters():
            if name.endswith("lambda1"):
                parameter.uniform_(0.5, 1.5)
            elif name.endswith("bias"):
                parameter.normal_(0.0, 0.02)
        for name, parameter in model.audio_tower.named_parameters():
            if name.endswith("bias"):
                parameter.normal_(0.0, 0.02)
    randomise_norms(model.audio_tower)
    randomise_norms(model.embed_audio)


def _parakeet() -> PretrainedConfig:
    """A tiny Parakeet (FastConformer) sound encoder: 2 blocks, width 32, 2 heads, feed-forward 64, subsampling by 8
    through convolutions 16 channels wide, over the feature extractor's 80 mel bins; the host's audio projector
    (``embed_audio``) reads ``projection_hidden_size`` and ``projection_bias`` off this config too."""
    return AutoConfig.for_model(
        "parakeet_encoder",
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        subsampling_conv_channels=16,
        num_mel_bins=80,
        attention_bias=False,
        scale_input=False,
        projection_hidden_size=64,
        projection_bias=False,
    )


def build_nemotron_h_omni() -> tuple[NemotronH_Omni_Reasoning_V3, NemotronH_Omni_Reasoning_V3Processor]:
    """Imitates nvidia/Nemotron-3-Nano-Omni-30B-A3B-Reasoning-BF16.

    RADIO tower: 2 blocks, width 32, 2 heads, MLP 64 wide (``mlp_ratio`` 2),
    patch 8, a position table for images up to 64 pixels a side, 2 cls and 3
    register tokens per image, video tubelets of 2 frames (its own patch
    projection). Projector: pixel shuffle 2x2 (``downsample_ratio`` 0.5),
    RMSNorm over 128, 64 wide, to the text width 32. NemotronH text model:
    width 32, four blocks of one mixer each, ``layers_block_type`` Mamba2
    (``linear_attention``), MoE, attention (``full_attention``), MoE (the real
    checkpoint's pattern begins Mamba2, MoE, Mamba2, ..., with an attention
    block every few); attention with 2 query heads / 1 key-value head of
    dim 16; Mamba2 with 4 heads of dim 8, 2 groups, state 8, conv kernel 4,
    chunks of 16; MoE with 4 routed experts (2 per token) 16 wide and a
    shared expert 16 wide. Sound encoder (`_parakeet`): 2 FastConformer
    blocks of width 32, 2 heads, feed-forward 64, subsampling by 8; audio
    projector RMSNorm over 32, 64 wide, to the text width 32. Its biases and
    norms are drawn at random.
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
        audio_config=_parakeet(),
    )
    processor = NemotronH_Omni_Reasoning_V3Processor(
        image_processor=NemotronH_Omni_Reasoning_V3ImageProcessor(
            patch_size=PATCH_SIZE, downsample_ratio=0.5, min_num_patches=4, max_num_patches=256
        ),
        video_processor=NemotronH_Omni_Reasoning_V3VideoProcessor(
            patch_size=PATCH_SIZE,
            downsample_ratio=0.5,
            video_target_num_patches=16,
            norm_mean=OPENAI_CLIP_MEAN,  # the checkpoint's (its image processor's image_mean); the class default is None
            norm_std=OPENAI_CLIP_STD,
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


#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builders' documented
#: configurations above, never off the code under test.
CONTRACTS = {
    # envoys/testing/nemotron_h_omni.py: RADIO, packed, 8 px patches, 2 cls + 3 register rows before each image's
    # patches; 32x32 is a 4x4 grid (16 patches, 4 tokens), 64 wide x 48 high 6x8 (48, 12); no final norm; the
    # projector reads the patch rows pixel-shuffled. Text blocks: Mamba2, MoE, attention, MoE. Its Parakeet sound
    # encoder's attention is on the shared interface, so the attention rules are found there too.
    "nemotron_h_omni": Row(
        loads=Loads(("NemotronH_Omni_Reasoning_V3", "NemotronH_Omni_Reasoning_V3Processor", "TokenizersBackend")),
        image_tokens=(4, 12),
        sizes=Sizes(num_layers=2, patch_size=8, image_size="image_grid_hw", **SIGLIP),
        stream=packed(5 + 16, 5 + 48),
        projected=flat((1, 4), (1, 12)),
        projector_reads=None,
        prefix=5,
        pattern=PER_IMAGE_PATTERN,
        text_gaps={"attention_output": (0, 1, 3), "self_attn.": (0, 1, 3), "mlp_output": (0, 2), "mlp.": (0, 2)},
        rules=(scatter("nemotron_h_omni"), "radio.vision-attention", "radio.eager-attention", *attention("nemotron_h", "NemotronHAttention"),
               router("nemotron_h", "NemotronHTopkRouter"), *attention("parakeet", "ParakeetEncoderAttention")),
        # envoys/testing/nemotron_h_omni.py: Parakeet, 101 mel frames subsampled 8x before the blocks: 13 frames and tokens.
        audio=AudioRow(tokens=13, stream=(1, 13, 32), output=(1, 13, 32)),
        native={
            "vision": "vision_model", "projector": "multi_modal_projector",
            "vision.patch_embed": "vision_model.embeddings.patch_projection",
            **blocks("vision.layers", "vision_model.encoder.layer", {"self_attn": "attention",
                "self_attn.o_proj": "attention.o_proj", "input_layernorm": "norm1", "post_attention_layernorm": "norm2",
                "mlp": "mlp", "mlp.up_proj": "mlp.fc1", "mlp.down_proj": "mlp.fc2"}),
            **text_model("language_model.model", {}, norm="norm_f", embed_tokens="embeddings"),
            "layers.2.self_attn": "language_model.model.layers.2.mixer",
            "layers.1.mlp": "language_model.model.layers.1.mixer",
            "layers.3.mlp": "language_model.model.layers.3.mixer",
            "layers.2.input_layernorm": "language_model.model.layers.2.norm",
            "layers.1.post_attention_layernorm": "language_model.model.layers.1.norm",
            "layers.3.post_attention_layernorm": "language_model.model.layers.3.norm",
            "lm_head": "language_model.lm_head",
        },
        # the text model's routers: blocks 1 and 3 of 4 mixtures of 4 experts, 2 a token
        moe=MoeRow(sparse=(1, 3), experts=4, top_k=2),
    ),
}
