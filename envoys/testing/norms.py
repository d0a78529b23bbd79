"""Norm weights drawn at random, for tiny checkpoints whose norms start at ones and zeros."""

from __future__ import annotations

import torch


def randomise_norms(model: torch.nn.Module) -> None:
    """Draw every norm's weight from U(0.5, 1.5) and its bias (where it has one) from N(0, 0.1).

    A norm at its init (weight ones, bias zeros) only standardises, so a value
    read before the norm and one read after it differ by that alone, and a
    norm that mixes several patches' features (a projector's over a folded
    block) weighs them all alike; drawn weights make each norm its own map.
    For norms that scale by ``weight`` (LayerNorm, RMSNorm), not ``1 + weight``.
    """
    with torch.no_grad():
        for module in model.modules():
            if "Norm" not in type(module).__name__:
                continue
            weight, bias = getattr(module, "weight", None), getattr(module, "bias", None)
            if isinstance(weight, torch.nn.Parameter):
                weight.uniform_(0.5, 1.5)
            if isinstance(bias, torch.nn.Parameter):
                bias.normal_(0.0, 0.1)
