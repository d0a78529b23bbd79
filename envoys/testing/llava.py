"""Tiny LLaVA checkpoints: a SigLIP tower on a Qwen2 text model, and a CLIP tower on a Llama one.

Each builder returns an unsaved (`LlavaForConditionalGeneration`,
`LlavaProcessor`) pair with random float32 weights (seed the torch generator
first; :func:`envoys.testing.build` does). Images are 32x32 with 8x8 patches, so
every image gives 16 image tokens whatever its input size: the image
processor resizes (and for CLIP centre-crops) it to 32x32.
"""

from __future__ import annotations

from transformers import (
    CLIPImageProcessor,
    CLIPVisionConfig,
    LlamaConfig,
    LlavaConfig,
    LlavaForConditionalGeneration,
    LlavaProcessor,
    Qwen2Config,
    SiglipImageProcessor,
    SiglipVisionConfig,
)

from .contract import (
    CLIP_ATTENTION,
    LLAMA_ATTENTION,
    SIGLIP,
    SIGLIP_ATTENTION,
    Loads,
    Reads,
    Row,
    Sizes,
    attention,
    batched,
    encoder_tower,
    scatter,
    text_model,
)
from .sizes import text_sizes, vision_sizes
from .tokenizer import TokenizersBackend, word_level_tokenizer

IMAGE_SIZE = 32
PATCH_SIZE = 8
IMAGE_TOKENS = (IMAGE_SIZE // PATCH_SIZE) ** 2  # 16

#: ChatML like llava-interleave-qwen: each image is ``<image>`` on its own line, before the text (a video item is
#: ``<video>`` on its own line, as LLaVA-OneVision's template writes it).
INTERLEAVE_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for item in message['content'] %}"
    "{% if item['type'] == 'image' %}{{ '<image>\n' }}"
    "{% elif item['type'] == 'video' %}{{ '<video>\n' }}"
    "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

#: Vicuna style like llava-1.5: ``USER: <image>\n... ASSISTANT:`` (a video item is ``<video>\n``, as Video-LLaVA's and
#: LLaVA-NeXT-Video's templates write it).
VICUNA_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] != 'system' %}{{ message['role'].upper() + ': ' }}{% endif %}"
    "{% if message['content'] is string %}{{ message['content'] + ' ' }}"
    "{% else %}{% for item in message['content'] %}"
    "{% if item['type'] == 'image' %}{{ '<image>\n' }}"
    "{% elif item['type'] == 'video' %}{{ '<video>\n' }}"
    "{% elif item['type'] == 'text' %}{{ item['text'] + ' ' }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{% if message['role'] == 'assistant' %}{{ '</s>' }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ 'ASSISTANT:' }}{% endif %}"
)


def interleave_tokenizer(video: bool = False) -> TokenizersBackend:
    """llava-interleave-qwen's tokenizer: Qwen2's ChatML turns (`INTERLEAVE_TEMPLATE`) and ``<image>`` (and
    ``<video>``, for LLaVA-OneVision's processor)."""
    return word_level_tokenizer(
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        named_tokens={"image_token": "<image>", **({"video_token": "<video>"} if video else {})},
        chat_template=INTERLEAVE_TEMPLATE,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
    )


def siglip_tower() -> SiglipVisionConfig:
    """A SigLIP tower (no CLS token, no pooling head): 2 blocks, width 32, 2 heads, patch 8 on 32x32 images."""
    return SiglipVisionConfig(**vision_sizes(image_size=IMAGE_SIZE, patch_size=PATCH_SIZE, vision_use_head=False))


def qwen2_text(tokenizer: TokenizersBackend) -> Qwen2Config:
    """A Qwen2 text model: 2 layers, width 32, 2 query heads / 1 key-value head, tied embeddings, the BOS
    ``<|endoftext|>``."""
    return Qwen2Config(**text_sizes(
        tokenizer,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
    ))


def vicuna_tokenizer(video: bool = False) -> TokenizersBackend:
    """Llava 1.5's tokenizer: the prompt ``USER: <image>\\n... ASSISTANT:`` (`VICUNA_TEMPLATE`), BOS prepended (and
    ``<video>``, for Video-LLaVA's and LLaVA-NeXT-Video's processors)."""
    return word_level_tokenizer(
        special_tokens=["<s>", "</s>", "<pad>"],
        named_tokens={"image_token": "<image>", **({"video_token": "<video>"} if video else {})},
        chat_template=VICUNA_TEMPLATE,
        bos_token="<s>",
        add_bos_token=True,
        eos_token="</s>",
        pad_token="<pad>",
    )


