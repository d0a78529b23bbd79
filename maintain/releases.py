"""``python -m maintain.releases X.Y.Z [...]``: check the rules against other transformers releases.

For each release: a throwaway virtualenv with that transformers (torch and
torchvision pinned as CI pins them, never resolved by pip), the project's
other requirements and test extra as pyproject states them, the project
installed there (editable, without dependencies), the snapshot check run against
the nearest release the store records (`maintain.snapshot`), the release
recorded in the store when it is not yet (or with ``--update``: written by
the same code, `maintain.store`), optionally the test suite, optionally
transformers' own model tests of the served families run without and with the
rewrites (``--hf-tests``: `maintain.hf_tests`), and a table.

``--share-torch PREFIX`` reuses torch and everything else not installed in
the release's virtualenv from an existing environment (a ``.pth`` file
appended after the virtualenv's own site-packages), which saves installing
torch once per release: the release's transformers and its dependencies
still come first. Runs from a checkout; each release is built and checked in its own
virtualenv, never in this process.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import tomllib
import venv
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import InvalidVersion, Version

from instrument.commands import run

from . import hf_tests
from .commands import aligned, run_logged
from .store import REPOSITORY_STORE, Store

#: The checkout the command runs from.
REPOSITORY = Path(__file__).resolve().parent.parent
SNAPSHOTS = REPOSITORY_STORE

#: Pinned as CI pins them (`.ci/run`), so pip never resolves torch.
TORCH = ("torch==2.14.1", "torchvision==0.29.1")
#: Installed by the command itself: torch pinned (`TORCH`), transformers at the release checked.
OWN_PINS = {"torch", "torchvision", "transformers"}


def requirements(pyproject: Path = REPOSITORY / "pyproject.toml") -> tuple[str, ...]:
    """What the project and its tests need besides torch and transformers, as pyproject states it."""
    project = tomllib.loads(pyproject.read_text())["project"]
    wanted = [*project["dependencies"], *project["optional-dependencies"]["test"]]
    return tuple(dict.fromkeys(r for r in wanted if Requirement(r).name not in OWN_PINS))


@dataclass
class Outcome:
    """What one release gave."""

    release: str
    reference: str = ""  #: the recorded release the check compared with, before the release was recorded
    counts: dict[str, int] = field(default_factory=dict)  #: verdict -> rules
    moved: list[str] = field(default_factory=list)  #: rules whose sites moved
    stored: str = ""  #: "written" (recorded in the store), "kept" (recorded already), "refused" (regressed) or ""
    tests: str = ""  #: pytest's last line, when run
    tests_passed: bool = True  #: pytest exited 0 (or the tests were not run)
    hf_tests: str = ""  #: transformers' model tests without and with the rewrites, in a line, when run
    hf_tests_passed: bool = True  #: no regression, and every family checked (or they were not run)
    error: str = ""  #: why the release could not be checked
    regressed: list[str] = field(default_factory=list)  #: moved rules and stale entries: what the reference served and this does not

    @property
    def failed(self) -> bool:
        """The release could not be checked, a site moved, its tests failed, or transformers' tests regressed."""
        return bool(self.error or self.regressed) or not (self.tests_passed and self.hf_tests_passed)


def site_packages(python: Path) -> Path:
    """The site-packages directory of the environment whose interpreter is ``python``."""
    done = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    )
    return Path(done.stdout.strip())


def make_environment(release: str, where: Path, log: Path, share_torch: Path | None) -> Path:
    """A virtualenv at ``where`` with transformers ``release`` and the project; returns its interpreter."""
    python = where / "bin" / "python"
    if not python.exists():
        venv.EnvBuilder(with_pip=True, clear=True).create(where)
    if share_torch is not None:
        shared = site_packages(share_torch / "bin" / "python")
        (site_packages(python) / "zz_shared_environment.pth").write_text(f"{shared}\n")
    pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    if run_logged([*pip, *TORCH, f"transformers=={release}", *requirements()], log, REPOSITORY).returncode:
        raise RuntimeError(f"installing transformers {release} failed (see {log})")
    if run_logged([*pip, "--no-deps", "--editable", str(REPOSITORY)], log, REPOSITORY).returncode:
        raise RuntimeError(f"installing the project failed (see {log})")
    return python


def check_release(python: Path, release: str, work: Path, log: Path, update: bool, root: Path = SNAPSHOTS) -> Outcome:
    """The snapshot check against the nearest release the store at ``root`` records, then the release recorded
    there when it is not yet, or when asked."""
    outcome = Outcome(release)
    verdicts = work / "verdicts.json"
    snapshot = [str(python), "-m", "maintain.snapshot", "--root", str(root)]
    run_logged([*snapshot, "--quiet", "--json", str(verdicts)], log, REPOSITORY)
    if not verdicts.exists():
        outcome.error = f"the snapshot check did not run (see {log})"
        return outcome
    report = json.loads(verdicts.read_text())
    outcome.reference = report["reference"]
    outcome.counts = {k: v for k, v in report["counts"].items() if v}
    outcome.moved = [row["rule"] for row in report["rules"] if row["verdict"] == "site moved"]
    outcome.regressed = report["regressions"]
    name = report["installed"]
    if outcome.regressed:
        outcome.stored = "refused"
        outcome.error = (
            f"not recorded: against {outcome.reference}, {len(outcome.regressed)} "
            f"{'rule' if len(outcome.regressed) == 1 else 'rules'} regressed "
            f"({', '.join(outcome.regressed)}); fix the rules (docs/releases.md), then run this again"
        )
    elif update or name not in Store.load(root).releases:
        if run_logged([*snapshot, "--update", "--quiet"], log, REPOSITORY).returncode:  # the release just recorded must check clean
            outcome.error = f"recording {name} in {root} failed (see {log})"
        else:
            outcome.stored = "written"
    else:
        outcome.stored = "kept"
    return outcome


