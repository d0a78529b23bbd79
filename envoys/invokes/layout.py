"""Where each invoke's part of a value lies, by what the value's axis counts: rows, images, tiles, patches or image tokens.

nnsight narrows a value to an invoke by its first axis when that axis is the
batch's row count. The text model's values are so; the vision side's are not:

- a batched tower (SigLIP, CLIP, a tiled tower) runs on ``[tiles, patches, width]``:
  an invoke's part is its images' tiles, and an invoke carries any number;
- a packed tower (the Qwen ViT, Pixtral) runs on ``[1, patches, width]`` or
  ``[patches, width]`` (``[1, heads, patches, head_dim]`` inside its attention):
  an invoke's part is its images' patches, and after a merger its image tokens;
- the scatter's features are ``[image_tokens, hidden]`` (or ``[images, tokens, hidden]``, or flattened,
  ``[image_tokens * hidden]``);
  its mask is the text rows ``[batch, seq]``;
- the model's inputs hold both: text rows, and image tensors whose first axis
  each invoke fills in turn (`envoys.invokes.inputs`).

`InvokeLayout` knows, for every invoke, its span of each of those axes, and
which locations are the vision side's (the tower's and the projector's module
paths, the scatter's and DeepStack's arguments, the model's inputs). For a
tensor served at a location it gives the axis and span of the invoke's part,
the count that axis holds being chosen by the location's kind and in a fixed
order (a packed tower's patches before its image tokens before its images), so
two counts that happen to be equal are still told apart where the location says
which one it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from ..image.grids import ImageInputs
from .inputs import Span, is_row_key

#: The kinds of location: the model's inputs (keys), the tower or projector (images, tiles, patches, image tokens),
#: the scatter and DeepStack's call (text rows, image tokens, images), anything else (text rows, nnsight's own rule).
INPUTS, VISION, SCATTER, TEXT = "inputs", "vision", "scatter", "text"


@dataclass(frozen=True)
class InvokeParts:
    """One invoke's span of every axis the batch holds.

    ``rows``: its prompts' rows of the text batch (nnsight's ``batch_group``).
    ``images``: its images among the batch's. ``tiles``: its rows of a batched
    tower's leading axis (an image each, or its tiles); on a packed tower, its
    rows of the pixel input. ``streams``: its rows of a packed tower's stream,
    under each kind of stream value the family's grid layout places, the
    stream's first (none on a batched tower). ``tokens``: its image tokens
    among the batch's (the scatter's features, a packed tower's merged output).
    ``keys``: its part of each joined image input (``pixel_values``,
    ``image_grid_thw``, ...), as ``(axis, span)``. ``inputs``: its images'
    inputs as the processor gave them alone, which its grids read.
    """

    rows: Span
    images: Span
    tiles: Span
    streams: tuple[Span, ...]
    tokens: Span
    keys: Mapping[str, tuple[int, Span]]
    #: what the processor gave this invoke's images alone (its grids, `envoys.image.grids`); None where it has none
    inputs: ImageInputs | None = None

    @property
    def carries_images(self) -> bool:
        return self.images.size > 0


@dataclass(frozen=True)
class InvokeLayout:
    """Every invoke's parts, and the locations of the vision side, by kind."""

    parts: tuple[InvokeParts, ...]
    inputs: frozenset[str]  #: the model's inputs (the root's, the scatter host's): narrowed key by key
    vision: tuple[str, ...]  #: module paths of the tower and the projector: every location under them
    scatters: frozenset[str]  #: the scatter's and DeepStack's argument locations
    packed: bool  #: the tower's stream is packed (`PackedPatches`), its patches one row after another
    sequence: int  #: the text batch's length (``input_ids.shape[1]``)
    #: a per-image attention's input location -> its per-call site's locations (`envoys.invokes.per_call_sites`)
    per_call: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def total(self, axis: str) -> int:
        """How many rows the whole batch holds along ``axis`` (``"rows"``, ``"images"``, ``"tiles"``, ``"tokens"``)."""
        return getattr(self.parts[-1], axis).stop

    def invoke(self, group: list) -> InvokeParts:
        """The parts of the invoke whose nnsight ``batch_group`` is ``group``."""
        for parts in self.parts:
            if parts.rows.start == group[0]:
                return parts
        raise LookupError(f"no invoke starts at row {group[0]} of the batch")

    def kind(self, provider: str | None) -> str:
        if provider is None:
            return TEXT
        if provider in self.inputs:
            return INPUTS
        if provider in self.scatters:
            return SCATTER
        if any(provider.startswith(path + ".") for path in self.vision):
            return VISION
        return TEXT

    def place(self, kind: str, tensor: torch.Tensor, parts: InvokeParts) -> tuple[int, Span] | None:
        """``(axis, span)`` of ``parts``' invoke in ``tensor`` at a location of ``kind``; None: the tensor is the
        whole batch's, served whole."""
        if tensor.dim() == 0:
            return None
        lead = tensor.shape[0]
        if kind == SCATTER:
            if tensor.dtype == torch.bool and lead == self.total("rows"):
                return 0, parts.rows  # the image-token mask, [batch, seq] (or expanded over the width)
            if tensor.dim() >= 3 and lead == self.total("rows") and tensor.shape[1] == self.sequence:
                return 0, parts.rows  # the text stream
            if lead == self.total("tokens"):
                return 0, parts.tokens
            tokens = self.total("tokens")
            if tensor.dim() == 1 and tokens and lead % tokens == 0:  # [image_tokens * hidden] (Molmo 2's, flattened)
                width = lead // tokens
                return 0, Span(parts.tokens.start * width, parts.tokens.size * width)
            if tensor.dim() == 3 and lead == self.total("images"):
                return 0, parts.images  # features passed per image, [images, tokens, hidden] (PaliGemma's)
            if tensor.dim() == 3 and lead == self.total("tiles"):
                return 0, parts.tiles  # features passed per tile, [tiles, tokens, hidden] (InternVL's)
            return None
        if kind == VISION:
            if self.packed:
                for stream, span in enumerate(parts.streams):
                    patches = self.parts[-1].streams[stream].stop
                    for axis in range(min(tensor.dim(), 3)):  # [patches, w], [1, patches, w], [1, heads, patches, d]
                        if tensor.shape[axis] == patches and (axis == 0 or tensor.shape[0] == 1):
                            return axis, span
                for axis in ("tokens", "images", "tiles"):
                    if lead == self.total(axis):
                        return 0, getattr(parts, axis)
                return None
            for axis in ("tiles", "images", "tokens"):
                if lead == self.total(axis):
                    return 0, getattr(parts, axis)
            return None
        if lead == self.total("rows"):
            return 0, parts.rows
        return None

    def bounds(self, kind: str, tensor: torch.Tensor) -> int | None:
        """Which stream ``tensor``, at a location of ``kind``, bounds, where it is a packed tower's cumulative per-call
        bounds (``cu_seqlens``: integers from 0 to the stream's rows, one more than its images or windows); else
        None. An invoke's part is its own calls' bounds, counted from its first row (`bounded`)."""
        if kind != VISION or not self.packed or tensor.dim() != 1 or tensor.is_floating_point() \
                or tensor.dtype == torch.bool or tensor.shape[0] < 2 or int(tensor[0]) != 0:
            return None
        rows = int(tensor[-1])
        return next((stream for stream, span in enumerate(self.parts[-1].streams) if span.stop == rows), None)

    def bounded(self, tensor: torch.Tensor, stream: int, parts: InvokeParts) -> torch.Tensor:
        """``parts``' invoke's own bounds among ``tensor``, the cumulative bounds of stream ``stream``: those within its
        rows of the stream, counted from its first."""
        span = parts.streams[stream]
        own = tensor[(tensor >= span.start) & (tensor <= span.stop)]
        return own - span.start

    def calls_of(self, bounds: torch.Tensor, parts: InvokeParts) -> range:
        """Which calls of a per-image attention are ``parts``' invoke's: those whose rows (``bounds``, the
        attention's ``cu_seqlens``) start inside the invoke's span of the stream they bound."""
        rows = int(bounds[-1])
        span = next((span for stream, span in enumerate(parts.streams) if self.parts[-1].streams[stream].stop == rows),
                    parts.tiles)  # else a stream counted as the pixel rows are
        starts = bounds[:-1]
        return range(int((starts < span.start).sum()), int((starts < span.start + span.size).sum()))

    def calls_before(self, bounds: torch.Tensor, parts: InvokeParts) -> int:
        """How many calls of a per-image attention come before ``parts``' invoke's first (`calls_of`)."""
        return self.calls_of(bounds, parts).start

    def place_input(self, key: str | int, tensor: torch.Tensor, parts: InvokeParts) -> tuple[int, Span] | None:
        """``(axis, span)`` of the invoke in one of the model's inputs (``key`` a keyword's name, or a positional
        argument's index): a text row by rows, an image input by the span its invoke filled
        (`envoys.invokes.inputs.join`), a positional one (``input_ids``) by rows where it is as long."""
        if isinstance(key, str) and key in parts.keys:
            return parts.keys[key]
        positional = not isinstance(key, str)
        if (positional or is_row_key(key)) and tensor.dim() >= 1 and tensor.shape[0] == self.total("rows"):
            return 0, parts.rows
        return None


def narrowed(tensor: torch.Tensor, axis: int, span: Span) -> torch.Tensor:
    """``span`` of ``tensor`` on ``axis``, marked as nnsight marks its own narrowed views (for backward hooks)."""
    view = tensor.narrow(axis, span.start, span.size)
    view._nnsight_batch = True
    return view


def widened(full: torch.Tensor, axis: int, span: Span, edited: Any) -> torch.Tensor:
    """``full`` with ``span`` on ``axis`` replaced by ``edited`` (a new tensor: autograd stays correct)."""
    before = full.narrow(axis, 0, span.start)
    after = full.narrow(axis, span.stop, full.shape[axis] - span.stop)
    return torch.cat([before, torch.as_tensor(edited).to(full.dtype), after], dim=axis)
