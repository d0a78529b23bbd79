"""DeepSeek's tokenizer and chat format, and the Llama text model, for the tiny checkpoints of DeepSeek-VL and its
kin (DeepSeek-VL-Hybrid's)."""

from __future__ import annotations

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
