"""Attention that calls its kernel once per image (or window): its pattern, whole and call by call.

The Qwen ViT splits its queries, keys and values at ``cu_seqlens``
(``torch_split_0``, whose argument 1 is the parts' lengths) and calls the
kernel on each part (``attention_interface_2``): once per image, per frame of a
video, per window on Qwen2.5-VL's windowed blocks (and on every tower built on
its forward); RADIO does the same when several images are packed, and makes
one dense call for one image. Under eager attention each call computes its own
pattern inside the kernel, ``[1, heads, n, n]`` over its ``n`` rows (the rule
drills into the kernel's softmax at that call).

Served, under eager (any other implementation: the reason says to load eager):

- ``attention_scores`` and ``attention_probabilities`` (`BlockDiagonal`): one
  ``[1, heads, rows, rows]`` tensor over the attention's rows in its own order
  (the tower's patch order; window order where the tower permutes), each call's
  pattern as a diagonal block, in call order. Between blocks the probabilities
  are 0 and the scores ``torch.finfo(dtype).min``, what a block-diagonal mask
  adds there (as on Pixtral's one call), so the softmax of the whole scores, row
  by row, is the whole probabilities (up to the rounding of a longer sum).

  Read, it is assembled once the last call has run: where the attention made
  one call, it is that call's own tensor (an in-place edit reaches the model,
  as on any pattern); where it made several, an in-place edit of it would
  change nothing the model uses, so it raises (a `ReadOnly` tensor), saying to
  edit a call's own block or to assign the whole. Assigned, each block goes to
  the call that uses it, as the calls run; a value that is not
  ``[1, heads, rows, rows]`` in the pattern's dtype and device, or that puts
  probability between blocks (a score above ``finfo.min`` there), is refused
  before any call has taken a block.

- ``kernel_calls[k]`` (`KernelCall`): call ``k`` alone (image ``k``, as
  ``vision.patch_grid(..., image=k)`` and ``image_grid_thw[k]`` number them,
  on a tower that calls once per image; its frame or window otherwise): its
  ``attention_queries``, ``attention_keys``, ``attention_values``,
  ``attention_scores``, ``attention_probabilities`` (``[1, heads, n, n]``, the
  model's own tensor: an in-place edit or an assignment changes what that call
  uses) and ``attention_head_outputs``, without assembling the whole, whose
  memory grows with the square of every image's rows together.

The calls' lengths are read at the split's last call (the values'), the last
thing the forward does before its first kernel call, so the whole and the
calls read in forward order after the whole queries, keys and values.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from nnsight.intervention.interleaver import Mediator, OutOfOrderError

from rewrites.attention import SOFTMAX_SITE

from ..core.backends import served_location
from ..core.layouts import HeadOutputs, Keys, Pattern, Queries, Values
from ..core.passes import passes_before, pinned
from ..core.paths import standard_path
from ..core.standard import missing_site, site_label
from ..core.values import (
    Argument,
    EProperty,
    First,
    ReadOnly,
    Selector,
    _label,
    explained,
    read_only,
    standard_values,
    value,
)
from ..text.blocks import drill_if_sourced, eager_only, either
from ..vision.tower import FIRST_STEP_ONLY, VISION_ORDER, no_images


@dataclass(frozen=True)
class PerCall:
    """Where an attention's forward splits its rows and calls the kernel once per part: its rule's served labels."""

    call: str  #: the kernel call per part (``attention_interface_2``), drilled into the eager kernel's softmax
    split: str  #: the split of queries, keys and values (``torch_split_0``): argument 1 is the parts' lengths
    splits: int = 3  #: the split's calls in one forward of the attention (queries, keys, values)
    #: a dense call over everything, taken instead when the attention has one part (RADIO's ``attention_interface_1``)
    one_call: str | None = None


def per_call_of(attention: Any) -> PerCall | None:
    """The `PerCall` of ``attention``'s envoy class, or None where it calls its kernel once."""
    return getattr(type(attention), "per_call", None)


def per_call_locations(attention: Any) -> tuple[str, ...]:
    """The locations of ``attention``'s per-part call and of the softmax inside it, each fired once per part: what
    each invoke numbers from its own first image (`envoys.invokes.batcher.LocatingInterleaver`)."""
    per_call = per_call_of(attention)
    return () if per_call is None else tuple(call_locations(attention, per_call.call).values())


