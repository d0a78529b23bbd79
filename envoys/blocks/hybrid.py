"""Hybrid text models: blocks whose token mixer is softmax attention on some layers and something else on others.

Qwen3.5's text model mixes gated DeltaNet blocks (``linear_attn``, linear
attention with a recurrent state) and full-attention blocks (``self_attn``),
each with an MLP. NemotronH's blocks hold one sublayer each, under the one
native name ``mixer``: a Mamba2 mixer, softmax attention, or a mixture of
experts, so a block has either an attention or an MLP, or neither.
LFM2's and LFM3's blocks hold a gated short convolution (``conv``) or
attention, and so do LFM3-VL's tower blocks (a gated 2D convolution over each
image's grid), served by `HybridVisionLayer`.

A block keeps `Layer`'s values; on a block without ``self_attn`` the values of
the attention it lacks (``attention_output`` and every ``self_attn.*`` value)
are Unavailable, on a block without ``mlp`` ``mlp_output`` is, and
`HybridLayer.support` says so per block, naming the sublayer the block has
instead and where to read what it adds to the stream (on a sandwich-normed
block, ``mixer_post_norm``, the output of the norm after it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..core.layouts import Hidden, Patches
from ..core.standard import child
from ..core.values import First, standard_values, value
from ..text.blocks import Attention, Layer, either
from ..vision.tower import VisionLayer, as_patches, from_patches, no_images

#: Qwen3.5's token mixers other than softmax attention: child name -> what it is.
MIXERS = {"linear_attn": "a gated DeltaNet (linear attention)"}


def other_mixer(block: Any) -> tuple[str, str] | None:
    """``(child name, what it is)`` of the block's token mixer other than softmax attention, or None.

    The block's class names the mixers it may hold (``mixers``): a key is a
    child name, or a module class matched against the block's direct children
    (for a stack that holds different mixers under one native name).
    """
    for key, what in block.mixers.items():
        if isinstance(key, str):
            if child(block, key) is not None:
                return key, what
            continue
        for candidate in block._children:
            if isinstance(candidate._module, key):
                return candidate.path.rpartition(".")[2], what
    return None


def _index(block: Any) -> str:
    return block.path.rpartition(".")[2]


def _named(block: Any) -> str:
    """The block's standard name, ``layers[i]`` (``vision.layers[i]`` on a tower's, its ``stream_name``)."""
    return f"{getattr(block, 'stream_name', 'layers')}[{_index(block)}]"


def _adds(block: Any, name: str) -> str:
    """Where what the block's mixer ``name`` adds to the stream is read: its output, or, on a sandwich-normed block
    (``mixer_post_norm``), the output of the norm after it."""
    norm = getattr(block, "mixer_post_norm", None)
    if norm is None:
        return f"{_named(block)}.{name}.output"
    return f"{_named(block)}.{norm}.output, {name}'s output after {norm}"


def no_softmax_attention(block: Any) -> str | None:
    """Why this block has no softmax attention values, or None when it has ``self_attn``."""
    if child(block, "self_attn") is not None:
        return None
    index = _index(block)
    mixer = other_mixer(block)
    if mixer is not None:
        name, what = mixer
        return (
            f"{_named(block)}'s token mixer is {what}, {name}, not softmax attention, so it has no "
            f"self_attn values; what it adds to the stream is {_adds(block, name)}"
        )
    mlp = child(block, "mlp")
    if mlp is not None:
        return (
            f"layers[{index}] holds no token mixer, only its MLP ({type(mlp._module).__name__}), so it has no "
            f"self_attn values; what it adds to the stream is layers[{index}].mlp_output"
        )
    names = ", ".join(c.path.rpartition(".")[2] for c in block._children)
    return f"layers[{index}] has no self_attn (it holds {names})"


def no_mlp(block: Any) -> str | None:
    """Why this block has no ``mlp_output``, or None when it has an ``mlp``."""
    if child(block, "mlp") is not None:
        return None
    index = _index(block)
    kind = type(block._module).__name__
    mixer = other_mixer(block)
    if child(block, "self_attn") is not None:
        holds, adds = "softmax attention, self_attn", f"layers[{index}].attention_output"
    elif mixer is not None:
        holds, adds = f"{mixer[1]}, {mixer[0]}", f"layers[{index}].{mixer[0]}.output"
    else:
        names = ", ".join(c.path.rpartition(".")[2] for c in block._children)
        return f"layers[{index}] has no mlp (it holds {names})"
    return (
        f"layers[{index}] has no MLP: this {kind} holds one sublayer, {holds}, so what it adds to the stream, "
        f"layer_output - layer_input, is {adds}"
    )


class HybridLayer(Layer):
    """A block of a hybrid text model: `Layer`'s values where it has ``self_attn`` and ``mlp``, each missing
    one Unavailable (with the sublayer it has instead) where not."""

    #: The token mixers other than softmax attention this block may hold: child name or module class -> what it is.
    mixers: Mapping[str | type, str] = MIXERS

    attention_output = value(
        "attention_output", Hidden, description="what the attention adds to the stream",
        key=lambda block: f"{child(block, 'self_attn').path}.output", select=First(), unavailable=no_softmax_attention,
    )
    mlp_output = value(
        "mlp_output", Hidden, description="what the MLP adds to the stream",
        key=lambda block: f"{child(block, 'mlp').path}.output", select=First(), unavailable=no_mlp,
    )

    def support(self) -> dict[str, str | None]:
        """This block's values, plus, on a block without ``self_attn``, each attention value with the reason."""
        return with_attention_rows(self, super().support())


def with_attention_rows(block: Any, rows: dict[str, str | None]) -> dict[str, str | None]:
    """``rows`` plus, on a block without ``self_attn``, each attention value with the reason."""
    reason = no_softmax_attention(block)
    if reason is not None:
        rows.update({f"self_attn.{name}": reason for name in standard_values(Attention)})
    return rows


def mixer_attention_output(layout: type) -> Any:
    """A hybrid tower block's ``attention_output`` in ``layout`` (a packed tower's `PackedPatches`): the attention's
    output, Unavailable on a block whose mixer is not softmax attention."""
    return value(
        "attention_output", layout, description="what the attention adds to the stream",
        key=lambda block: f"{child(block, 'self_attn').path}.output", select=First(), unavailable=either(no_images, no_softmax_attention),
        view=as_patches, inverse=from_patches,
    )


class HybridVisionLayer(VisionLayer):
    """A tower block whose token mixer is softmax attention on some blocks and something else on others (LFM3-VL's
    gated 2D convolution): `VisionLayer`'s values, ``attention_output`` and every ``self_attn.*`` value Unavailable
    on a block without ``self_attn``, naming the mixer it has instead."""

    stream_name = "vision.layers"
    #: The token mixers other than softmax attention this block may hold: child name -> what it is.
    mixers: Mapping[str | type, str] = {}

    attention_output = mixer_attention_output(Patches)

    def support(self) -> dict[str, str | None]:
        """This block's values, plus, on a block without ``self_attn``, each attention value with the reason."""
        return with_attention_rows(self, super().support())
