"""One trace at a time on a model: a trace started in another thread waits for the running one to end.

nnsight keeps a trace's state on the model (its interleaver: the workers of
the trace's invokes, the batch, the run's counters), so two threads tracing
one model at once would mix their workers: greenlet errors, or a trace whose
body is silently skipped. A `StandardizedTransformer` serialises its traces
instead (`generate` and a session's traces included): a thread takes the
model's turn when its trace begins (the batcher nnsight makes for it,
`TurnTakingBatcher`) and gives it back when the trace ends, successful or not
(the interleaver's ``cancel``, which nnsight runs on every way out,
`TurnTakingInterleaver`). Traces in one thread nest as before. Threads that
should run at once need a model each.
"""

from __future__ import annotations

import threading
from typing import Any

from nnsight.intervention.batching import Batcher
from nnsight.intervention.interleaver import Interleaver


class Turns:
    """Which thread is tracing the model now, and a wait for the others."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._holder: int | None = None

    def __reduce__(self) -> tuple:
        """A copied or unpickled model starts with no trace running (a lock is not copied)."""
        return Turns, ()

    def take(self) -> None:
        """Wait until no other thread is tracing the model, then hold the turn (again, for the holder)."""
        me = threading.get_ident()
        with self._changed:
            self._changed.wait_for(lambda: self._holder in (None, me))
            self._holder = me

    def end(self, drop_state: Any) -> None:
        """The trace of this thread ends: ``drop_state()``, then the turn goes to the next thread.

        Nothing is dropped while another thread holds the turn: nnsight ends a trace twice (inside the run,
        then on the trace's way out), and by the second the next thread's trace may be running on the same
        state. The check and the drop happen under the lock ``take`` waits on, so no trace begins between them.
        """
        me = threading.get_ident()
        with self._changed:
            if self._holder not in (None, me):
                return
            try:
                drop_state()
            finally:
                if self._holder == me:
                    self._holder = None
                    self._changed.notify_all()


class TurnTakingInterleaver(Interleaver):
    """nnsight's interleaver whose ``cancel`` (a trace's state dropped) ends this thread's turn (`Turns.end`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.turns = Turns()

    def cancel(self) -> None:
        self.turns.end(super().cancel)


class TurnTakingBatcher(Batcher):
    """nnsight's batcher, made at the start of every trace of the model: it takes the model's turn first."""

    def __init__(self, envoy: Any, kwargs: dict | None = None) -> None:
        turns = getattr(envoy.interleaver, "turns", None)
        if turns is not None:
            turns.take()
        super().__init__(envoy, kwargs)