# -- why there is no pattern ------------------------------------------------------------------------------------------


def no_calls(attention: Any) -> str | None:
    """Why the per-part kernel calls are not served on ``attention``, or None."""
    per_call = per_call_of(attention)
    labels = (per_call.split, per_call.call, *((per_call.one_call,) if per_call.one_call else ()))
    return next(filter(None, (missing_site(attention, label) for label in labels)), None)


def not_eager(attention: Any) -> str | None:
    """Why the calls' scores and probabilities are not served on ``attention``, or None: they exist inside the
    eager kernel only."""
    return eager_only(attention, no_calls(attention), " (one kernel call per image or window, each computing its "
                                                       "own pattern)")


# -- which calls the forward at hand makes ----------------------------------------------------------------------------

#: The attribute of the running worker (its `Mediator`) holding, per attention forward it has read the split of
#: (the split's location and occurrence), that forward's `Calls`.
CALLS = "_vlm_kernel_calls"


@dataclass(frozen=True)
class Calls:
    """The kernel calls one forward of a per-image attention makes, as the running worker sees them."""

    lengths: tuple[int, ...] | None  #: each call's rows, in order; None where the forward takes its one dense call
    #: each location of the calls (`call_locations`) -> its occurrence at this forward's first call, for this worker
    bases: dict[str, int]
    forward: tuple[str, int]  #: which forward: the location and occurrence its calls were read at

    @property
    def count(self) -> int:
        return 1 if self.lengths is None else len(self.lengths)

    def at(self, location: str, call: int) -> int:
        """The occurrence of ``location`` at call ``call`` of this forward."""
        return self.bases[location] + call

    def bounds(self) -> list[int]:
        """The calls' first rows and the end: ``[0, n0, n0 + n1, ...]``."""
        bounds = [0]
        for length in self.lengths or ():
            bounds.append(bounds[-1] + length)
        return bounds


def call_locations(attention: Any, label: str) -> dict[str, str]:
    """Where the call served as ``label`` is, in the forward at hand: its ``input`` and ``output``, and the
    softmax's inside it (``softmax.input``, ``softmax.output``)."""
    call = f"{attention.path}.source.{site_label(attention, label)}"
    ends = {"input": "input", "output": "output", "softmax.input": f"source.{SOFTMAX_SITE}.input",
            "softmax.output": f"source.{SOFTMAX_SITE}.output"}
    return {end: served_location(attention, f"{call}.{suffix}") for end, suffix in ends.items()}


def calls_of(attention: Any) -> Calls:
    """The kernel calls of the forward of ``attention`` the running worker is at (or waits for), read once per
    forward: the split's lengths at its last call (the values'), before any kernel call; this invoke's own calls
    where several invokes carry images."""
    per_call = per_call_of(attention)
    if per_call.one_call is not None and attention.takes_one_call():
        located = call_locations(attention, per_call.one_call)
        mediator = Mediator.current(located["input"])
        with pinned(located["input"], 0, 1, passes_before(located["input"])):
            occurrence = mediator.wanted(located["input"])
        return Calls(None, {location: occurrence for location in located.values()}, (located["input"], occurrence))
    location = served_location(attention, f"{attention.path}.source.{per_call.split}.input")
    mediator = Mediator.current(location)
    with pinned(location, per_call.splits - 1, per_call.splits, passes_before(location)):
        occurrence = mediator.wanted(location)
        cached = vars(mediator).setdefault(CALLS, {})
        if (location, occurrence) not in cached:
            refuse_past(mediator, location, occurrence, "the split of its queries, keys and values")
            args, kwargs = Mediator.value(location)
            lengths = args[1] if len(args) > 1 else kwargs["split_size_or_sections"]
            before, lengths = own_calls(mediator, [int(length) for length in lengths])
            # Paused at the split: no call of this forward has run, so each location's next visit is its first
            # call's (the running invoke's first, `before` calls in, where several carry images).
            bases = {where: mediator.occurrence(where) + before
                     for where in call_locations(attention, per_call.call).values()}
            cached[(location, occurrence)] = Calls(tuple(lengths), bases, (location, occurrence))
        return cached[(location, occurrence)]


