"""``python -m envoys.families``: the census of the installed transformers' image-text-to-text model_types.

One line per model_type: supported, or why not (`envoys.census`), then the counts.
"""

from __future__ import annotations

import argparse
import sys

from instrument.commands import run

from ..census import census, report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m envoys.families", description=__doc__.splitlines()[0])
    parser.parse_args(argv)
    sys.stdout.write(report(census()))
    return 0


if __name__ == "__main__":
    run(main)
