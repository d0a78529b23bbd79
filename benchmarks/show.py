"""``python -m instrument.show NAME`` against importing NAME's modeling module, in fresh processes.

``python benchmarks/show.py [--repeats N]`` times, each in a fresh Python
process (the minimum of ``--repeats`` runs, the build cache warm, as a user's
second run finds it; the first run of each command, with an empty build cache,
is reported beside it):

- importing the modeling module a name points at (its transformers classes);
- ``python -m instrument.show NAME`` for a class (``Qwen3VLModel``,
  ``LlavaModel``), a rule's name and a dotted path, which finds the rules of
  that one module (`envoys.rules_by_name`) without building any checkpoint;
- ``python -m instrument.show qwen3_vl`` (a model_type: its checkpoints' rules,
  from the whole catalogue, which builds every tiny checkpoint).

It prints a Markdown table, each command's time over the import's, and writes
it into ``benchmarks/RESULTS.md`` between its markers. A benchmark, not a test:
times vary with the machine and its load.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]
RESULTS = HERE / "RESULTS.md"
BEGIN, END = "<!-- show: benchmarks/show.py -->", "<!-- /show -->"

from overhead import write_section  # noqa: E402

#: (what a user types, the modeling module it points at)
NAMES = (
    ("Qwen3VLModel", "transformers.models.qwen3_vl.modeling_qwen3_vl"),
    ("LlavaModel", "transformers.models.llava.modeling_llava"),
    ("qwen3_vl.deepstack", "transformers.models.qwen3_vl.modeling_qwen3_vl"),
    ("transformers.models.llava.modeling_llava.LlavaModel.forward", "transformers.models.llava.modeling_llava"),
)


def seconds(command: list[str], environment: dict[str, str]) -> float:
    """Wall time of one fresh process running ``command`` (its output discarded; a failure raises)."""
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=environment,
                   cwd=HERE.parent)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes per command; the minimum is kept")
    arguments = parser.parse_args()
    python = sys.executable
    rows = []
    with tempfile.TemporaryDirectory() as cache:
        environment = {**os.environ, "VLM_INSTRUMENT_CACHE": cache, "OMP_NUM_THREADS": "1"}
        for name, module in NAMES:
            show = [python, "-m", "instrument.show", name]
            first = seconds(show, environment)  # an empty build cache: its rules compiled with libcst
            imported = min(seconds([python, "-c", f"import {module}"], environment) for _ in range(arguments.repeats))
            shown = min(seconds(show, environment) for _ in range(arguments.repeats))
            rows.append((f"`show {name}`", imported, first, shown))
        every = [python, "-m", "instrument.show", "qwen3_vl"]
        imported = min(seconds([python, "-c", f"import {NAMES[0][1]}"], environment) for _ in range(arguments.repeats))
        rows.append(("`show qwen3_vl` (a model_type: the catalogue)", imported, seconds(every, environment),
                     min(seconds(every, environment) for _ in range(arguments.repeats))))
    lines = [
        BEGIN,
        f"`python -m instrument.show NAME` in fresh processes, `OMP_NUM_THREADS=1`, min of {arguments.repeats}; seconds.",
        "",
        "| command | import its modeling module | show, empty build cache | show, warm | warm show over the import |",
        "|---|---:|---:|---:|---:|",
        *(f"| {name} | {imported:.2f} | {first:.2f} | {shown:.2f} | {shown - imported:+.2f} |"
          for name, imported, first, shown in rows),
        END,
    ]
    text = "\n".join(lines)
    print(text)
    write_section(RESULTS, BEGIN, END, text)


if __name__ == "__main__":
    main()