def own_calls(mediator: Mediator, lengths: list[int]) -> tuple[int, list[int]]:
    """How many calls of the forward come before the running invoke's first, and its own calls' lengths, where
    several invokes carry images; ``(0, lengths)`` otherwise."""
    layout = getattr(getattr(mediator.interleaver, "batcher", None), "layout", None)
    if layout is None or mediator.batch_group is None or len(layout.parts) < 2:
        return 0, lengths
    bounds = torch.tensor([0, *lengths]).cumsum(0)
    own = layout.calls_of(bounds, layout.invoke(mediator.batch_group))
    return own.start, lengths[own.start:own.stop]


def refuse_past(mediator: Mediator, location: str, occurrence: int, what: str) -> None:
    """`OutOfOrderError` now, rather than a wait to the end of the run, where the model already passed ``occurrence``
    of ``location``."""
    if mediator.occurrence(location) > occurrence:
        raise OutOfOrderError(
            f"{location!r} ({what}) was requested but the model already ran past it; the whole pattern and each "
            f"kernel call's values are read (and written) before the values the forward computes after them"
        )


@contextmanager
def at_occurrence(mediator: Mediator, location: str, occurrence: int, what: str) -> Iterator[None]:
    """The requests in the block tagged with ``occurrence`` of ``location`` (refused at once where it passed)."""
    refuse_past(mediator, location, occurrence, what)
    previous, mediator.iteration = mediator.iteration, occurrence
    try:
        yield
    finally:
        mediator.iteration = previous


def call_site(attention: Any, calls: Calls) -> str:
    """The served label of the call the forward's kernel calls are at: the dense call, or the per-part one."""
    per_call = per_call_of(attention)
    return per_call.one_call if calls.lengths is None else per_call.call


def softmax_at(attention: Any, calls: Calls, end: str) -> str:
    """The location of the softmax's ``end`` ("input": the scores; "output": the probabilities) inside the calls."""
    return call_locations(attention, call_site(attention, calls))[f"softmax.{end}"]


#: The attribute of the running worker holding the blocks one read of a whole pattern went past and kept for a read
#: of the other half of the softmax in the same forward: (forward, "input" or "output", call) -> the block.
KEPT = "_vlm_kept_blocks"


def past(attention: Any, calls: Calls, end: str, call: int) -> bool:
    """Whether the model already ran past call ``call``'s softmax ``end`` in the forward at hand."""
    location = softmax_at(attention, calls, end)
    return Mediator.current(location).occurrence(location) > calls.at(location, call)


def read_softmax(attention: Any, calls: Calls, end: str, call: int) -> torch.Tensor:
    """Call ``call``'s scores (``end`` "input") or probabilities ("output"), the model's own tensor."""
    location = softmax_at(attention, calls, end)
    with at_occurrence(Mediator.current(location), location, calls.at(location, call), f"kernel call {call}'s softmax"):
        raw = Mediator.value(location)
    return raw if end == "output" else Argument(0, "input").get(raw)


def drill(attention: Any, calls: Calls) -> None:
    """Drill into the kernel at the calls' site where nnsight's own ``.source`` runs the module (a user opened it,
    or a server's stock model), as for one kernel call (`envoys.text.blocks.drill_if_sourced`)."""
    drill_if_sourced(attention, call_site(attention, calls))


# -- the whole pattern ------------------------------------------------------------------------------------------------


def block_diagonal(blocks: list[torch.Tensor], between: float) -> torch.Tensor:
    """``[..., rows, rows]``: each of ``blocks`` (``[..., n, n]``) on the diagonal, in order; ``between`` elsewhere."""
    first = blocks[0]
    rows = sum(block.shape[-1] for block in blocks)
    whole = first.new_full((*first.shape[:-2], rows, rows), between)
    start = 0
    for block in blocks:
        stop = start + block.shape[-1]
        whole[..., start:stop, start:stop] = block
        start = stop
    return whole


