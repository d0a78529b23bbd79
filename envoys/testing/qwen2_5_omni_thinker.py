"""A tiny Qwen2.5-Omni thinker: Qwen2.5-VL's windowed ViT and a Whisper-like audio tower on a Qwen2 text model with
M-RoPE.

The processor is the stock ``Qwen2_5OmniProcessor`` of the real checkpoint,
with its stock parts: ``Qwen2VLImageProcessor``, ``Qwen2VLVideoProcessor``
and a ``WhisperFeatureExtractor`` of 128 mel bins, and a word-level
tokenizer holding the thinker's named tokens (``<|IMAGE|>``, ``<|VIDEO|>``,
``<|AUDIO|>`` and their ``<|vision_bos|>`` / ``<|audio_bos|>`` markers). Its
chat template renders the image, video and audio entries as the real
template does (``<|vision_bos|><|IMAGE|><|vision_eos|>``, the same with
``<|VIDEO|>``, ``<|audio_bos|><|AUDIO|><|audio_eos|>``), without the real
template's default system prompt.

Images, as on the tiny Qwen2.5-VL (`envoys.testing.qwen`): patch 4, merged 2x2,
so a 32x32 image is 64 patches and 16 image tokens, 48 high x 64 wide 192
patches and 48 tokens. Videos: the processor class asks every video
processor for frames of 128 to 768 times 28x28 pixels (its class attribute
``videos_kwargs``, which outranks the video processor's own ``size`` and is
not saved with the processor), so the tiny tokenizer carries the image
processor's pixel bounds as a ``size`` default (`pixel_bounds`): a
tokenizer's init kwargs outrank the processor class's defaults for every
modality that takes the key, they are saved in ``tokenizer_config.json``, and
the images are resized within the same bounds as before. So 4 frames of 32x32
are 2 temporal patches of 8x8 patches, 32 video tokens. Audio: the feature extractor pads every clip to 30 s (the
processor asks for ``padding="max_length"``), ``input_features [clips, 128,
3000]``, and ``feature_attention_mask`` gives each clip's true length, so a
clip of 1 s (100 frames) is 25 audio tokens.
"""

from __future__ import annotations

from transformers import (
    Qwen2_5OmniProcessor,
    Qwen2_5OmniThinkerConfig,
    Qwen2_5OmniThinkerForConditionalGeneration,
    Qwen2VLVideoProcessor,
    WhisperFeatureExtractor,
)

from .contract import (
    PER_IMAGE_PATTERN,
    QWEN_VIT_BLOCK,
    SIGLIP,
    AudioRow,
    Loads,
    Reads,
    Row,
    Sizes,
    VideoRow,
    attention,
    blocks,
    flat,
    packed,
    scatter,
    text_model,
)
from .norms import randomise_norms
from .qwen import MERGE, OPENAI_CLIP_MEAN, OPENAI_CLIP_STD, _image_processor, _pixels, _text, _video_processor
from .rope import rope
from .tokenizer import TokenizersBackend, as_the_processor_takes, word_level_tokenizer

PATCH = 4

#: The thinker's named tokens, as the processor reads them off its tokenizer.
NAMED = {
    "image_token": "<|IMAGE|>",
    "video_token": "<|VIDEO|>",
    "audio_token": "<|AUDIO|>",
    "vision_bos_token": "<|vision_bos|>",
    "vision_eos_token": "<|vision_eos|>",
    "audio_bos_token": "<|audio_bos|>",
    "audio_eos_token": "<|audio_eos|>",
}
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def omni_template(named: dict[str, str]) -> str:
    """ChatML rendering image, video and audio entries between the thinker's markers, as the real templates do."""
    vision = named["vision_bos_token"], named["vision_eos_token"]
    audio = named["audio_bos_token"], named["audio_eos_token"]
    return (
        "{% for message in messages %}"
        "{{ '<|im_start|>' + message['role'] + '\n' }}"
        "{% if message['content'] is string %}{{ message['content'] }}"
        "{% else %}{% for item in message['content'] %}"
        "{% if item['type'] == 'image' %}{{ '" + vision[0] + named["image_token"] + vision[1] + "' }}"
        "{% elif item['type'] == 'video' %}{{ '" + vision[0] + named["video_token"] + vision[1] + "' }}"
        "{% elif item['type'] == 'audio' %}{{ '" + audio[0] + named["audio_token"] + audio[1] + "' }}"
        "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}"
        "{% endfor %}{% endif %}"
        "{{ '<|im_end|>\n' }}"
        "{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
    )


