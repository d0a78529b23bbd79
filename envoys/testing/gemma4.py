"""A tiny Gemma 4 checkpoint: its patch-padded tower on a Gemma 4 text model with per-layer inputs and KV sharing.

The builder returns an unsaved (`Gemma4ForConditionalGeneration`,
`Gemma4Processor`) pair with random float32 weights (seed the torch generator
first; :func:`envoys.testing.build` does), with the stock image processor, video
processor and audio feature extractor, and a tiny audio tower (a Gemma 4
conformer) beside the vision tower. The chat template writes an image, video
or audio entry as the processor's placeholder (``<|image|>``, ``<|video|>``,
``<|audio|>``), which the processor expands.

Images: the stock image processor resizes each image, keeping its aspect
ratio, to fill a budget of ``max_soft_tokens * pooling_kernel_size**2`` patches
of ``patch_size`` pixels (here 70 * 2**2 = 280 patches of 4x4 pixels), sides
multiples of ``pooling_kernel_size * patch_size`` (8 pixels), then cuts it into
flat patches and pads the patch axis with zero patches at position (-1, -1) to
exactly 280 rows. The tower's pooler averages each 2x2 block of real patches
into one soft token: a 32x32 image becomes 64x64 pixels, 256 real patches, 64
image tokens; a 48 (high) x 64 (wide) one becomes 56x72 pixels, 252 real
patches, 63 image tokens.

Videos: the video processor samples ``num_frames`` (2) frames, evenly spaced,
from each video (which must have at least 2), whatever the frame count given,
and makes each frame what it makes an image (a 32x32 frame: 64 tokens); the
processor writes each sampled frame as ``mm:ss <|image>`` + its ``<|video|>``
tokens + ``<image|>`` (the image begin/end tokens), frames separated by a
space. So a video of 32x32 frames is 2 x 64 = 128 ``<|video|>`` tokens
(``video_token_id``); the host runs the vision tower on the frames (frames as
its batch) and ``embed_vision``, as for images, and scatters them at
``inputs_embeds_masked_scatter_1``.

Audio: the feature extractor turns 16 kHz audio into 128-bin mel frames of
20 ms, hop 10 ms (a second: 99 frames); the audio tower's two stride-2
convolutions make 4 frames one token, so a second of audio is 25 ``<|audio|>``
tokens (``audio_token_id``; 40 ms a token, the processor's
``audio_ms_per_token``), written between ``<|audio>`` and ``<audio|>``; the host
runs ``audio_tower`` and ``embed_audio`` and scatters at
``inputs_embeds_masked_scatter_2``. A checkpoint saved by
:func:`envoys.testing.build_checkpoint` reloads a processor that takes ``audio=``
as is; a processor called before ``save_pretrained`` saves its tokenizer's
padding state into ``tokenizer.json``, and the reloaded one then passes
``max_length=None`` to the feature extractor, which refuses to truncate.
"""

from __future__ import annotations

import torch
from transformers import (
    Gemma4AudioConfig,
    Gemma4AudioFeatureExtractor,
    Gemma4Config,
    Gemma4ForConditionalGeneration,
    Gemma4ImageProcessor,
    Gemma4Processor,
    Gemma4TextConfig,
    Gemma4VideoProcessor,
    Gemma4VisionConfig,
)

from .contract import SIGLIP, TEXT_BLOCK, AudioRow, Loads, PatternRow, Row, Sizes, VideoRow, attention, batched, blocks, flat, scatter, text_model
from .norms import randomise_norms
from .tokenizer import TokenizersBackend, word_level_tokenizer

PATCH_SIZE = 4
POOLING_KERNEL_SIZE = 2
MAX_SOFT_TOKENS = 70  # the smallest budget the image processor accepts (70, 140, 280, 560, 1120)
PADDED_PATCHES = MAX_SOFT_TOKENS * POOLING_KERNEL_SIZE**2  # 280 rows on the tower's patch axis

