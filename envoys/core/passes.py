"""Which run of a module a request means: pins to one occurrence of a location, and the tower's pass.

nnsight tags each request with the occurrence of its location it wants (0 the
first; ``tracer.iter[k]`` pins a step). `pinned` sets that tag around a
block of requests and puts the previous one back.

A tower that runs once on a prompt's images and once more on its videos
(every family but Video-LLaVA, whose videos have their own tower) fires
each of its sites once per pass, so the videos' value of a site is its
occurrence after the images'. `on_pass` says, for the reads made inside it,
how many runs of which tower come before the one meant; every standard
value located in that tower adds them to the occurrence it asks for
(`passes_before`; ``model.video`` reads inside ``on_pass``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from nnsight.intervention.interleaver import Mediator, OutOfOrderError

#: The attribute of the running worker (its nnsight `Mediator`) that holds the tower its reads mean a later run of
#: (its path) and how many of its runs come before that one: per worker, so it travels with nothing and two traces'
#: workers never share it.
TOWER_PASS = "_vlm_tower_pass"


def passes_before(location: str) -> int:
    """How many runs of its tower come before the one a request of ``location`` made now means: those `on_pass`
    says, for a location in that tower; 0 elsewhere (the root's inputs, the host's scatter). Inside a trace only."""
    tower, passes = vars(Mediator.current(location)).get(TOWER_PASS, ("", 0))
    return passes if tower and location.startswith(f"{tower}.") else 0


@contextmanager
def on_pass(tower: str, passes: int) -> Iterator[None]:
    """Make the values of the tower at path ``tower`` read (or written) in the block those of its run after
    ``passes`` runs."""
    worker = vars(Mediator.current(tower))
    previous = worker.get(TOWER_PASS, ("", 0))
    worker[TOWER_PASS] = (tower, passes)
    try:
        yield
    finally:
        worker[TOWER_PASS] = previous


@contextmanager
def pinned(location: str, call: int | None, per_forward: int = 1, passes_before: int = 0) -> Iterator[None]:
    """Inside a trace's worker: tag the requests made in the block with call ``call`` of the forward the worker
    is at (``per_forward`` calls each), after ``passes_before`` runs of the module in it, then restore the pin.
    ``call`` None leaves the pin as it is, unless ``passes_before`` asks for a later run (its first call)."""
    if call is None and not passes_before:
        yield
        return
    mediator = Mediator.current(location)
    previous = mediator.iteration
    # The step the worker is at: pinned by tracer.iter (0 with no loop), or, relaxed after the first hit
    # of a step past 0, the forwards whose calls it has already seen.
    step = previous if previous is not None else mediator.occurrence(location) // per_forward
    wanted = (step + passes_before) * per_forward + (call or 0)
    if passes_before and mediator.occurrence(location) > wanted:  # nnsight would wait for it to the end
        raise OutOfOrderError(
            f"{location!r} (the module's run after {passes_before} run(s)) was requested but the model already ran "
            f"past it"
        )
    mediator.iteration = wanted
    try:
        yield
    finally:
        mediator.iteration = previous