CHAT_TEMPLATE = omni_template(NAMED)


def pixel_bounds(patch: int) -> dict[str, int]:
    """The tiny image processor's pixel bounds (`envoys.testing.qwen`'s ``min_pixels`` and ``max_pixels``) as a ``size``."""
    pixels = _pixels(patch)
    return {"shortest_edge": pixels["min_pixels"], "longest_edge": pixels["max_pixels"]}


def omni_tokenizer(named: dict[str, str], template: str, processor_class: type, patch: int) -> TokenizersBackend:
    """A word-level tokenizer holding ``named`` (the processor reads each by its attribute name), with a ``size``
    default of the tiny pixel bounds (`pixel_bounds`), which the processor passes to its image and video processors
    over its class's video default."""
    tokenizer = as_the_processor_takes(word_level_tokenizer(
        special_tokens=SPECIAL,
        named_tokens=named,
        chat_template=template,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
    ), processor_class)
    tokenizer.init_kwargs["size"] = pixel_bounds(patch)
    return tokenizer


def omni_processor(processor_class: type, patch: int, mean: list[float], std: list[float],
                   tokenizer: TokenizersBackend, template: str) -> object:
    """The stock omni processor on the tiny image and video processors and a 128-bin Whisper feature extractor."""
    return processor_class(
        image_processor=_image_processor(patch, mean, std),
        video_processor=_video_processor(Qwen2VLVideoProcessor, patch, mean, std),
        feature_extractor=WhisperFeatureExtractor(feature_size=128),
        tokenizer=tokenizer,
        chat_template=template,
    )


def audio_config(**extra: object) -> dict[str, object]:
    """The tiny audio tower: 2 pre-norm blocks 32 wide, 2 heads, MLP 64 wide, over 128 mel bins, output 32 wide."""
    return {
        "num_mel_bins": 128,
        "encoder_layers": 2,
        "encoder_attention_heads": 2,
        "encoder_ffn_dim": 64,
        "d_model": 32,
        "output_dim": 32,
        **extra,
    }


