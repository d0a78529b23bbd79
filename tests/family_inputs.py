"""What the family tests give a tiny checkpoint and compute beside it: the prompt, the processor's grid, and one
image's eager attention."""

from __future__ import annotations

import torch

from envoys.testing import chat_prompt


def prompt(model, images) -> str:
    """One user turn holding one image placeholder per image, then a question, in the model's chat template."""
    return chat_prompt(model.processor, len(images), "What is in the picture?")


def grid(model, images) -> torch.Tensor:
    """The stock processor's ``image_grid_thw``: ``[t, h, w]`` patches per image."""
    return model.processor(text=[prompt(model, images)], images=images, return_tensors="pt")["image_grid_thw"]


def eager_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scaling: float) -> torch.Tensor:
    """One image's attention as transformers' eager kernel computes it: [1, heads, n, d] in, [1, n, heads, d] out."""
    weights = torch.softmax(torch.matmul(q, k.transpose(2, 3)) * scaling, dim=-1, dtype=torch.float32).to(q.dtype)
    return torch.matmul(weights, v).transpose(1, 2).contiguous()
