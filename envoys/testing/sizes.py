"""The sizes every tiny text model shares, so that a builder says only what is particular to its family."""

from __future__ import annotations

from typing import Any


def text_sizes(tokenizer: Any, **particular: Any) -> dict[str, Any]:
    """Config fields of a tiny text model: 2 blocks of width 32, 2 query heads and 1 key-value head, an MLP 64
    wide, 512 positions, the tokenizer's vocabulary and special tokens; ``particular`` adds to them or overrides them."""
    return {
        "vocab_size": len(tokenizer),
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "max_position_embeddings": 512,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
        **particular,
    }


def vision_sizes(**particular: Any) -> dict[str, Any]:
    """Config fields of a tiny SigLIP or CLIP tower: 2 blocks of width 32, 2 heads, an MLP 64 wide; ``particular``
    adds to them or overrides them (the image and patch sizes)."""
    return {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, **particular}