def run_tests(python: Path, log: Path, arguments: list[str], timeout: float) -> tuple[str, bool]:
    """pytest's summary line on this environment (or why there is none), and whether pytest exited 0."""
    try:
        done = run_logged([str(python), "-m", "pytest", "-q", *arguments], log, REPOSITORY, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"timed out after {timeout:.0f} s", False
    lines = [line for line in log.read_text().splitlines() if re.search(r"\b(passed|failed|error|skipped)\b", line)]
    return (lines[-1].strip("= ") if lines else "no summary (see the log)"), done.returncode == 0


def table(outcomes: list[Outcome]) -> str:
    """One row per release: the reference, the verdict counts, whether the store was written, the tests (and
    transformers' model tests, where any release ran them)."""
    hf = any(o.hf_tests for o in outcomes)
    rows = [("release", "compared with", "verdicts", "stored", "tests", *(("transformers' tests",) if hf else ()))]
    for o in outcomes:
        verdicts = ", ".join(f"{n} {v}" for v, n in o.counts.items())
        if o.error:
            verdicts = f"{verdicts}: {o.error}" if verdicts else o.error
        elif o.moved:
            verdicts += f" ({', '.join(o.moved)})"
        rows.append((o.release, o.reference, verdicts, o.stored, o.tests or "not run", *((o.hf_tests or "not run",) if hf else ())))
    return aligned(rows)


def run_hf_tests(python: Path, release: str, work: Path, log: Path, args: argparse.Namespace) -> tuple[str, bool]:
    """transformers' model tests without and with the rewrites (`maintain.hf_tests`): their report printed, and
    the release table's cell with whether they passed."""
    options = hf_tests.Options(
        families=tuple(filter(None, args.hf_tests_families.split(","))),
        source=args.hf_tests_source,
        pytest_args=tuple(shlex.split(args.hf_tests_args)),
        timeout=args.hf_tests_timeout,
        slow=args.hf_tests_slow,
    )
    check = hf_tests.check(python, release, work / "hf-tests", log, options)
    if check.results:
        print(f"transformers {release}: transformers' model tests (report: {work / 'hf-tests' / 'hf-tests.txt'})")
        sys.stdout.write(hf_tests.report(check.results))
    return check.summary(), not check.failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m maintain.releases", description=__doc__.splitlines()[0])
    parser.add_argument("releases", nargs="+", help="transformers versions, e.g. 4.57.6 5.0.0")
    parser.add_argument("--tests", action="store_true", help="also run the test suite on each release")
    parser.add_argument("--pytest-args", default="tests", help="what to pass to pytest (default: tests)")
    parser.add_argument("--test-timeout", type=float, default=3600, help="seconds the suite may take per release")
    parser.add_argument("--update", action="store_true", help="record a release again that the store records already")
    parser.add_argument("--share-torch", type=Path, metavar="PREFIX", help="reuse torch (and the rest) from this environment")
    parser.add_argument("--venvs", type=Path, help="keep the virtualenvs here (reused on the next run)")
    hf = parser.add_argument_group("transformers' own model tests, without and with the rewrites (maintain.hf_tests)")
    hf.add_argument("--hf-tests", action="store_true", help="run the served families' model tests twice and compare")
    hf.add_argument("--hf-tests-families", default="", metavar="A,B", help="these model_types only (default: every served one)")
    hf.add_argument("--hf-tests-args", default="", metavar="ARGS", help="more pytest arguments, e.g. \"-k 'not compile'\"")
    hf.add_argument("--hf-tests-timeout", type=float, default=3600, help="seconds each run (a family, with or without) may take")
    hf.add_argument("--hf-tests-slow", action="store_true", help="the slow tier too (RUN_SLOW=1: the torch.export tests)")
    hf.add_argument("--hf-tests-source", type=Path, metavar="DIR",
                    help="the release's source tree with tests/models/ (a checkout) instead of its source distribution")
    args = parser.parse_args(argv)
    for release in args.releases:  # refused before anything is made
        try:
            Version(release)
        except InvalidVersion:
            parser.error(f"{release!r} is not a release number; give transformers versions such as 5.0.0")
    scratch = Path(tempfile.mkdtemp(prefix="vlm-releases-"))
    where = args.venvs or scratch
    outcomes = []
    try:
        for release in args.releases:
            work = scratch / release
            work.mkdir(parents=True, exist_ok=True)
            log = work / "log.txt"
            print(f"transformers {release}: building its virtualenv (log: {log})", flush=True)
            try:
                python = make_environment(release, where / f"transformers-{release}", log, args.share_torch)
            except RuntimeError as error:
                outcomes.append(Outcome(release, error=str(error)))
                continue
            outcome = check_release(python, release, work, log, args.update)
            if args.tests and not outcome.error:
                print(f"transformers {release}: running the tests", flush=True)
                outcome.tests, outcome.tests_passed = run_tests(
                    python, work / "tests.txt", args.pytest_args.split(), args.test_timeout
                )
            if args.hf_tests and not outcome.error:
                outcome.hf_tests, outcome.hf_tests_passed = run_hf_tests(python, release, work, log, args)
            outcomes.append(outcome)
    finally:
        if args.venvs is None:
            for release in args.releases:
                shutil.rmtree(scratch / f"transformers-{release}", ignore_errors=True)
    sys.stdout.write(table(outcomes))
    print(f"logs: {scratch}")
    return 1 if any(o.failed for o in outcomes) else 0


if __name__ == "__main__":
    run(main)