def between_blocks(lengths: tuple[int, ...], device: Any = None) -> torch.Tensor:
    """bool ``[rows, rows]``: True at the cells no kernel call computes (between the calls' diagonal blocks)."""
    owner = torch.repeat_interleave(torch.arange(len(lengths), device=device), torch.tensor(lengths, device=device))
    return owner[:, None] != owner[None, :]


class AssembledPattern(ReadOnly):
    """The whole pattern of an attention that made several kernel calls: assembled from the calls' blocks, so an
    in-place edit of it raises (it would change nothing the model uses); inside ``with loss.backward():`` its
    ``.grad`` is the blocks' gradients, assembled the same way (0 between blocks)."""

    @property
    def grad(self) -> Any:
        backward = torch.Tensor.__dict__.get("grad")
        blocks = self.__dict__.get("_blocks")
        if not isinstance(backward, property) or blocks is None:
            return torch.Tensor.grad.__get__(self, type(self))
        # Backward reaches the last call first: ask for the blocks' gradients in that order.
        gradients = [backward.fget(block) for block in reversed(blocks)][::-1]
        return block_diagonal(gradients, 0.0)


def assembled(blocks: list[torch.Tensor], between: float, message: str) -> torch.Tensor:
    """The blocks assembled as a read-only `AssembledPattern` (one block: read-only as it is)."""
    if len(blocks) == 1:
        return read_only(blocks[0], message)
    whole = read_only(block_diagonal(blocks, between), message).as_subclass(AssembledPattern)
    whole.__dict__.update(_read_only=message, _no_gradient=None, _blocks=blocks)
    return whole