#: Gemma's turns, with the processor's placeholder where each image, video or audio clip goes (``<|image|>``,
#: ``<|video|>``, ``<|audio|>``: `Gemma4Processor`'s ``image_token``, ``video_token`` and ``audio_token``); the processor
#: expands each one.
CHAT_TEMPLATE = (
    "{{ '<bos>' }}"
    "{% for message in messages %}"
    "{{ '<start_of_turn>' + ('model' if message['role'] == 'assistant' else message['role']) + '\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for item in message['content'] %}"
    "{% if item['type'] == 'image' %}{{ '<|image|>' }}"
    "{% elif item['type'] == 'video' %}{{ '<|video|>' }}"
    "{% elif item['type'] == 'audio' %}{{ '<|audio|>' }}"
    "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '<end_of_turn>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"
)

_SPECIAL = ["<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>"]
_NAMED = {
    "image_token": "<|image|>",
    "boi_token": "<|image>",
    "eoi_token": "<image|>",
    "audio_token": "<|audio|>",
    "boa_token": "<|audio>",
    "eoa_token": "<audio|>",
}


def _tokenizer() -> TokenizersBackend:
    return word_level_tokenizer(
        special_tokens=_SPECIAL,
        named_tokens=_NAMED,
        chat_template=CHAT_TEMPLATE,
        eos_token="<end_of_turn>",
        pad_token="<pad>",
        bos_token="<bos>",
    )


def _randomise_layer_scalars(model: Gemma4ForConditionalGeneration) -> None:
    """Real checkpoints ship a per-block output scale; the init leaves it at 1, which would hide it."""
    for layer in model.model.language_model.layers:
        layer.layer_scalar.copy_(torch.rand(1) + 0.5)


def _randomise_audio_constants(model: Gemma4ForConditionalGeneration) -> None:
    """The audio tower's norms (init: ones), its attention's ``per_dim_scale`` (init: zeros) and its output
    projection's bias (init: zeros), drawn at random, so a value read at the wrong one of them would not pass."""
    tower = model.model.audio_tower
    randomise_norms(tower)
    for name, parameter in tower.named_parameters():
        if name.endswith("per_dim_scale"):
            parameter.normal_(0.0, 0.5)
    tower.output_proj.bias.normal_(0.0, 0.1)


