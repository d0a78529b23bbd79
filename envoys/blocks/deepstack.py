"""DeepStack (Qwen3-VL, Granite-Docling): what the text model adds at the image positions after each of its first
blocks.

The tower taps some of its blocks (``vision_config.deepstack_visual_indexes``)
and merges each tap with its own merger (Qwen3-VL's
``vision.deepstack_merger_list[k]``, Granite-Docling's connector path's
``deepstack_mergers[k]``); the text model's forward adds merger k's output at
the image positions after text block k, outside the block, with ``self._deepstack_process(hidden_states,
visual_pos_masks, visual_embeds)`` (site ``self__deepstack_process_0``, one
line of the layer loop). So on the blocks that receive a feature::

    layers[k + 1].input[mask] == layers[k].layer_output[mask] + layers[k].deepstack_output

with the rest of the stream unchanged, and on the others
``layers[k + 1].input == layers[k].layer_output``.
"""

from __future__ import annotations

from typing import Any

from rewrites.deepstack import DEEPSTACK_SITE

from ..core.layouts import ImageFeatures
from ..core.pinning import pinned_value
from ..core.standard import missing_site
from ..core.values import Argument
from ..text.blocks import Layer
from ..vision.tower import no_images


def block_index(block: Any) -> int:
    """The block's index in the text model's layers."""
    return int(block.path.rpartition(".")[2])


def text_model(block: Any) -> Any:
    """The envoy of the text model whose layer loop holds ``block`` (the ``layers`` list's parent)."""
    return block.parent.parent


def deepstack_location(block: Any) -> str:
    """The arguments of the text model's ``_deepstack_process`` call (block k's is occurrence k)."""
    return f"{text_model(block).path}.source.{DEEPSTACK_SITE}.input"


def taps(block: Any) -> int:
    """How many blocks receive a deepstack feature: one per tapped tower block, at most the text model's depth."""
    indexes = getattr(block.root.config.vision_config, "deepstack_visual_indexes", None) or ()
    return min(len(indexes), len(block.parent))


def no_deepstack(block: Any) -> str | None:
    """Why this block has no deepstack_output, or None."""
    reason = no_images(block)
    if reason is not None:
        return reason
    count, index = taps(block), block_index(block)
    if index >= count:
        if not count:
            return "this tower taps none of its blocks (vision_config.deepstack_visual_indexes is empty)"
        following = (
            f"layers[{index + 1}].input == layers[{index}].layer_output"
            if index + 1 < len(block.parent)
            else "the stream goes on to the final norm unchanged"
        )
        return (
            f"the tower taps {count} of its blocks (vision_config.deepstack_visual_indexes), and their merged "
            f"features are added after text blocks 0 to {count - 1} only; layers[{index}] is past the taps, "
            f"so {following}"
        )
    return missing_site(text_model(block), DEEPSTACK_SITE)


class DeepstackLayer(Layer):
    """A DeepStack text block (Qwen3-VL's): `Layer`'s values, and the DeepStack feature added after it
    (``deepstack_output``).

    The text model's ``_deepstack_process`` call runs once after each of the
    first blocks, from one line of its loop, so its location is the same for
    every block and block k's is its k-th occurrence: ``deepstack_output`` asks
    for that occurrence explicitly (pinned) rather than the next one the model
    reaches.
    """

    deepstack_output = pinned_value(
        "deepstack_output", ImageFeatures, description="what the text model adds at the image positions after this block",
        key=deepstack_location, select=Argument(2, "visual_embeds"), unavailable=no_deepstack,
        occurrence=block_index, per_forward=taps,
        doc="""What the text model adds at the image positions after this block, ``[image_tokens, hidden_size]``.

        ``layers[k+1].input[mask] == layers[k].layer_output[mask] + layers[k].deepstack_output``,
        the rest of the stream unchanged: block k's tap, merged by its merger
        (Qwen3-VL's ``vision.deepstack_merger_list[k]``). Assign (zeros remove it) or edit
        in place. Unavailable on the blocks past the taps. On a prompt with videos
        the mask is every visual token, ``image_token_mask | video_token_mask``, and
        the rows are the image's and the video's taps in prompt order
        (``[image_tokens + video_tokens, hidden_size]``).
        """,
    )
