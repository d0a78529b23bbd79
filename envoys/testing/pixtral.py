"""The Pixtral tower and Mistral's tokenizer for the tiny checkpoints of its kin (Mistral 3's, LLaVA with Pixtral's,
LightOnOCR's, Mistral Large 4's): the tower's config, the Pixtral image processor and processor, the tokenizer with
Mistral's image tokens and chat template, and the wrapper fields of a 2x2 patch-merging projector.

Images keep their own size: the Pixtral image processor scales an image down
only when its longest side is over ``longest_edge`` (64 px), then rounds each
side up to a multiple of its patch size, which is the vision patch (4 px) times
``spatial_merge_size`` (2), as the processor passes it.
"""

from __future__ import annotations

from transformers import PixtralImageProcessor, PixtralProcessor, PixtralVisionConfig

from .sizes import vision_sizes
from .tokenizer import TokenizersBackend, word_level_tokenizer

PATCH_SIZE = 4
MERGE = 2
LONGEST_EDGE = 64

#: Mistral's instruction format: ``[INST]`` + the images' ``[IMG]`` placeholders + the text + ``[/INST]``
#: (the tokenizer prepends ``<s>``).
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'user' %}{{ '[INST]' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for item in message['content'] %}"
    "{% if item['type'] == 'image' %}{{ '[IMG]' }}"
    "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '[/INST]' }}"
    "{% elif message['role'] == 'assistant' %}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for item in message['content'] %}{{ item['text'] }}{% endfor %}{% endif %}"
    "{{ '</s>' }}"
    "{% endif %}"
    "{% endfor %}"
)


def mistral_tokenizer() -> TokenizersBackend:
    """The word-level tokenizer with Mistral's special tokens, image tokens and instruction template (BOS prepended)."""
    return word_level_tokenizer(
        special_tokens=["<s>", "</s>", "<pad>", "[INST]", "[/INST]"],
        named_tokens={"image_token": "[IMG]", "image_break_token": "[IMG_BREAK]", "image_end_token": "[IMG_END]"},
        chat_template=CHAT_TEMPLATE,
        bos_token="<s>",
        add_bos_token=True,
        eos_token="</s>",
        pad_token="<pad>",
    )


def pixtral_tower(patch_size: int) -> PixtralVisionConfig:
    """A Pixtral tower: 2 blocks, width 32, 2 heads (head_dim 16), gated SiLU MLP 64 wide, ``patch_size`` px patches,
    2D axial rotary positions, no final norm; ``image_size`` (`LONGEST_EDGE`) is the longest side the processor keeps."""
    return PixtralVisionConfig(**vision_sizes(patch_size=patch_size, image_size=LONGEST_EDGE, hidden_act="silu"))


def pixtral_image_processor(patch_size: int) -> PixtralImageProcessor:
    """The stock Pixtral image processor: an image keeps its size up to `LONGEST_EDGE` (scaled down beyond it), each
    side rounded up to a multiple of ``patch_size`` px (the tower's patch times the projector's merge)."""
    return PixtralImageProcessor(
        size={"longest_edge": LONGEST_EDGE}, patch_size={"height": patch_size, "width": patch_size},
    )


#: What Mistral 3's wrapper config sets beside its tower and text model: the projector merges 2x2 patches of the last
#: block through a GELU MLP without biases; untied head.
WRAPPER = {"spatial_merge_size": MERGE, "vision_feature_layer": -1, "projector_hidden_act": "gelu",
           "multimodal_projector_bias": False, "tie_word_embeddings": False}


def pixtral_processor(tokenizer: TokenizersBackend, patch_size: int = PATCH_SIZE, merge: int = MERGE) -> PixtralProcessor:
    """The stock `PixtralProcessor` over ``tokenizer``: `pixtral_image_processor` rounding sides to the merged patch
    (``patch_size`` x ``merge`` px; ``merge`` 1 where no projector merges patches), Mistral's instruction template."""
    return PixtralProcessor(
        image_processor=pixtral_image_processor(patch_size * merge),
        tokenizer=tokenizer,
        patch_size=patch_size,
        spatial_merge_size=merge,
        chat_template=CHAT_TEMPLATE,
    )
