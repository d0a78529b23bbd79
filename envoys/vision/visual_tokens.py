"""A projector that is a visual tokenizer (Ovis2, Ovis2.5): probabilities over a visual vocabulary, then a table.

The visual tokenizer maps each image token's patches to logits over a visual
vocabulary and takes their softmax; the host pads each row with zeros for the
indicator words (the vocabulary's last ``num_visual_indicator_tokens``
entries, whose embeddings the host writes at the tokens around each image) and
multiplies it by the visual embedding table. ``projector.visual_tokens`` is
that softmax, the indicator columns left out; ``projector.output`` is the
table's output, each token's expected embedding under its probabilities.
"""

from __future__ import annotations

from typing import Any

import torch

from ..core.layouts import Layout
from ..core.standard import Standard
from ..core.values import EProperty, Selector, value
from .tower import FIRST_STEP_ONLY, VISION_ORDER, no_images


class VisualTokens(Layout):
    """[tiles, image_tokens, visual_vocab]: each image token's probabilities over a visual vocabulary, a row per tile."""


class PackedVisualTokens(Layout):
    """[image_tokens, visual_vocab]: each image token's probabilities over a visual vocabulary, every image's in a run."""


def visual_words(config: Any) -> int:
    """The visual vocabulary's words that are not indicator words: the columns of ``visual_tokens``."""
    vision = config.vision_config
    return vision.vocab_size - vision.num_visual_indicator_tokens


def _no_visual_tokens(projector: Any) -> str | None:
    vision = projector.root.__dict__.get("vision")
    return no_images(vision if isinstance(vision, Standard) else projector)


def visual_tokens_value(layout: type[Layout], padded_at: str, padded_part: Selector | None = None) -> EProperty:
    """``projector.visual_tokens`` in ``layout``, read off the padded probabilities at ``padded_at`` (a location under
    the projector: its ``input``, or a child's ``output``), ``padded_part`` of it (a `Selector`, or None)."""
    return value(
        "visual_tokens", layout, description="each image token's probabilities over the visual vocabulary",
        key=lambda projector: f"{projector.path}.{padded_at}", select=padded_part, unavailable=_no_visual_tokens,
        view=lambda projector, padded: padded[..., : visual_words(projector.root.config)],
        inverse=lambda projector, written, current: torch.cat((written, current[..., written.shape[-1]:]), dim=-1),
        needs_envoy=True,
        doc=f"Each image token's probabilities over the visual vocabulary, ``{layout.shape()}``, the indicator words' "
        "columns left out: the softmax of the visual tokenizer's logits, before the host pads each row with zeros for "
        "the indicator words and weighs the embedding table's rows by it (``projector.output``). A view of the padded "
        "rows: an in-place edit reaches the table; assign probabilities of the same shape to replace them.",
    )


class VisualTokenizerProjector(Standard):
    """``model.projector`` where it is a visual tokenizer's embedding table (see the module docstring): a family's
    subclass serves ``visual_tokens`` (`visual_tokens_value`) where its padded probabilities are."""

    order_hint = VISION_ORDER
    first_step_only = FIRST_STEP_ONLY


__all__ = ["PackedVisualTokens", "VisualTokenizerProjector", "VisualTokens", "visual_tokens_value", "visual_words"]