class BlockDiagonal(EProperty):
    """``attention_scores`` or ``attention_probabilities`` of an attention that calls its kernel once per part: the
    calls' patterns as the diagonal blocks of one ``[1, heads, rows, rows]`` tensor (see the module docstring)."""

    def __init__(self, end: str, **eproperty: Any) -> None:
        super().__init__(**eproperty)
        self.end = end  # the softmax's "input" (scores) or "output" (probabilities)

    def between(self, dtype: torch.dtype) -> float:
        """What the cells between blocks hold: no probability, or the lowest score (a block-diagonal mask's)."""
        return 0.0 if self.end == "output" else torch.finfo(dtype).min

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        if obj is None:
            return self
        self.check(obj)
        self.check_step(obj, obj.path)
        label = _label(obj, self.name)
        with explained(obj, self.name):
            calls = calls_of(obj)
            drill(obj, calls)
            blocks, kept = self._blocks(obj, calls)
        if len(blocks) > 1:
            message = (
                f"{label} is read-only as read: it is assembled from the patterns of the {calls.count} kernel calls "
                f"after the last of them ran, so an edit to it would change nothing the model uses; edit a call's "
                f"own block in place ({standard_path(obj)}.kernel_calls[k].{self.name}), or assign the whole before "
                f"the calls run ({label} = new_value)"
            )
        else:
            message = (f"{label} is read-only as read: it was kept when a read of the other half of the softmax went "
                       f"past it, so an edit to it would change nothing the model uses; read it first to edit it")
        between = 0.0 if self.end == "output" else torch.finfo(blocks[0].dtype).min
        return self.handed_out(obj, blocks[0] if len(blocks) == 1 and not kept else assembled(blocks, between, message))

    def _blocks(self, obj: Any, calls: Calls) -> tuple[list[torch.Tensor], bool]:
        """Each call's block, in order, and whether any was kept by an earlier read rather than read now.

        A call's softmax takes the scores, then gives the probabilities, call
        after call, so reading one half whole goes past the other: the read of
        the probabilities keeps each call's scores as it passes them, and the
        read of the scores each call's probabilities but the last one's, for a
        read of the other half later in the same forward.
        """
        mediator = Mediator.current(obj.path)
        kept = vars(mediator).setdefault(KEPT, {})
        other = "input" if self.end == "output" else "output"
        blocks, any_kept = [], False
        for call in range(calls.count):
            block = kept.get((calls.forward, self.end, call))
            if block is not None:
                blocks.append(block)
                any_kept = True
                continue
            if self.end == "output" and not past(obj, calls, "input", call):
                kept[(calls.forward, "input", call)] = read_softmax(obj, calls, "input", call)
            blocks.append(read_softmax(obj, calls, self.end, call))
            if self.end == "input" and call < calls.count - 1:
                kept[(calls.forward, other, call)] = read_softmax(obj, calls, other, call)
        return blocks, any_kept

    def __set__(self, obj: Any, written: Any) -> None:
        self.check(obj, writing=True)
        label = _label(obj, self.name)
        if not isinstance(written, torch.Tensor):
            raise TypeError(f"{label} takes a tensor, [1, heads, rows, rows]; got {type(written).__name__}")
        self.check_step(obj, obj.path)
        with explained(obj, self.name):
            calls = calls_of(obj)
            drill(obj, calls)
            rows = sum(calls.lengths) if calls.lengths is not None else None
            self._check_whole(label, written, calls, rows)
            location = softmax_at(obj, calls, self.end)
            mediator = Mediator.current(location)
            refuse_past(mediator, location, calls.at(location, 0), "kernel call 0's softmax")
            kept = vars(mediator).setdefault(KEPT, {})
            bounds = calls.bounds()
            for call in range(calls.count):
                if self.end == "output" and not past(obj, calls, "input", call):  # kept, as a read keeps it
                    kept[(calls.forward, "input", call)] = read_softmax(obj, calls, "input", call)
                with at_occurrence(mediator, location, calls.at(location, call), f"kernel call {call}'s softmax"):
                    raw = Mediator.value(location)
                    current = raw if self.end == "output" else Argument(0, "input").get(raw)
                    if call == 0:
                        self._check_like(label, written, current, rows)
                    block = written if calls.lengths is None else written[..., bounds[call]:bounds[call + 1],
                                                                          bounds[call]:bounds[call + 1]]
                    Mediator.swap(location, block if self.end == "output" else Argument(0, "input").put(raw, block))
                kept[(calls.forward, self.end, call)] = block
                if self.end == "input" and call < calls.count - 1:  # the probabilities it makes, for a read after
                    kept[(calls.forward, "output", call)] = read_softmax(obj, calls, "output", call)

    def _check_whole(self, label: str, written: torch.Tensor, calls: Calls, rows: int | None) -> None:
        """Refuse, before any call takes a block, a value of the wrong shape, or one that puts probability between
        the calls' blocks."""
        if rows is not None and (written.dim() != 4 or written.shape[0] != 1 or tuple(written.shape[-2:]) != (rows, rows)):
            raise ValueError(
                f"{label} takes a tensor of shape (1, heads, {rows}, {rows}): the attention's {rows} rows, its "
                f"{calls.count} kernel calls' patterns on the diagonal; got {tuple(written.shape)}"
            )
        if calls.lengths is None or calls.count < 2:
            return
        outside = written[..., between_blocks(calls.lengths, written.device)]
        if self.end == "output":
            wrong = bool((outside != 0).any())
            holds = "0 between the blocks (no kernel call attends from one image or window to another)"
        else:
            wrong = bool((outside > torch.finfo(written.dtype).min).any()) if written.is_floating_point() else True
            holds = ("torch.finfo(dtype).min (or -inf) between the blocks: a higher score there would put "
                     "probability where no kernel call attends")
        if wrong:
            raise ValueError(
                f"{label} is block-diagonal, one block per kernel call ({', '.join(map(str, calls.lengths))} rows): "
                f"a written value holds {holds}; edit the blocks alone (nothing was written)"
            )

    @staticmethod
    def _check_like(label: str, written: torch.Tensor, current: torch.Tensor, rows: int | None) -> None:
        """Refuse a value whose heads, dtype or device are not the pattern's (checked at the first call, before its
        block is swapped in)."""
        expected = (1, current.shape[1], rows, rows) if rows is not None else tuple(current.shape)
        if tuple(written.shape) != expected:
            raise ValueError(f"{label} takes a tensor of shape {expected}; got {tuple(written.shape)}")
        if written.dtype != current.dtype:
            raise TypeError(f"{label} takes a tensor of dtype {current.dtype}; got {written.dtype}. Convert it first: "
                            f"value.to({current.dtype}).")
        if written.device != current.device:
            raise ValueError(f"{label} takes a tensor on {current.device}; got one on {written.device}.")


