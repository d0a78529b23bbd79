"""Attention that calls its kernel once per image: no one tensor is a block's attention pattern.

The Qwen ViT splits its queries, keys and values per image (per window on
Qwen2.5-VL's windowed blocks) and calls the kernel on each; RADIO does the
same when several images are packed. ``attention_scores`` and
``attention_probabilities`` are then Unavailable on every block, whatever the
implementation, with the tower's own reason: which calls run, and where to
split the whole queries and keys as the calls do, read first (`READ_THE_SPLIT_FIRST`).
"""

from __future__ import annotations

from typing import Any

from ..core.layouts import Pattern
from ..core.values import EProperty, standard_values, value
from ..text.blocks import either
from ..vision.tower import no_images

#: What every per-image reason adds: the split is read before the values it splits, or nnsight has passed it.
READ_THE_SPLIT_FIRST = (
    "in the trace, read self_attn.inputs[1]['cu_seqlens'] first, before attention_queries and attention_keys "
    "(the module's inputs come before the values inside it: read after them, nnsight raises OutOfOrderError), "
    "then take each call's rows between consecutive bounds: queries[:, :, bounds[k]:bounds[k + 1]]"
)


def per_image_reason(
    attention: str,
    calls: str = "per image (attention_interface_2)",
    *,
    bounds: str | None = "per image is the processor's image_grid_thw",
    window_order: bool = False,
) -> str:
    """Why a packed tower's attention has no one pattern, and how to split its queries and keys as its calls do.

    ``attention`` names the attention (``"the GLM ViT's attention"``); ``calls``
    says which interface calls it makes; ``bounds`` what its ``cu_seqlens``
    follow (None: not stated); ``window_order``: its blocks' rows are in window
    order, so the whole queries and keys are too.
    """
    order = ", in window order" if window_order else ""
    follows = f", which {bounds}" if bounds else ""
    return (
        f"{attention} makes one interface call {calls}, so no one tensor is the block's pattern; read attention_queries "
        f"and attention_keys, whole{order}, and split them where the calls do: at the attention's cu_seqlens argument "
        f"(self_attn.inputs[1]['cu_seqlens']){follows}"
    )


def per_image_pattern(
    reason: str,
    site: str,
    reason_name: str,
    description: str = "one pattern per image (or window), inside each kernel call",
) -> tuple[EProperty, EProperty]:
    """``(attention_scores, attention_probabilities)``, both Unavailable with ``reason`` and `READ_THE_SPLIT_FIRST`.

    ``site`` is the per-image kernel call (where each image's pattern lives,
    inside the call); ``reason_name`` names the reason in the docstrings;
    ``description`` is what a repr shows.
    """

    def per_image(attention: Any) -> str:
        return f"{reason}; {READ_THE_SPLIT_FIRST}"

    def unavailable(name: str) -> EProperty:
        pattern = value(
            name, Pattern, description=description, shape="", key=lambda a: f"{a.path}.source.{site}.output",
            unavailable=either(no_images, per_image), doc=f"Unavailable: `{reason_name}`.",
        )
        pattern.per_call_site = site  # each call of the site is one image's (or window's): `per_call_site`
        return pattern

    return unavailable("attention_scores"), unavailable("attention_probabilities")


def per_call_site(attention: Any) -> str | None:
    """The site of ``attention``'s forward each of whose calls is one image's (or one window's), or None: where its
    pattern lives, one call per image (`per_image_pattern`)."""
    return getattr(standard_values(type(attention)).get("attention_probabilities"), "per_call_site", None)
