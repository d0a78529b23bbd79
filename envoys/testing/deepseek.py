"""DeepSeek's tokenizers and chat formats, the Llama text model, and the SAM stack's randomisation, for the tiny
checkpoints of DeepSeek-VL and its kin (DeepSeek-VL-Hybrid's) and of the DeepSeek-OCR towers (DeepSeek-OCR 2's,
Unlimited-OCR's)."""

from __future__ import annotations

import torch
from transformers import LlamaConfig

from .sizes import text_sizes
from .tokenizer import WORDS, TokenizersBackend, word_level_tokenizer

BOS = "<｜begin▁of▁sentence｜>"
EOS = "<｜end▁of▁sentence｜>"

#: DeepSeek-VL's chat format, reduced: ``User: <image_placeholder>...\n\nAssistant:``, each image one placeholder
#: where the message puts it, an assistant turn closed by the end-of-sentence token.
DEEPSEEK_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'user' %}{{ 'User: ' }}"
    "{% elif message['role'] == 'assistant' %}{{ 'Assistant: ' }}{% endif %}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for item in message['content'] %}"
    "{% if item['type'] == 'image' %}{{ '<image_placeholder>' }}"
    "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{% if message['role'] == 'assistant' %}{{ '" + EOS + "' }}{% else %}{{ '\n\n' }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)


def deepseek_tokenizer() -> TokenizersBackend:
    """DeepSeek-VL's tokenizer: its begin- and end-of-sentence tokens (BOS prepended, as its Llama tokenizer does;
    the end token pads), ``<image_placeholder>`` and the chat format `DEEPSEEK_TEMPLATE`."""
    return word_level_tokenizer(
        special_tokens=[BOS, EOS],
        named_tokens={"image_token": "<image_placeholder>"},
        chat_template=DEEPSEEK_TEMPLATE,
        bos_token=BOS,
        add_bos_token=True,
        eos_token=EOS,
        pad_token=EOS,
        words=(*WORDS, "User", "Assistant"),
    )


def llama_text(tokenizer: TokenizersBackend) -> LlamaConfig:
    """The Llama text model: 2 blocks, width 32, 2 query heads, 1 key-value head, the tokenizer's vocabulary."""
    return LlamaConfig(**text_sizes(tokenizer))


PAD = "<｜▁pad▁｜>"
#: The image placeholder of the DeepSeek-OCR processors.
OCR_IMAGE_TOKEN = "<image>"

#: The DeepSeek-OCR chat format, reduced: ``<|User|>`` turns with each image written as ``<image>``, an
#: ``<|Assistant|>`` turn.
OCR_TEMPLATE = (
    BOS
    + "{% for message in messages %}"
    "{% if message['role'] == 'user' %}{{ '<|User|>' }}{% else %}{{ '<|Assistant|>' }}{% endif %}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for item in message['content'] %}"
    "{% if item['type'] == 'image' %}{{ '" + OCR_IMAGE_TOKEN + "\n' }}"
    "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{% if message['role'] == 'assistant' %}{{ '" + EOS + "' }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|Assistant|>' }}{% endif %}"
)


def deepseek_ocr_tokenizer() -> TokenizersBackend:
    """The DeepSeek-OCR processors' tokenizer: its sentence and padding tokens, the two turns' markers, ``<image>`` and
    the chat format `OCR_TEMPLATE`."""
    return word_level_tokenizer(special_tokens=[BOS, EOS, PAD, "<|User|>", "<|Assistant|>"],
                                named_tokens={"image_token": OCR_IMAGE_TOKEN}, chat_template=OCR_TEMPLATE,
                                eos_token=EOS, pad_token=PAD, bos_token=BOS)


def randomise_sam_stack(model: torch.nn.Module, attention: type) -> None:
    """A SAM stack's parameters that start at zero drawn at random: its position grid (``sam_encoder.pos_embed``)
    from N(0, 1), each ``attention`` module's relative positions from N(0, 0.1)."""
    with torch.no_grad():
        model.model.vision_tower.sam_encoder.pos_embed.normal_()
        for module in model.modules():
            if isinstance(module, attention):
                module.rel_pos_h.normal_(0.0, 0.1)
                module.rel_pos_w.normal_(0.0, 0.1)
