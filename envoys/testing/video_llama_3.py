"""A tiny VideoLLaMA 3 checkpoint (model_type video_llama_3): a packed SigLIP-shaped tower, a projector, a Qwen2 text
model.

The builder returns a randomly initialised float32 model and the stock
processor (``VideoLlama3Processor`` over ``VideoLlama3ImageProcessor`` and
``VideoLlama3VideoProcessor``) with small pixel bounds. The tower
(``model.vision_model``: ``embeddings``, ``encoder.layers``,
``post_layernorm``) has 2 blocks, width 32, 2 heads of 16, an MLP 64 wide,
patch 8, a 2D rotary embedding and no learned positions; every image's patches
run packed, image after image. The image processor keeps its stock
``merge_size`` 1 for images (the video processor's is 2), so the tower's
``pixel_unshuffle`` resamples each image's grid to itself and every patch is one
image token. The projector (``model.projector``: ``readout``, Linear, GELU,
Linear) maps each token to the text width 32. The text model: 2 Qwen2 blocks,
width 32, 2 query heads / 1 key-value head of 16, MLP 64 wide. So a 32x32 image
is 16 patches and 16 image tokens, a 64 wide x 48 high one 48 patches and 48
tokens.

Pixel bounds: the processors resize to multiples of ``patch * merge_size``
with ``shortest_edge`` ``16 * 8**2`` and ``longest_edge`` ``256 * 8**2`` pixels,
so an image becomes 16 to 256 patches and the two test images keep their
sizes. Norm weights are drawn at random (`randomise_norms`).
"""

from __future__ import annotations

from transformers import (
    PreTrainedModel,
    ProcessorMixin,
    VideoLlama3Config,
    VideoLlama3ForConditionalGeneration,
    VideoLlama3ImageProcessor,
    VideoLlama3Processor,
    VideoLlama3VideoProcessor,
)

from .contract import ENCODER_BLOCK, PER_IMAGE_PATTERN, SIGLIP, Loads, Reads, Row, Sizes, attention, blocks, flat, packed, scatter, text_model
from .norms import randomise_norms
from .rope import rope
from .sizes import text_sizes, vision_sizes
from .tokenizer import TokenizersBackend, word_level_tokenizer

PATCH = 8
HALF = [0.5, 0.5, 0.5]

#: ChatML with VideoLLaMA 3's image placeholder; no default system prompt.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for item in message['content'] %}"
    "{% if item['type'] == 'image' %}{{ '<image>' }}"
    "{% elif item['type'] == 'video' %}{{ '<video>' }}"
    "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
_NAMED = {"image_token": "<image>", "video_token": "<video>"}


def _tokenizer() -> TokenizersBackend:
    return word_level_tokenizer(
        special_tokens=_SPECIAL,
        named_tokens=_NAMED,
        chat_template=CHAT_TEMPLATE,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
    )


def build_video_llama_3() -> tuple[PreTrainedModel, ProcessorMixin]:
    """Imitates DAMO-NLP-SG/VideoLLaMA3-2B-Image: the module docstring's tower, projector and text model."""
    tokenizer = _tokenizer()
    config = VideoLlama3Config(
        text_config={"model_type": "qwen2", **text_sizes(tokenizer, max_position_embeddings=1024,
                                                         bos_token_id=None, **rope(1_000_000.0))},
        vision_config=vision_sizes(patch_size=PATCH),
        image_token_id=tokenizer.convert_tokens_to_ids(_NAMED["image_token"]),
        video_token_id=tokenizer.convert_tokens_to_ids(_NAMED["video_token"]),
    )
    size = {"shortest_edge": 16 * PATCH**2, "longest_edge": 256 * PATCH**2}
    processor = VideoLlama3Processor(
        image_processor=VideoLlama3ImageProcessor(patch_size=PATCH, image_mean=HALF, image_std=HALF, size=size),
        tokenizer=tokenizer,
        video_processor=VideoLlama3VideoProcessor(patch_size=PATCH, image_mean=HALF, image_std=HALF,
                                                  size={**size, "longest_edge": 4 * size["longest_edge"]}),
        chat_template=CHAT_TEMPLATE,
    )
    model = VideoLlama3ForConditionalGeneration(config)
    randomise_norms(model)
    return model, processor


#: The checkpoints this module builds, by name.
BUILDERS = {"video_llama_3": build_video_llama_3}


#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builders' documented
#: configurations above, never off the code under test.
CONTRACTS = {
    # envoys/testing/video_llama_3.py: a packed SigLIP-shaped tower of 8 px patches, 2 blocks, post_layernorm; images at
    # merge_size 1, so every patch is one token: 32x32 is 16 patches and 16 tokens, 48x64 is 48 and 48; the tower
    # resamples each image's grid by 1 / merge_size after its norm, here to itself, so the projector reads
    # tower_output as it is (tests/test_paddleocr_vl_video_llama_3.py).
    "video_llama_3": Row(
        loads=Loads(("VideoLlama3ForConditionalGeneration", "VideoLlama3Processor", "TokenizersBackend")),
        image_tokens=(16, 48),
        sizes=Sizes(num_layers=2, patch_size=8, image_size="image_grid_thw", **SIGLIP),
        stream=packed(16, 48),
        projected=flat((1, 16), (1, 48)),
        projector_reads=Reads("tower_output", unbatched=True),
        final_norm=True,
        pattern=PER_IMAGE_PATTERN,
        rules=(scatter("video_llama_3"), "video_llama_3.vision-attention", "video_llama_3.eager-attention", *attention("qwen2", "Qwen2Attention")),
        native={
            "vision": "model.vision_model", "projector": "model.projector",
            "vision.norm": "model.vision_model.post_layernorm",
            "vision.patch_embed": "model.vision_model.embeddings.patch_embedding",
            **blocks("vision.layers", "model.vision_model.encoder.layers", ENCODER_BLOCK),
            **text_model("model.language_model"),
        },
    ),
}
