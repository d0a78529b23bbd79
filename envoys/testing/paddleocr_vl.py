"""A tiny PaddleOCR-VL checkpoint (model_type paddleocr_vl): a packed SigLIP-shaped tower, a projector, an ERNIE-4.5 text
model.

The builder returns a randomly initialised float32 model and the stock
processor (``PaddleOCRVLProcessor`` over ``PaddleOCRVLImageProcessor``) with
small pixel bounds. The tower (``model.visual``; its ``vision_model`` holds
the embeddings, ``encoder.layers`` and ``post_layernorm``) has 2 blocks, width
32, 2 heads of 16, an MLP 64 wide, patch 8, and 16 learned positions
(``image_size`` 32: a 4x4 grid, resampled to each image's grid); every image's
patches run packed, image after image, each image's in raster order. The
projector (``model.projector``) LayerNorms each patch, folds each 2x2 block
(``spatial_merge_size`` 2) into one row of 4 * 32 and maps it to the text width
32. The text model: 2 ERNIE-4.5 blocks, width 32, 2 query heads / 1 key-value
head of 16, MLP 64 wide, M-RoPE (``mrope_section`` [4, 2, 2], sum 8 = 16 / 2).
So a 32x32 image is 16 patches and 4 image tokens, a 64 wide x 48 high one 48
patches and 12 tokens.

Pixel bounds: the image processor resizes to multiples of ``f = 2 * patch``
(16) with ``shortest_edge`` ``4 * f**2`` and ``longest_edge`` ``64 * f**2``, so
an image becomes 4 to 64 tokens and the two test images keep their sizes. Norm
weights are drawn at random (`randomise_norms`).
"""

from __future__ import annotations

from transformers import (
    PaddleOCRVLConfig,
    PaddleOCRVLForConditionalGeneration,
    PaddleOCRVLImageProcessor,
    PaddleOCRVLProcessor,
    PreTrainedModel,
    ProcessorMixin,
)

from .contract import ENCODER_BLOCK, PER_IMAGE_PATTERN, SIGLIP, Loads, Reads, Row, Sizes, attention, blocks, flat, packed, scatter, text_model
from .norms import randomise_norms
from .rope import rope
from .sizes import text_sizes, vision_sizes
from .tokenizer import TokenizersBackend, word_level_tokenizer

PATCH = 8
MERGE = 2
HALF = [0.5, 0.5, 0.5]

#: PaddleOCR-VL's chat template, shortened: the image between its start and end markers, then the text.
CHAT_TEMPLATE = (
    "<|begin_of_sentence|>"
    "{% for message in messages %}"
    "{% if message['role'] == 'user' %}{{ 'User: ' }}{% else %}{{ 'Assistant: ' }}{% endif %}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for item in message['content'] %}"
    "{% if item['type'] == 'image' %}{{ '<|IMAGE_START|><|IMAGE_PLACEHOLDER|><|IMAGE_END|>' }}"
    "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ 'Assistant: ' }}{% endif %}"
)

_SPECIAL = ["<unk>", "<|begin_of_sentence|>", "</s>", "<|end_of_sentence|>"]
_NAMED = {
    "image_token": "<|IMAGE_PLACEHOLDER|>",
    "video_token": "<|VIDEO_PLACEHOLDER|>",
    "vision_start_token": "<|IMAGE_START|>",
    "vision_end_token": "<|IMAGE_END|>",
}


def _tokenizer() -> TokenizersBackend:
    return word_level_tokenizer(
        special_tokens=_SPECIAL,
        named_tokens=_NAMED,
        chat_template=CHAT_TEMPLATE,
        eos_token="</s>",
        pad_token="<unk>",
        bos_token="<|begin_of_sentence|>",
    )


def build_paddleocr_vl() -> tuple[PreTrainedModel, ProcessorMixin]:
    """Imitates PaddlePaddle/PaddleOCR-VL: the module docstring's tower, projector and text model."""
    tokenizer = _tokenizer()
    ids = {f"{name}_id": tokenizer.convert_tokens_to_ids(token) for name, token in _NAMED.items()}
    config = PaddleOCRVLConfig(
        text_config=text_sizes(tokenizer, head_dim=16, max_position_embeddings=1024,
                               **rope(500_000.0, mrope_section=[4, 2, 2])),
        vision_config=vision_sizes(image_size=32, patch_size=PATCH, spatial_merge_size=MERGE,
                                   rope_parameters={"rope_type": "axial", "rope_theta": 10000.0}),
        **ids,
    )
    factor = PATCH * MERGE
    processor = PaddleOCRVLProcessor(
        image_processor=PaddleOCRVLImageProcessor(
            patch_size=PATCH, merge_size=MERGE, temporal_patch_size=1, image_mean=HALF, image_std=HALF,
            size={"shortest_edge": 4 * factor**2, "longest_edge": 64 * factor**2},
        ),
        tokenizer=tokenizer,
        chat_template=CHAT_TEMPLATE,
    )
    model = PaddleOCRVLForConditionalGeneration(config)
    randomise_norms(model)
    return model, processor


#: The checkpoints this module builds, by name.
BUILDERS = {"paddleocr_vl": build_paddleocr_vl}


#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builders' documented
#: configurations above, never off the code under test.
CONTRACTS = {
    # envoys/testing/paddleocr_vl.py: a packed SigLIP-shaped tower of 8 px patches, 2 blocks, post_layernorm; the
    # projector (outside the tower) reads the tower's output and folds 2x2 patches: 32x32 is 16 patches and 4 tokens,
    # 48x64 is 48 and 12.
    "paddleocr_vl": Row(
        loads=Loads(("PaddleOCRVLForConditionalGeneration", "PaddleOCRVLProcessor", "TokenizersBackend")),
        image_tokens=(4, 12),
        sizes=Sizes(num_layers=2, patch_size=8, image_size="image_grid_thw", **SIGLIP),
        stream=packed(16, 48),
        projected=flat((1, 4), (1, 12)),
        projector_reads=Reads("tower_output", unbatched=True),
        final_norm=True,
        pattern=PER_IMAGE_PATTERN,
        rules=(scatter("paddleocr_vl"), "paddleocr_vl.vision-attention", *attention("paddleocr_vl", "PaddleOCRAttention")),
        native={
            "vision": "model.visual", "projector": "model.projector",
            "vision.norm": "model.visual.vision_model.post_layernorm",
            "vision.patch_embed": "model.visual.vision_model.embeddings.patch_embedding",
            **blocks("vision.layers", "model.visual.vision_model.encoder.layers", ENCODER_BLOCK),
            **text_model("model.language_model"),
        },
    ),
}