def build_llava_siglip() -> tuple[LlavaForConditionalGeneration, LlavaProcessor]:
    """Imitates llava-hf/llava-interleave-qwen-0.5b-hf.

    SigLIP tower (no CLS token, no pooling head): 2 blocks, width 32, 2 heads,
    patch 8 on 32x32 images. Qwen2 text model: 2 layers, width 32, 2 query
    heads / 1 key-value head, tied embeddings. The projector reads the last
    block's output (``vision_feature_layer=-1``, before the tower's
    post-layernorm) with every patch kept (strategy ``"full"``), so an image
    gives 16 features and the processor writes 16 ``<image>`` tokens
    (``num_additional_image_tokens=0``).
    """
    tokenizer = interleave_tokenizer()
    config = LlavaConfig(
        vision_config=siglip_tower(),
        text_config=qwen2_text(tokenizer),
        image_token_index=tokenizer.image_token_id,
        image_seq_length=IMAGE_TOKENS,
        vision_feature_layer=-1,
        vision_feature_select_strategy="full",
        projector_hidden_act="gelu",
        tie_word_embeddings=True,
    )
    processor = LlavaProcessor(
        image_processor=SiglipImageProcessor(
            size={"height": IMAGE_SIZE, "width": IMAGE_SIZE},
            image_mean=[0.5, 0.5, 0.5],
            image_std=[0.5, 0.5, 0.5],
        ),
        tokenizer=tokenizer,
        patch_size=PATCH_SIZE,
        vision_feature_select_strategy="full",
        num_additional_image_tokens=0,
        chat_template=INTERLEAVE_TEMPLATE,
    )
    return LlavaForConditionalGeneration(config), processor


def clip_tower() -> CLIPVisionConfig:
    """A CLIP tower (CLS token first, ``pre_layrnorm``): 3 blocks, width 32, 2 heads, patch 8 on 32x32 images."""
    return CLIPVisionConfig(**vision_sizes(num_hidden_layers=3, image_size=IMAGE_SIZE, patch_size=PATCH_SIZE,
                                           projection_dim=32))


def clip_processor(tokenizer: TokenizersBackend) -> LlavaProcessor:
    """Llava 1.5's processor for `clip_tower`: the shortest edge resized to 32, a 32x32 centre crop, and 16 + 1
    (``num_additional_image_tokens``) - 1 (strategy ``"default"``) = 16 ``<image>`` tokens an image."""
    return LlavaProcessor(
        image_processor=CLIPImageProcessor(
            size={"shortest_edge": IMAGE_SIZE},
            crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE},
        ),
        tokenizer=tokenizer,
        patch_size=PATCH_SIZE,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        chat_template=VICUNA_TEMPLATE,
    )


def build_llava_clip() -> tuple[LlavaForConditionalGeneration, LlavaProcessor]:
    """Imitates llava-hf/llava-1.5-7b-hf.

    CLIP tower (CLS token first, ``pre_layrnorm``): 3 blocks, width 32, 2
    heads, patch 8 on 32x32 images, so 1 + 16 positions. Llama text model: 2
    layers, width 32, 2 heads (no grouped keys/values), BOS prepended by the
    tokenizer. The projector reads block -2's output (the middle block; the
    last block still runs, unused) without the CLS token (strategy
    ``"default"``), so an image gives 16 features; the processor writes
    16 + 1 (``num_additional_image_tokens``) - 1 (``"default"``) = 16
    ``<image>`` tokens. CLIPImageProcessor resizes the shortest edge to 32 and
    centre-crops 32x32.
    """
    tokenizer = vicuna_tokenizer()
    text = LlamaConfig(**text_sizes(tokenizer, num_key_value_heads=2))
    config = LlavaConfig(
        vision_config=clip_tower(),
        text_config=text,
        image_token_index=tokenizer.image_token_id,
        image_seq_length=IMAGE_TOKENS,
        vision_feature_layer=-2,
        vision_feature_select_strategy="default",
        projector_hidden_act="gelu",
    )
    return LlavaForConditionalGeneration(config), clip_processor(tokenizer)


#: The checkpoints this module builds, by name.
BUILDERS = {"llava-siglip": build_llava_siglip, "llava-clip": build_llava_clip}


#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builders' documented
#: configurations above, never off the code under test.
CONTRACTS = {
    # envoys/testing/llava.py: 32x32 images (any input resized) of 8x8 patches, 16 patches and 16 image tokens each;
    # SigLIP, no CLS, 2 blocks, post_layernorm; the projector reads the last block before it, every patch.
    "llava-siglip": Row(
        loads=Loads(("LlavaForConditionalGeneration", "LlavaProcessor", "TokenizersBackend")),
        image_tokens=(16, 16),
        sizes=Sizes(num_layers=2, patch_size=8, image_size=32, **SIGLIP),
        stream=batched((1, 16), (1, 16)),
        projected=batched((1, 16), (1, 16)),
        projector_reads=Reads("layer_output", block=-1),
        final_norm=True,
        rules=(scatter("llava"), *SIGLIP_ATTENTION, *attention("qwen2", "Qwen2Attention")),
        native={
            **encoder_tower("model.vision_tower"), "projector": "model.multi_modal_projector",
            **text_model("model.language_model"),
        },
    ),
    # envoys/testing/llava.py: CLIP, CLS first (1 + 16 positions), 3 blocks, no norm over the patches; the projector reads
    # block -2 without its CLS token: 16 image tokens an image.
    "llava-clip": Row(
        loads=Loads(("LlavaForConditionalGeneration", "LlavaProcessor", "TokenizersBackend")),
        image_tokens=(16, 16),
        sizes=Sizes(num_layers=3, patch_size=8, image_size=32, **SIGLIP),
        stream=batched((1, 17), (1, 17)),
        projected=batched((1, 16), (1, 16)),
        projector_reads=Reads("layer_output", block=-2, drop_first=1),
        prefix=1,
        rules=(scatter("llava"), *CLIP_ATTENTION, *LLAMA_ATTENTION),
        native={
            **encoder_tower("model.vision_tower", norm=False), "projector": "model.multi_modal_projector",
            **text_model("model.language_model"),
        },
    ),
}
