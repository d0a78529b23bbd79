"""How the library's commands end (with their own status, and quietly when their reader stops early), how the
release tools run a subprocess into their log, and how they print a table."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn


def run(main: Callable[[], int]) -> NoReturn:
    """Exit with ``main()``'s status; exit 1 without a traceback when stdout's reader closed the pipe (``| head``)."""
    try:
        status = main()
        sys.stdout.flush()  # the last of the output, inside the try
    except BrokenPipeError:  # as the shell's own tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit's flush finds no pipe
        sys.exit(1)
    sys.exit(status)


def run_logged(
    command: list[str], log: Path, cwd: Path, timeout: float | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Run ``command`` in ``cwd`` with its output appended to ``log`` after its command line; its status, unchecked."""
    with log.open("a") as out:
        out.write(f"$ {' '.join(command)}\n")
        out.flush()
        return subprocess.run(command, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, timeout=timeout, check=False, env=env)


def aligned(rows: list[tuple[str, ...]]) -> str:
    """Rows of cells as text, each column as wide as its widest cell, two spaces apart."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows) + "\n"
