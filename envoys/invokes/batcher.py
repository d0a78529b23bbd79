"""The batcher that serves each invoke its own part of the vision side's values, and the interleaver that tells it where.

nnsight's `Batcher` narrows a served value to an invoke's rows and widens a
write back (``_narrow_tensor`` and ``_widen_tensor`` are its documented
override points), but is not told which location it serves; the interleaver's
``handle`` is. `LocatingInterleaver` records the location on the batcher while
it serves, and `InvokeBatcher` asks the batch's `InvokeLayout` for the axis
and span of the invoke's part there. Where the trace has one invoke, or none
carries an image, both behave exactly as nnsight's.
"""

from __future__ import annotations

from typing import Any

import torch
from nnsight.intervention.batching import SkipParts

from ..core.turns import TurnTakingBatcher, TurnTakingInterleaver
from .layout import INPUTS, VISION, InvokeLayout, narrowed, widened
from .outputs import by_keyword, uncopyable


class InvokeBatcher(TurnTakingBatcher):
    """nnsight's batcher, narrowing by the batch's `InvokeLayout` where several invokes carry images.

    ``layout`` is what the model's ``batch_with_layout`` returned for the batch
    (None: nnsight's rows); ``provider`` the location being served, set by
    `LocatingInterleaver`.
    """

    def __init__(self, envoy: Any, kwargs: dict | None = None) -> None:
        super().__init__(envoy, kwargs)
        self.layout: InvokeLayout | None = None
        self.provider: str | None = None

    def assemble(self, fn: Any) -> tuple:
        batch = getattr(self.envoy, "batch_with_layout", None)
        if batch is None:
            return super().assemble(fn)
        args, kwargs, self.layout = batch(self.invokes, fn)
        if self.layout is not None:  # several image invokes: only a LocatingInterleaver batches them
            self.envoy.interleaver.locate()
        return args, {**kwargs, **self.extra_kwargs}

    def _kind(self) -> str:
        return self.layout.kind(self.provider)

    def narrow(self, value: Any, group: Any) -> Any:
        if uncopyable(value):  # PerceptionLM's output holds a TimmWrapperModelOutput (`outputs`)
            return by_keyword(value, lambda part: self.narrow(part, group))
        if self.layout is None or not self.batching or group is None or self._kind() != INPUTS:
            return super().narrow(value, group)
        parts = self.layout.invoke(group)
        return self._inputs(value, lambda key, tensor: self._input_part(key, tensor, parts))

    def widen(self, full: Any, group: Any, edited: Any) -> Any:
        if self.layout is None or not self.batching or group is None or self._kind() != INPUTS:
            return super().widen(full, group, edited)
        parts = self.layout.invoke(group)
        edits = self._inputs(edited, lambda key, tensor: tensor)

        def put(key: str | int, tensor: torch.Tensor) -> torch.Tensor:
            place = self.layout.place_input(key, tensor, parts)
            new = edits[1][key] if isinstance(key, str) else edits[0][key]
            return new if place is None else widened(tensor, *place, new)

        return self._inputs(full, put)

    def _input_part(self, key: str | int, tensor: torch.Tensor, parts: Any) -> torch.Tensor:
        place = self.layout.place_input(key, tensor, parts)
        return tensor if place is None else narrowed(tensor, *place)

    @staticmethod
    def _inputs(value: Any, each: Any) -> Any:
        """``value``, the ``(args, kwargs)`` of a call, with ``each(key, tensor)`` applied to its tensors, ``key``
        a keyword's name or a positional argument's index."""
        if not (isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], dict)):
            return value
        args, kwargs = value
        args = tuple(each(index, arg) if isinstance(arg, torch.Tensor) else arg for index, arg in enumerate(args))
        kwargs = {key: each(key, item) if isinstance(item, torch.Tensor) else item for key, item in kwargs.items()}
        return args, kwargs

    def _narrow_tensor(self, tensor: torch.Tensor, group: list) -> torch.Tensor:
        if self.layout is None:
            return super()._narrow_tensor(tensor, group)
        kind, parts = self._kind(), self.layout.invoke(group)
        stream = self.layout.bounds(kind, tensor)
        if stream is not None:  # its own calls' bounds, counted from its first row
            return self.layout.bounded(tensor, stream, parts)
        place = self.layout.place(kind, tensor, parts)
        return tensor if place is None else narrowed(tensor, *place)

    def _widen_tensor(self, full: torch.Tensor, group: list, edited: torch.Tensor) -> torch.Tensor:
        if self.layout is None:
            return super()._widen_tensor(full, group, edited)
        kind, parts = self._kind(), self.layout.invoke(group)
        if self.layout.bounds(kind, full) is not None:
            if not torch.equal(torch.as_tensor(edited), self._narrow_tensor(full, group)):
                raise ValueError(
                    f"{self.provider}: the tower's per-image bounds (cu_seqlens) are read-only beside other invokes, "
                    f"which share them; change an invoke's images instead"
                )
            return full
        place = self.layout.place(kind, full, parts)
        return edited if place is None else widened(full, *place, edited)

    def assemble_skip(self, running: Any) -> Any:
        """Every invoke's replacement of a skipped module joined on the axis its part lies on: the images' or
        patches' axis on the vision side, the rows elsewhere."""
        if self.layout is None or not isinstance(running, SkipParts) or self._kind() != VISION:
            return super().assemble_skip(running)
        ordered = sorted(running.parts, key=lambda part: part[0][0])
        return joined([replacement for _, replacement in ordered],
                      [self.layout.invoke(group) for group, _ in ordered], self.layout)