def build_gemma4() -> tuple[Gemma4ForConditionalGeneration, Gemma4Processor]:
    """Imitates google/gemma-4-e2b-it: its vision and audio towers, on a smaller text model.

    Tower: 2 blocks, width 32, 2 heads of 16, patch 4, 2x2 pooling, no
    standardisation, 280 padded patch rows (``max_soft_tokens`` 70). Text
    model: 4 blocks of width 32 ("sliding", "full", "sliding", "full"), 2
    query heads / 1 key-value head of 16 on every block (``global_head_dim``
    16 on the full ones), per-layer inputs 8 wide, the last 2 blocks reusing
    the keys and values of the first 2 (``num_kv_shared_layers=2``), tied
    embeddings, causal everywhere (``use_bidirectional_attention`` unset).
    Each text block's ``layer_scalar`` is drawn in [0.5, 1.5). Audio tower:
    2 conformer blocks of width 32, 2 heads, subsampling convolutions of 128
    and 8 channels, output projection 32 wide; its norms, attention
    ``per_dim_scale`` and output bias are drawn at random.
    """
    image_processor = Gemma4ImageProcessor(
        patch_size=PATCH_SIZE, max_soft_tokens=MAX_SOFT_TOKENS, pooling_kernel_size=POOLING_KERNEL_SIZE
    )
    video_processor = Gemma4VideoProcessor(
        patch_size=PATCH_SIZE, max_soft_tokens=MAX_SOFT_TOKENS, pooling_kernel_size=POOLING_KERNEL_SIZE, num_frames=2
    )
    processor = Gemma4Processor(
        feature_extractor=Gemma4AudioFeatureExtractor(),
        image_processor=image_processor,
        tokenizer=_tokenizer(),
        video_processor=video_processor,
        chat_template=CHAT_TEMPLATE,
        image_seq_length=MAX_SOFT_TOKENS,
    )
    tokenizer = processor.tokenizer  # the processor adds its video token to it
    vocab = len(tokenizer)
    vision = Gemma4VisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=16,
        patch_size=PATCH_SIZE,
        pooling_kernel_size=POOLING_KERNEL_SIZE,
        position_embedding_size=64,
        standardize=False,
    )
    # subsampling_conv_channels[0] stays the mel bins' 128: the projection after the two convolutions is built
    # (channels[0] // 4) * channels[1] wide, what the convolutions give only when channels[0] is the feature size
    audio = Gemma4AudioConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        subsampling_conv_channels=[128, 8],
        output_proj_dims=32,
    )
    text = Gemma4TextConfig(
        vocab_size=vocab,
        vocab_size_per_layer_input=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=4,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        global_head_dim=16,
        layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
        sliding_window=16,
        hidden_size_per_layer_input=8,
        num_kv_shared_layers=2,
        max_position_embeddings=1024,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
        tie_word_embeddings=True,
    )
    config = Gemma4Config(
        text_config=text,
        vision_config=vision,
        audio_config=audio,
        image_token_id=tokenizer.image_token_id,
        boi_token_id=tokenizer.convert_tokens_to_ids("<|image>"),
        eoi_token_id=tokenizer.convert_tokens_to_ids("<image|>"),
        video_token_id=processor.video_token_id,
        audio_token_id=tokenizer.convert_tokens_to_ids("<|audio|>"),
        boa_token_id=tokenizer.convert_tokens_to_ids("<|audio>"),
        eoa_token_index=tokenizer.convert_tokens_to_ids("<audio|>"),
        tie_word_embeddings=True,
    )
    model = Gemma4ForConditionalGeneration(config)
    with torch.no_grad():
        _randomise_layer_scalars(model)
        _randomise_audio_constants(model)
    return model, processor


#: The checkpoints this module builds, by name.
BUILDERS = {"gemma4": build_gemma4}


#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builders' documented
#: configurations above, never off the code under test.
CONTRACTS = {
    # envoys/testing/gemma4.py: every image's row padded to 280 patches (70 soft tokens x 2**2); 32x32 has 256 real
    # patches and 64 tokens, 48 high x 64 wide 252 and 63; the encoder has no final norm; the projector reads the
    # pooler's real cells.
    "gemma4": Row(
        loads=Loads(("Gemma4ForConditionalGeneration", "Gemma4Processor", "TokenizersBackend")),
        image_tokens=(64, 63),
        sizes=Sizes(num_layers=2, patch_size=4, image_size="image_position_ids", **SIGLIP),
        stream=batched((1, 280), (1, 280)),
        projected=flat((1, 64), (1, 63)),
        projector_reads=None,
        pattern=PatternRow(padded=True),
        rules=(scatter("gemma4"), *attention("gemma4", "Gemma4TextAttention"), "gemma4.Gemma4VisionAttention"),
        # envoys/testing/gemma4.py: the video processor samples 2 frames; each is patchified like an image (280 padded
        # patches of 4 px) and pooled 2x2: a 32x32 frame becomes 64x64 pixels, 8x8 tokens.
        video=VideoRow(tokens=128, stream=(2, 280, 32), grid=(2, 8, 8)),
        # envoys/testing/gemma4.py: 99 mel frames, two stride-2 convolutions before the blocks: 25 frames, 25 tokens.
        audio=AudioRow(tokens=25, stream=(1, 25, 32), output=(1, 25, 32)),
        native={
            "vision": "model.vision_tower", "projector": "model.embed_vision",
            "vision.patch_embed": "model.vision_tower.patch_embedder",
            **blocks("vision.layers", "model.vision_tower.encoder.layers", {**TEXT_BLOCK,
                "self_attn.o_proj": "self_attn.o_proj", "mlp.up_proj": "mlp.up_proj",
                "mlp.down_proj": "mlp.down_proj"}),
            **text_model("model.language_model"),
        },
    ),
}
