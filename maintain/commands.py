"""How the maintainer's tools run a subprocess into their log, and how they print a table (they end as the
library's commands do: `instrument.commands.run`)."""

from __future__ import annotations

import subprocess
from pathlib import Path


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
