"""What one site costs on each of its paths, against the plain call it wraps.

``python benchmarks/sites.py [--calls N]`` times the site helper the rewritten
forwards call (`instrument.runtime.site_for`) around a call that does nothing,
so that what is timed is the site alone, on a module nnsight wraps:

- outside a trace: it reads the module's nnsight state and calls through;
- in a trace where no worker waits anywhere and no cache observes (an empty
  trace, or the rest of one after its last read): it calls through, no visit;
- in a trace where a worker waits on another location: nnsight's operation
  bracket (`run_op`), three visits to the interleaver (input, skip, output),
  each nnsight's fast path for a location nobody waits on (a count).

A read served at the site costs what nnsight's `.source` op costs there,
which this does not time. It prints a Markdown table (nanoseconds per call,
the best of five repeats) and writes it into ``benchmarks/RESULTS.md`` between
its markers. A benchmark, not a test: times vary with the machine and its load.
"""

from __future__ import annotations

import argparse
import sys
import timeit
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]
RESULTS = HERE / "RESULTS.md"
BEGIN, END = "<!-- sites: benchmarks/sites.py -->", "<!-- /sites -->"

import nnsight  # noqa: E402
import torch  # noqa: E402
from overhead import write_section  # noqa: E402

from instrument.runtime import site_for  # noqa: E402


def nothing(value: object) -> object:
    """The call a site wraps here: returns its argument, so that the site's own cost is what is timed."""
    return value


def site_costs(calls: int) -> dict[str, tuple[float, int]]:
    """Per path: nanoseconds per call (the best of five repeats of ``calls`` calls) and interleaver visits per call."""
    module = torch.nn.Linear(1, 1)
    interleaver = nnsight.NNsight(module).interleaver  # wraps the module: its nnsight state routes to this interleaver
    site = site_for(module)

    def measured(run: Callable[[], object]) -> tuple[float, int]:
        before = sum(interleaver.counts.values())
        run()
        visits = sum(interleaver.counts.values()) - before
        return min(timeit.repeat(run, number=calls, repeat=5)) / calls * 1e9, visits

    def through_the_site() -> object:
        return site("nothing_0", nothing, 1)

    costs = {"the plain call": measured(lambda: nothing(1)), "outside a trace": measured(through_the_site)}
    saved = interleaver.interleaving, interleaver.busy, interleaver.parked
    try:
        interleaver.interleaving, interleaver.busy = True, True  # what a running trace with workers sets
        interleaver.parked = set()
        costs["in a trace, no worker waits and no cache observes"] = measured(through_the_site)
        interleaver.parked = {"model.elsewhere.output"}
        costs["in a trace, a worker waits elsewhere"] = measured(through_the_site)
    finally:
        interleaver.interleaving, interleaver.busy, interleaver.parked = saved
    return costs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200_000, help="calls per repeat")
    arguments = parser.parse_args()
    costs = site_costs(arguments.calls)
    plain = costs["the plain call"][0]
    lines = [
        BEGIN,
        f"One site around a call that does nothing, {arguments.calls} calls, best of 5; nanoseconds per call.",
        "",
        "| path | per call | over the plain call | interleaver visits per call |",
        "|---|---:|---:|---:|",
        *(f"| {name} | {ns:.0f} | {ns - plain:+.0f} | {visits} |" for name, (ns, visits) in costs.items()),
        END,
    ]
    text = "\n".join(lines)
    print(text)
    write_section(RESULTS, BEGIN, END, text)


if __name__ == "__main__":
    main()