def build_qwen2_5_omni_thinker() -> tuple[Qwen2_5OmniThinkerForConditionalGeneration, Qwen2_5OmniProcessor]:
    """Imitates the thinker of Qwen/Qwen2.5-Omni-7B.

    Tower: Qwen2.5-VL's, 2 blocks, width 32, 2 heads, SiLU MLP 64 wide, patch
    4, merger to the text width 32; ``window_size`` 16 px (4x4 patches),
    block 0 windowed and block 1 full attention (``fullatt_block_indexes``
    [1]). Audio tower: 2 blocks, ``d_model`` 32, 2 heads, MLP 64 wide, 128 mel
    bins, ``n_window`` 100, output 32 wide. Text: 2 layers, width 32, 2 query
    heads / 1 key-value head, head_dim 16, M-RoPE sections [2, 3, 3], untied
    embeddings (as the real thinker's). ``vision_start_token_id`` (not a
    declared field of the thinker config, but its rope index reads it, and the
    real checkpoint's config carries it) and ``vision_end_token_id`` are set.
    Every norm's weight is drawn at random.
    """
    tokenizer = omni_tokenizer(NAMED, CHAT_TEMPLATE, Qwen2_5OmniProcessor, PATCH)
    ids = {name: tokenizer.convert_tokens_to_ids(token) for name, token in NAMED.items()}
    config = Qwen2_5OmniThinkerConfig(
        audio_config=audio_config(n_window=100, max_source_positions=1500),
        vision_config={
            "depth": 2,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 2,
            "hidden_act": "silu",
            "patch_size": PATCH,
            "spatial_merge_size": MERGE,
            "temporal_patch_size": 2,
            "window_size": 16,
            "fullatt_block_indexes": [1],
            "out_hidden_size": 32,
        },
        text_config=_text(tokenizer, **rope(1_000_000.0, mrope_section=[2, 3, 3])),
        audio_token_index=ids["audio_token"],
        image_token_index=ids["image_token"],
        video_token_index=ids["video_token"],
        audio_start_token_id=ids["audio_bos_token"],
        audio_end_token_id=ids["audio_eos_token"],
        vision_start_token_id=ids["vision_bos_token"],
        vision_end_token_id=ids["vision_eos_token"],
    )
    model = Qwen2_5OmniThinkerForConditionalGeneration(config)
    randomise_norms(model)
    processor = omni_processor(Qwen2_5OmniProcessor, PATCH, OPENAI_CLIP_MEAN, OPENAI_CLIP_STD, tokenizer, CHAT_TEMPLATE)
    return model, processor


#: The checkpoints this module builds, by name.
BUILDERS = {"qwen2_5_omni_thinker": build_qwen2_5_omni_thinker}


#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builders' documented
#: configurations above, never off the code under test.
CONTRACTS = {
    # envoys/testing/qwen2_5_omni_thinker.py: the tiny Qwen2.5-VL's tower (patch 4: 32x32 is 64 patches and 16 tokens,
    # 48x64 is 192 and 48; blocks and merger in window order, restored after the merger) under the thinker, which
    # scatters audio (_0) before images (_1); a Whisper-like audio tower beside it.
    "qwen2_5_omni_thinker": Row(
        loads=Loads(("Qwen2_5OmniThinkerForConditionalGeneration", "Qwen2_5OmniProcessor", "TokenizersBackend")),
        image_tokens=(16, 48),
        sizes=Sizes(num_layers=2, patch_size=4, image_size="image_grid_thw", **SIGLIP),
        stream=packed(64, 192),
        projected=flat((1, 16), (1, 48)),
        projector_reads=Reads("layer_output", block=-1, unbatched=True),
        pattern=PER_IMAGE_PATTERN,
        features_are_projected=False,
        rules=(scatter("qwen2_5_omni"), "qwen2_5_omni.vision-attention", "qwen2_5_omni.audio-attention",
               "qwen2_5_omni.vision-windows", *attention("qwen2_5_omni", "Qwen2_5OmniAttention")),
        # envoys/testing/qwen2_5_omni_thinker.py: Qwen2.5-VL's tower (patch 4) within the image processor's pixel bounds: 2
        # temporal units of 8x8 patches (128) and 4x4 tokens (32).
        video=VideoRow(tokens=32, stream=(1, 128, 32), grid=(2, 4, 4)),
        # envoys/testing/qwen2_5_omni_thinker.py: 100 frames of the clip, a stride-2 convolution before the blocks (50 rows,
        # the clip's chunks packed in one row), average-pooled 2x after them, then projected: 25 tokens.
        audio=AudioRow(tokens=25, stream=(1, 50, 32), output=(1, 25, 32)),
        native={
            "vision": "model.visual", "projector": "model.visual.merger",
            "vision.patch_embed": "model.visual.patch_embed",
            **blocks("vision.layers", "model.visual.blocks", {**QWEN_VIT_BLOCK, "mlp.up_proj": "mlp.up_proj",
                "mlp.down_proj": "mlp.down_proj"}),
            **text_model("model.language_model"),
        },
    ),
}
