"""A tiny Ovis2.5 checkpoint (model_type ovis2_5): a packed SigLIP2-NaViT tower attending in windows of merge units,
a visual tokenizer (a softmax over a visual vocabulary) and a visual embedding table, on a Qwen3 text model.

The builder returns a randomly initialised float32 model and the stock
processor (``Ovis2_5Processor``, with ``Ovis2_5ImageProcessor`` and
``Ovis2_5VideoProcessor``) over a word-level tokenizer holding the tokens the
processor writes: ``<|image_pad|>`` per image token between
``<|image_start|>`` and ``<|image_end|>`` (``<|video_pad|>`` between
``<|video_start|>`` and ``<|video_end|>`` for a video), the tiny tokenizer's
own spellings. Pixel bounds: ``shortest_edge`` 4 x 16**2 and ``longest_edge``
64 x 16**2 pixels, so an image of ``h x w`` pixels (multiples of 16 within the
bounds) keeps its size.

Tower: 2 blocks, width 32, 2 heads of 16, GELU (tanh) MLP 64 wide, patch 8,
merge 2x2, a 4x4 learned position grid (``image_size`` 32) resampled to each
image's grid; windows of ``window_size`` 32 pixels, so 2x2 merge units
(4x4 patches) a window; block 0 attends in windows, block 1 per image
(``layer_types``). A 32x32 image is 16 patches, one window, 4 image tokens; a
48 high x 64 wide image is 48 patches (6x8), 3x4 merge units in four windows
(2x2, 2x2, 1x2, 1x2 units), 12 image tokens. Visual vocabulary 64 (60 visual
words and 4 indicator rows). Text: 2 Qwen3 blocks, width 32. Every norm's
weight is drawn at random (`randomise_norms`).
"""

from __future__ import annotations

from transformers import (
    Ovis2_5Config,
    Ovis2_5ForConditionalGeneration,
    Ovis2_5ImageProcessor,
    Ovis2_5Processor,
    Ovis2_5VideoProcessor,
)

from .contract import (
    ENCODER_BLOCK,
    PER_IMAGE_PATTERN,
    SIGLIP,
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
from .rope import rope
from .sizes import text_sizes
from .tokenizer import TokenizersBackend, word_level_tokenizer

PATCH = 8
MERGE = 2
#: The attention window's side in pixels: 2x2 merge units of 2x2 patches of 8 pixels.
WINDOW = 32
#: The visual vocabulary: 60 visual words, then 4 indicator rows (image start, image end, video start, video end).
VISUAL_VOCABULARY = 64
INDICATORS = 4

#: The tokens ``Ovis2_5Processor`` reads off its tokenizer, by attribute.
NAMED = {
    "image_token": "<|image_pad|>",
    "video_token": "<|video_pad|>",
    "image_start_token": "<|image_start|>",
    "image_end_token": "<|image_end|>",
    "video_start_token": "<|video_start|>",
    "video_end_token": "<|video_end|>",
}
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

#: ChatML; each image (video) written as the processor's placeholder, which it expands between the start and end
#: tokens.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for item in message['content'] %}"
    "{% if item['type'] == 'image' %}{{ '<|image_pad|>' }}"
    "{% elif item['type'] == 'video' %}{{ '<|video_pad|>' }}"
    "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def ovis_tokenizer() -> TokenizersBackend:
    return word_level_tokenizer(
        special_tokens=SPECIAL,
        named_tokens=NAMED,
        chat_template=CHAT_TEMPLATE,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
    )


def _pixels() -> dict[str, int]:
    factor = PATCH * MERGE
    return {"shortest_edge": 4 * factor**2, "longest_edge": 64 * factor**2}


def build_ovis2_5() -> tuple[Ovis2_5ForConditionalGeneration, Ovis2_5Processor]:
    """Imitates AIDC-AI/Ovis2.5-2B (ovis-community/Ovis2.5-2B): the module docstring's tower, tokenizer and text."""
    tokenizer = ovis_tokenizer()
    ids = {f"{name[:-len('_token')]}_token_id": tokenizer.convert_tokens_to_ids(token) for name, token in NAMED.items()}
    config = Ovis2_5Config(
        text_config={
            "model_type": "qwen3",
            **text_sizes(tokenizer, head_dim=16, bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
                         **rope(1_000_000.0)),
        },
        vision_config={
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "patch_size": PATCH,
            "spatial_merge_size": MERGE,
            "image_size": 4 * PATCH,
            "window_size": WINDOW,
            "layer_types": ["window_attention", "full_attention"],
            "vocab_size": VISUAL_VOCABULARY,
            "num_visual_indicator_tokens": INDICATORS,
        },
        **ids,
    )
    model = Ovis2_5ForConditionalGeneration(config)
    randomise_norms(model)
    shared = {"patch_size": PATCH, "merge_size": MERGE, "temporal_patch_size": 1, "size": _pixels()}
    processor = Ovis2_5Processor(
        image_processor=Ovis2_5ImageProcessor(**shared),
        tokenizer=tokenizer,
        video_processor=Ovis2_5VideoProcessor(**shared),
        chat_template=CHAT_TEMPLATE,
    )
    return model, processor


#: The checkpoints this module builds, by name.
BUILDERS = {"ovis2_5": build_ovis2_5}


#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builders' documented
#: configurations above, never off the code under test.
CONTRACTS = {
    # envoys/testing/ovis2_5.py: 2 blocks, width 32, 2 heads, patch 8, merged 2x2: a 32x32 image is 16 patches and 4
    # tokens (one window), 64 wide x 48 high 48 and 12 (3x4 merge units, four windows of up to 2x2); block 0 in windows,
    # block 1 per image; post_layernorm after the window order is undone (one window_index entry a merge unit); the
    # projector reads the last block's output as it is (window order), its output is image_features; Qwen3 text blocks.
    "ovis2_5": Row(
        loads=Loads(("Ovis2_5ForConditionalGeneration", "Ovis2_5Processor", "TokenizersBackend"), also_written=("<|image_start|>", "<|image_end|>")),
        image_tokens=(4, 12),
        sizes=Sizes(num_layers=2, patch_size=8, image_size="image_grid_thw", **SIGLIP),
        stream=packed(16, 48),
        projected=flat((1, 4), (1, 12)),
        projector_reads=Reads("layer_output", block=-1, unbatched=True),
        final_norm=True,
        restores_window_order=True,
        window_unit=4,
        pattern=PER_IMAGE_PATTERN,
        rules=(scatter("ovis2_5"), "ovis2_5.merge-visual-features", "ovis2_5.vision-windows",
               "ovis2_5.vision-attention", "ovis2_5.eager-attention", *attention("qwen3", "Qwen3Attention")),
        # envoys/testing/ovis2_5.py: patch 8, one frame a temporal unit, merge 2x2: 4 units of 4x4 patches (64, one window
        # each), 2x2 tokens each (16).
        video=VideoRow(tokens=16, stream=(1, 64, 32), grid=(4, 2, 2)),
        native={
            "vision": "model.vision_tower", "projector": "model.multi_modal_projector",
            "vision.norm": "model.vision_tower.post_layernorm",
            "vision.patch_embed": "model.vision_tower.embeddings.patch_embedding",
            **blocks("vision.layers", "model.vision_tower.layers", ENCODER_BLOCK), **text_model("model.language_model"),
        },
    ),
}