def joined(replacements: list, parts: list, layout: InvokeLayout) -> Any:
    """Invokes' replacements of one vision module's output, joined leaf by leaf on the axis their parts lie on: a packed
    tower's patch axis, else the first (tiles, images)."""
    first = replacements[0]
    if isinstance(first, torch.Tensor):
        return torch.cat(replacements, dim=patch_axis(first, parts[0], layout))
    if isinstance(first, (list, tuple)):
        items = [joined([each[index] for each in replacements], parts, layout) for index in range(len(first))]
        return type(first)(*items) if hasattr(first, "_fields") else type(first)(items)
    if isinstance(first, dict):
        merged = first.copy()
        for key in first:
            merged[key] = joined([each[key] for each in replacements], parts, layout)
        return merged
    return first


def patch_axis(tensor: torch.Tensor, parts: Any, layout: InvokeLayout) -> int:
    """The axis of one invoke's part of a vision value that holds its patches on a packed tower; 0 otherwise."""
    if layout.packed:
        for span in parts.streams:
            for axis in range(min(tensor.dim(), 3)):
                if tensor.shape[axis] == span.size and (axis == 0 or tensor.shape[0] == 1):
                    return axis
    return 0


class LocatingInterleaver(TurnTakingInterleaver):
    """The model's interleaver, which tells an `InvokeBatcher` the location it serves while it serves it.

    It also numbers a per-image attention's kernel calls (one per image, or per
    window) from each invoke's own first image: when the attention's input
    arrives with its per-image bounds (``cu_seqlens``), each invoke's count of
    the per-call site starts at the calls of the invokes before it, so that
    its call k (``tracer.iter[k]``) is its own k-th image's.

    Only a run whose batch has a layout needs that: `locate` makes the
    interleaver's ``handle`` the locating one for the run, and `cancel` (the
    run's end) gives it nnsight's back, so every other run's visits cost
    nnsight's handle alone.
    """

    def locate(self) -> None:
        """Serve this run's visits through `locating_handle` (its batch has a layout: several image invokes)."""
        self.__dict__["handle"] = self.locating_handle

    def cancel(self) -> None:
        self.__dict__.pop("handle", None)
        super().cancel()

    def locating_handle(self, provider: str, value: Any) -> Any:
        """nnsight's ``handle``, telling the batcher the location it serves, and numbering per-image kernel calls."""
        batcher = self.batcher
        layout = getattr(batcher, "layout", None)
        if layout is None:
            return super().handle(provider, value)
        if provider in layout.per_call:
            self._number_calls(layout, provider, value)
        elif provider not in self.parked and not self.observers:  # nothing is served here: no location to tell
            return super().handle(provider, value)
        outer, batcher.provider = batcher.provider, provider
        try:
            return super().handle(provider, value)
        finally:
            batcher.provider = outer

    def _number_calls(self, layout: InvokeLayout, provider: str, value: Any) -> None:
        bounds = value[1].get("cu_seqlens") if isinstance(value, tuple) and len(value) == 2 else None
        if not isinstance(bounds, torch.Tensor):
            return
        for mediator in self.mediators:
            if mediator.batch_group is None:
                continue
            before = layout.calls_before(bounds, layout.invoke(mediator.batch_group))
            for site in layout.per_call[provider]:
                mediator.counts_at_start[site] = self.counts.get(site, 0) + before
