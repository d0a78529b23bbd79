"""pytest plugin: record each test's outcome by id, as a line of JSON, for `maintain.hf_tests` to compare.

Loaded into both runs of transformers' model tests (without and with the
rewrites) as a file of its own (`maintain.hf_tests` copies it, ``-p
vlm_hf_record``): it imports nothing but pytest and the standard library, so
the run without the rewrites loads nothing of this project. It writes to the file named by the
environment variable `OUTCOMES`, one line per test phase as pytest reports it
(``{"id": ..., "when": ..., "outcome": ...}``), appended and flushed at once,
so what ran before a crash or a timeout is still there. A subtest
(``self.subTest(...)``) is recorded under its test's id followed by its
message and parameters; a module that fails to import, under the module's id
with the phase ``collect``.

`read_outcomes` folds the phases into one outcome per id: ``error`` when setup,
teardown or collection failed, else the call's ``passed``, ``failed``,
``skipped``, ``xfailed`` or ``xpassed`` (a test skipped at setup is
``skipped``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

#: The environment variable naming the file the outcomes are appended to.
OUTCOMES = "VLM_HF_TESTS_OUTCOMES"


def id_of(report: Any) -> str:
    """The id a report is recorded under: its node id, and a subtest's message and parameters after it."""
    context = getattr(report, "context", None)  # pytest's SubtestReport
    if context is None:
        return report.nodeid
    parts = [f"[{context.msg}]"] if context.msg is not None else []
    if context.kwargs:
        parts.append("(" + ", ".join(f"{k}={v}" for k, v in context.kwargs.items()) + ")")
    return f"{report.nodeid} {' '.join(parts) or '(<subtest>)'}"


def phase_outcome(report: Any) -> str:
    """What one phase's report says: pytest's outcome, or ``xfailed`` / ``xpassed`` for an expected failure."""
    if hasattr(report, "wasxfail"):
        return "xfailed" if report.outcome == "skipped" else "xpassed"
    return report.outcome


def record(path: Path, entry: dict[str, str]) -> None:
    """Append one entry to the outcomes file."""
    with path.open("a") as out:
        out.write(json.dumps(entry) + "\n")
        out.flush()


@pytest.hookimpl(trylast=True)
def pytest_runtest_logreport(report: Any) -> None:
    """Each test phase's report, as pytest leaves it (last: pytest 9 fails a test whose subtest failed as it reports it)."""
    if OUTCOMES in os.environ:
        record(Path(os.environ[OUTCOMES]), {"id": id_of(report), "when": report.when, "outcome": phase_outcome(report)})


def pytest_collectreport(report: Any) -> None:
    """A module (or class) that could not be collected: its tests never ran."""
    if OUTCOMES in os.environ and report.failed:
        record(Path(os.environ[OUTCOMES]), {"id": report.nodeid, "when": "collect", "outcome": "failed"})


def fold(phases: dict[str, str]) -> str:
    """One test's outcome from its phases' (``when -> outcome``)."""
    if any(phases.get(when) == "failed" for when in ("collect", "setup", "teardown")):
        return "error"
    return phases.get("call") or phases.get("setup") or "error"


def read_outcomes(path: Path) -> dict[str, str]:
    """``test id -> outcome`` from an outcomes file (empty when there is none: nothing was recorded)."""
    phases: dict[str, dict[str, str]] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip():
                entry = json.loads(line)
                seen = phases.setdefault(entry["id"], {})
                if seen.get(entry["when"]) != "failed":  # a subtest repeated under one message: its failure kept
                    seen[entry["when"]] = entry["outcome"]
    return {test: fold(by_phase) for test, by_phase in phases.items()}