def first_call(attention: Any) -> str:
    """The served label of the call the pattern's first block is at: the dense call where the attention takes it
    (RADIO, one image in the last batch), else the per-part call."""
    per_call = per_call_of(attention)
    one = per_call.one_call is not None and attention.takes_one_call()
    return per_call.one_call if one else per_call.call


def per_call_pattern() -> tuple[EProperty, EProperty]:
    """``(attention_scores, attention_probabilities)`` of an attention that calls its kernel once per part."""

    def pattern(name: str, end: str, what: str) -> EProperty:
        return value(
            name, Pattern, description=f"{what}, every kernel call's block on the diagonal", shape="[1, heads, rows, rows]",
            key=lambda attention: f"{attention.path}.source.{first_call(attention)}.source.{SOFTMAX_SITE}.{end}",
            select=Argument(0, "input") if end == "input" else None,
            unavailable=either(no_images, not_eager), kind=partial(BlockDiagonal, end),
            doc=f"{what[:1].upper()}{what[1:]}, ``[1, heads, rows, rows]`` over the attention's rows: each kernel "
            f"call's (one per image, frame or window) as its diagonal block, "
            + ("0 between blocks" if end == "output" else "``finfo(dtype).min`` between blocks (a block-diagonal "
               "mask's)")
            + "; under eager. Assign to change what each call uses; a call's own block is "
            "``kernel_calls[k]." + name + "``.",
        )

    return (pattern("attention_scores", "input", "the scores entering each call's softmax"),
            pattern("attention_probabilities", "output", "each call's softmax output, before it weights the values"))


# -- one call ---------------------------------------------------------------------------------------------------------


class CallValue(EProperty):
    """A value of one kernel call (`KernelCall`): its location's occurrence is the call's, in the forward at hand."""

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        if obj is None:
            return self
        self.check(obj)
        self.check_step(obj, obj.path)  # before the pin, which is the call's occurrence, not a step
        with explained(obj, self.name), obj.pinned(self.name):
            location = self._location(obj)
            return self.handed_out(obj, self._read(obj, location))

    def __set__(self, obj: Any, written: Any) -> None:
        self.check(obj, writing=True)
        self.check_step(obj, obj.path)
        with explained(obj, self.name), obj.pinned(self.name):
            self._write(obj, written, self._location(obj))

    def _location(self, obj: Any) -> str:
        return obj.location_of(self.name)


#: Where each value of a call is, on its call (its input's argument or its output) or on the softmax inside it.
CALL_PARTS: dict[str, tuple[str, Selector | None]] = {
    "attention_queries": ("input", Argument(1, "query")),
    "attention_keys": ("input", Argument(2, "key")),
    "attention_values": ("input", Argument(3, "value")),
    "attention_scores": ("softmax.input", Argument(0, "input")),
    "attention_probabilities": ("softmax.output", None),
    "attention_head_outputs": ("output", First()),
}


def call_value(name: str, layout: type, description: str, unavailable: Any) -> EProperty:
    """A value of one kernel call, as `CALL_PARTS` places it."""
    return value(
        name, layout, description=description, key=lambda call: call.location_of(name), select=CALL_PARTS[name][1],
        unavailable=either(no_images, lambda call: unavailable(call.attention)), kind=CallValue,
        prepare=lambda call: drill(call.attention, call.calls()) if "softmax" in CALL_PARTS[name][0] else None,
    )


