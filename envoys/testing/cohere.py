"""Cohere's tokenizer, chat template and text model for the tiny checkpoints whose text model is Cohere's (Aya
Vision's kin) or whose chat turns are (Cohere Compass's)."""

from __future__ import annotations

from transformers import Cohere2Config

from .sizes import text_sizes
from .tiles import MAX_TILES
from .tokenizer import WORDS, TokenizersBackend, word_level_tokenizer

#: The words Aya Vision's processor writes before each tile's image tokens (TILE_1, TILE_2, ... and TILE_GLOBAL),
#: plain words a real Cohere tokenizer encodes.
TILE_WORDS = ("TILE", "TILE_GLOBAL", *(f"TILE_{k}" for k in range(1, MAX_TILES + 1)))

#: Cohere's chat turns, reduced (no system preamble): ``<BOS_TOKEN><|START_OF_TURN_TOKEN|><|USER_TOKEN|>`` + the
#: content, each image as the processor's placeholder, + ``<|END_OF_TURN_TOKEN|>``, then the chatbot's turn.
COHERE_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|START_OF_TURN_TOKEN|>' + ('<|USER_TOKEN|>' if message['role'] == 'user' else '<|CHATBOT_TOKEN|>') }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for item in message['content'] %}"
    "{% if item['type'] == 'image' %}{{ 'IMAGE_PLACEHOLDER' }}"
    "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '<|END_OF_TURN_TOKEN|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>' }}{% endif %}"
)

#: Cohere's turn tokens.
TURN_TOKENS = ["<PAD>", "<BOS_TOKEN>", "<|START_OF_TURN_TOKEN|>", "<|END_OF_TURN_TOKEN|>", "<|USER_TOKEN|>",
               "<|CHATBOT_TOKEN|>"]
#: The image tokens Cohere's vision tokenizers hold, by the names Cohere 2 Vision's processor reads.
IMAGE_TOKENS = {
    "boi_token": "<|START_OF_IMG|>",
    "eoi_token": "<|END_OF_IMG|>",
    "image_token": "<|IMG_PATCH|>",
    "img_line_break_token": "<|IMG_LINE_BREAK|>",
}


def cohere_template(placeholder: str) -> str:
    """`COHERE_TEMPLATE` with each image written as ``placeholder``."""
    return COHERE_TEMPLATE.replace("IMAGE_PLACEHOLDER", placeholder)


def cohere_tokenizer(named: dict[str, str], template: str) -> TokenizersBackend:
    """A Cohere-style tokenizer: the turn tokens and the image tokens special, ``named`` as the processor's names."""
    return word_level_tokenizer(
        special_tokens=[*TURN_TOKENS, *IMAGE_TOKENS.values()],
        named_tokens=named,
        chat_template=template,
        bos_token="<BOS_TOKEN>",
        eos_token="<|END_OF_TURN_TOKEN|>",
        pad_token="<PAD>",
        words=(*WORDS, *TILE_WORDS),
    )


def cohere2_text(tokenizer: TokenizersBackend) -> Cohere2Config:
    """The Cohere 2 text model: 2 parallel blocks of width 32, 2 query heads / 1 key-value head of 16, block 0
    sliding (window 16, rotary embeddings), block 1 global (no position embedding), tied embeddings."""
    return Cohere2Config(**text_sizes(
        tokenizer,
        head_dim=16,
        sliding_window=16,
        layer_types=["sliding_attention", "full_attention"],
        tie_word_embeddings=True,
    ))
