"""Compare two runs of transformers' model tests, without and with the rewrites, test id by test id; and say so.

Each run is ``test id -> outcome`` (`maintain.hf_record`). A test one run
has and the other lacks is ``absent`` there (a crash, a timeout, a module
that failed to import). A **regression** is a test that passed without the
rewrites and did not pass with them; any other difference is a **change**
(a test that failed without and passes with, a skip that became a failure).
`report` prints a row per family (the outcomes' counts of both runs, the
regressions, the changes, the model classes the rules went on; a subtest is an id of its own), then every
regression and change by id, and every model the rules could not go on.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from .commands import aligned

#: The outcome of a test that one run has and the other does not.
ABSENT = "absent"


@dataclass(frozen=True)
class Change:
    """One test whose outcome differs between the runs."""

    test: str
    without: str
    with_: str

    @property
    def regression(self) -> bool:
        """It passed without the rewrites and did not with them."""
        return self.without == "passed" and self.with_ != "passed"


def compare(without: dict[str, str], with_: dict[str, str]) -> list[Change]:
    """Every test whose outcome differs, in test id order."""
    tests = sorted(without.keys() | with_.keys())
    return [
        Change(test, without.get(test, ABSENT), with_.get(test, ABSENT))
        for test in tests
        if without.get(test, ABSENT) != with_.get(test, ABSENT)
    ]


def counts(outcomes: dict[str, str]) -> str:
    """``"120 passed, 3 skipped"``: how many tests had each outcome, most first (``"none"`` for no tests)."""
    return ", ".join(f"{n} {outcome}" for outcome, n in Counter(outcomes.values()).most_common()) or "none"


@dataclass
class FamilyResult:
    """One family's two runs."""

    model_type: str
    files: tuple[str, ...] = ()  #: its test modules, relative to the source tree
    without: dict[str, str] = field(default_factory=dict)
    with_: dict[str, str] = field(default_factory=dict)
    installs: list[dict] = field(default_factory=list)  #: per model class: the rules it held, or the install error
    notes: list[str] = field(default_factory=list)  #: what else happened (a run timed out, pytest's exit status)
    error: str = ""  #: why the family could not be checked

    @property
    def changes(self) -> list[Change]:
        return compare(self.without, self.with_)

    @property
    def regressions(self) -> list[Change]:
        return [change for change in self.changes if change.regression]

    @property
    def install_errors(self) -> list[dict]:
        return [entry for entry in self.installs if "error" in entry]

    @property
    def failed(self) -> bool:
        """It could not be checked, a test regressed, or a model the tests built could not take the rules."""
        return bool(self.error or self.regressions or self.install_errors)


def report(results: list[FamilyResult]) -> str:
    """The table, then each regression, change and install error by family."""
    rows = [("family", "test ids", "without the rewrites", "with the rewrites", "regressions", "changes", "rules on")]
    for r in results:
        if r.error:
            rows.append((r.model_type, "", r.error, "", "", "", ""))
            continue
        instrumented = sum(1 for entry in r.installs if entry.get("rules"))
        rows.append((
            r.model_type, str(len(r.without.keys() | r.with_.keys())), counts(r.without), counts(r.with_),
            str(len(r.regressions)), str(len(r.changes) - len(r.regressions)), f"{instrumented} model classes",
        ))
    lines = [aligned(rows)]
    for title, pick in (
        ("regressions (passed without the rewrites, not with them)", lambda r: r.regressions),
        ("other changes", lambda r: [c for c in r.changes if not c.regression]),
    ):
        found = [(r.model_type, c) for r in results for c in pick(r)]
        if found:
            lines.append(f"\n{title}:\n")
            lines.extend(f"  {family}  {c.test}: {c.without} -> {c.with_}\n" for family, c in found)
    errors = [(r.model_type, e) for r in results for e in r.install_errors]
    if errors:
        lines.append("\nmodels the rules could not go on:\n")
        lines.extend(f"  {family}  {e['model']}: {e['error']}\n" for family, e in errors)
    notes = [(r.model_type, note) for r in results for note in r.notes]
    if notes:
        lines.append("\nnotes:\n")
        lines.extend(f"  {family}  {note}\n" for family, note in notes)
    return "".join(lines)