class KernelCall:
    """One kernel call of an attention that calls its kernel once per image, frame or window: ``kernel_calls[k]``.

    Its values are the call's own, ``[1, heads, n, ...]`` over its ``n`` rows
    (the ``n`` rows from the call's first in the attention's row order): the
    queries, keys and values it receives, its scores and probabilities under
    eager (``[1, heads, n, n]``, the model's own tensors: an edit in place or
    an assignment changes what this call uses) and its head outputs,
    ``[1, n, heads, head_dim]``. ``k`` counts the forward's calls (the
    running invoke's, from its own first image, where several carry images);
    a ``k`` past the last is an IndexError when read, once the forward has
    said how many calls it makes.
    """

    order_hint = VISION_ORDER
    first_step_only = FIRST_STEP_ONLY

    def __init__(self, attention: Any, index: int) -> None:
        self.attention, self.index = attention, index

    path = property(lambda self: self.attention.path)
    root = property(lambda self: self.attention.root)
    _module = property(lambda self: self.attention._module)

    @property
    def spelled_path(self) -> str:
        """How a user spells this call: ``vision.layers[0].self_attn.kernel_calls[1]``."""
        return f"{standard_path(self.attention)}.kernel_calls[{self.index}]"

    def calls(self) -> Calls:
        """The calls of the forward at hand (those the pin in force was set for, inside `pinned`)."""
        return self.__dict__.get("_calls") or calls_of(self.attention)

    def location_of(self, name: str) -> str:
        """The location of value ``name`` of this call, in the forward at hand."""
        calls = self.calls()
        return call_locations(self.attention, call_site(self.attention, calls))[CALL_PARTS[name][0]]

    @contextmanager
    def pinned(self, name: str) -> Iterator[None]:
        """The requests of value ``name`` in the block tagged with this call's occurrence of its location (an
        IndexError first where the forward makes no such call)."""
        calls = self.calls()
        if not -calls.count <= self.index < calls.count:
            raise IndexError(
                f"{self.spelled_path}: this forward of {standard_path(self.attention)} makes {calls.count} kernel "
                f"call(s) (0 to {calls.count - 1}), one per image, frame or window; got {self.index}"
            )
        location = self.location_of(name)
        self._calls = calls  # read inside the pin, where calls_of would take the pinned call for a step
        try:
            with at_occurrence(Mediator.current(location), location, calls.at(location, self.index % calls.count),
                               f"kernel call {self.index}"):
                yield
        finally:
            del self._calls

    def support(self) -> dict[str, str | None]:
        """Each value of the call: None when available, else why not."""
        return {name: prop.reason(self) for name, prop in standard_values(type(self)).items()}

    def __repr__(self) -> str:
        return f"<{self.spelled_path}: {', '.join(standard_values(type(self)))}>"

    attention_queries = call_value("attention_queries", Queries, "the queries this call receives", no_calls)
    attention_keys = call_value("attention_keys", Keys, "the keys this call receives", no_calls)
    attention_values = call_value("attention_values", Values, "the values this call receives", no_calls)
    attention_scores = call_value("attention_scores", Pattern, "this call's scores, entering its softmax", not_eager)
    attention_probabilities = call_value("attention_probabilities", Pattern, "this call's softmax output", not_eager)
    attention_head_outputs = call_value("attention_head_outputs", HeadOutputs, "this call's per-head outputs", no_calls)


class KernelCalls:
    """``self_attn.kernel_calls``: the attention's kernel calls, ``kernel_calls[k]`` the ``k``-th (`KernelCall`).

    How many there are is known once the forward runs (one per image, frame
    or window of the trace), so the calls are indexed, not iterated.
    """

    def __init__(self, attention: Any) -> None:
        self.attention = attention

    def __getitem__(self, index: int) -> KernelCall:
        if not isinstance(index, int) or isinstance(index, bool):
            raise TypeError(f"{standard_path(self.attention)}.kernel_calls takes a call's index (an int); got {index!r}")
        return KernelCall(self.attention, index)

    def __iter__(self) -> Iterator[KernelCall]:
        raise TypeError(
            f"{standard_path(self.attention)}.kernel_calls is indexed, not iterated: how many calls a forward makes "
            f"is known once it runs (one per image, frame or window); read kernel_calls[k] for k in "
            f"range(len(image_grid_thw)) on a tower that calls once per image"
        )

    def __repr__(self) -> str:
        return f"<{standard_path(self.attention)}.kernel_calls: one per image, frame or window of the forward>"


def kernel_calls(attention: Any) -> KernelCalls:
    """The attention's kernel calls, one per image, frame or window, each readable alone (`KernelCall`)."""
    return KernelCalls(attention)


__all__ = [
    "AssembledPattern", "BlockDiagonal", "Calls", "KernelCall", "KernelCalls", "PerCall", "block_diagonal",
    "calls_of", "kernel_calls", "not_eager", "per_call_locations", "per_call_of", "per_call_pattern",
]
