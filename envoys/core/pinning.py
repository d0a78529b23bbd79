"""Values at a site that fires several times in one forward, each pinned to the occurrence it means.

A site inside a loop of the forward (the Qwen ViT's ``torch.split`` over
queries, keys and values; Qwen3-VL's ``_deepstack_process`` after each of the
first text blocks) is one location served N times. A plain read of it in a
trace asks for its first occurrence, and a read of the same location again
gets the first one again, so a value that means "the k-th call" has to ask for
occurrence k itself.

nnsight's ``tracer.iter[k]`` does that by setting the running worker's
``Mediator.iteration`` (the occurrence its next request is tagged with). A
`PinnedEProperty` (declared with `pinned_value`) does the same around its own
request only: it sets the pin to its occurrence for the read (and for each
half of a write), then puts back whatever was there, so the requests after
it, and a ``tracer.iter`` loop it sits in, are as they were. Because the pin is explicit, reads of several
occurrences in one trace work in forward order (block 0's value, then block
1's), and a read of occurrence 1 alone waits for the second call.

The occurrence is counted within the forward the worker is at: inside
``for step in tracer.iter[...]`` (one forward per step under ``generate``),
call k of step s is occurrence ``s * per_forward + k``, as if every step made
the same calls. A forward that makes none (a decode step: the tower and
DeepStack run on the prompt pass only) never reaches it: a value of the image's
pathway (its envoy's ``first_step_only``) is refused there with `Unavailable`
(`EProperty.check_step`), rather than being served step 0's value again on every
step of an open loop; any other is left waiting and ends like a ``tracer.iter``
read of a step the run did not make.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from .passes import passes_before, pinned
from .values import EProperty, explained, value

#: Which occurrence of its location a value means on an envoy, or None for "the next one" (no pin).
Occurrence = Callable[[Any], "int | None"]


class PinnedEProperty(EProperty):
    """An `EProperty` whose read and write ask for one occurrence of its location.

    ``occurrence(envoy)`` says which call of the forward (0 the first); None
    leaves the worker's pin as it is. ``per_forward(envoy)`` is how many
    times the site fires in a forward that reaches it. Everything else is
    `EProperty`'s: the location, the selected part, the reasons, the shape
    check on a write.
    """

    def __init__(
        self,
        occurrence: Occurrence | None = None,
        per_forward: Callable[[Any], int] | None = None,
        **eproperty: Any,
    ) -> None:
        super().__init__(**eproperty)
        self.occurrence = occurrence
        self.per_forward = per_forward

    def _pinned(self, obj: Any, location: str):
        call = self.occurrence(obj) if self.occurrence is not None else None
        count = self.per_forward(obj) if self.per_forward is not None else 1
        return pinned(location, call, max(count, 1), passes_before(location))

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        if obj is None:
            return self
        self.check(obj)  # the reason first, outside a trace too
        location = self._location(obj)
        self.check_step(obj, location)
        with explained(obj, self.name), self._pinned(obj, location):
            return self.handed_out(obj, self._read(obj, location))

    def __set__(self, obj: Any, value: Any) -> None:
        self.check(obj, writing=True)
        location = self._location(obj)
        self.check_step(obj, location)
        # The read half of the write is served at the pinned occurrence; the swap that follows
        # is issued while the model is still paused at that visit, so it lands there too.
        with explained(obj, self.name), self._pinned(obj, location):
            self._write(obj, value, location)


def pinned_value(
    name: str, layout: type, *, occurrence: Occurrence, per_forward: Callable[[Any], int] | None = None, **declared: Any
) -> PinnedEProperty:
    """A standard value pinned to one occurrence of its location (a `PinnedEProperty`): `value` with two more keywords.

    ``occurrence``: which call of the forward the value is on an envoy (0 the
    first; None for the next one, no pin). ``per_forward``: how many times the
    site fires in a forward that reaches it (1 when not given). ``declared``:
    `value`'s keywords (``description``, ``key``, ``select``, ``unavailable``, ...).
    """
    return value(name, layout, kind=partial(PinnedEProperty, occurrence=occurrence, per_forward=per_forward), **declared)
