"""``python -m maintain.releases X --hf-tests``: transformers' own model tests, run without and with the rewrites.

For a release's virtualenv (`maintain.releases.make_environment`): the
release's source tree (its source distribution from the package index, or a
checkout given with ``--hf-tests-source``: `maintain.hf_source`), the few
packages its model tests import installed there without their dependencies
(so pip resolves nothing, torch least of all), and, for each family the
project serves on that release (``envoys.families``), its model tests run
twice in that tree: once as they are, once with `maintain.hf_plugin`
installing the rewritten forwards on every model they build. Both runs record
each test's outcome (`maintain.hf_record`), and `maintain.hf_compare`
compares them by test id: a test that passed without the rewrites and not
with them is a regression, and fails the release.

The default tier is what pytest runs without ``RUN_SLOW`` (``--hf-tests-slow``
sets it, for the slow tier: the ``torch.export`` tests among others). The runs
are offline (``HF_HUB_OFFLINE=1``: a test that needs the Hub fails the same
way in both), each test has `TEST_TIMEOUT` seconds (pytest-timeout) and each
run the limit given. Nothing here imports torch or transformers.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from . import hf_plugin, hf_record
from .commands import run_logged
from .hf_compare import FamilyResult, report
from .hf_source import fetch, missing, model_test_files, packages_for_tests

#: Seconds one test may take (pytest-timeout's ``--timeout``).
TEST_TIMEOUT = 900
#: The plugins, by the names the runs load them under: standalone copies, importing nothing of the project when loaded.
PLUGINS = {"vlm_hf_record": hf_record, "vlm_hf_plugin": hf_plugin}

SERVED = "from envoys.families import served_model_types; print(' '.join(served_model_types()))"


@dataclass
class Options:
    """What ``--hf-tests-*`` asked for."""

    families: tuple[str, ...] = ()  #: these model_types only (default: every family served on the release)
    source: Path | None = None  #: a source tree of the release to take the tests from (default: its sdist)
    pytest_args: tuple[str, ...] = ()  #: more arguments for pytest (``-k ...``)
    timeout: float = 3600  #: seconds each run (one family, with or without) may take
    slow: bool = False  #: the slow tier too (``RUN_SLOW=1``)


@dataclass
class Check:
    """What the model tests gave on one release."""

    results: list[FamilyResult] = field(default_factory=list)
    error: str = ""  #: why nothing could be run

    @property
    def failed(self) -> bool:
        return bool(self.error) or any(r.failed for r in self.results)

    def summary(self) -> str:
        """One cell for the release table."""
        if self.error:
            return self.error
        regressions = sum(len(r.regressions) for r in self.results)
        broken = [r.model_type for r in self.results if r.error or r.install_errors]
        tail = f"; not checked or not instrumented: {', '.join(broken)}" if broken else ""
        return f"{len(self.results)} families, {regressions} regressions{tail}"


def served_model_types(python: Path) -> tuple[str, ...]:
    """The model_types of the families the project serves on the environment of ``python``."""
    done = subprocess.run([str(python), "-c", SERVED], capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"listing the served families failed: {done.stderr.strip().splitlines()[-1:]}")
    return tuple(done.stdout.split())


def write_plugins(folder: Path) -> Path:
    """The plugins' sources copied into ``folder`` under their run names (`PLUGINS`); the folder, for PYTHONPATH."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, module in PLUGINS.items():
        (folder / f"{name}.py").write_text(Path(module.__file__).read_text())
    return folder


def pytest_command(python: Path, files: tuple[Path, ...], rewrites: bool, extra: tuple[str, ...]) -> list[str]:
    """The pytest command line of one run: the recorder always, the rewrites' plugin when ``rewrites``."""
    plugins = ["-p", "vlm_hf_record", *(["-p", "vlm_hf_plugin"] if rewrites else [])]
    return [str(python), "-m", "pytest", *map(str, files), *plugins, "-p", "no:cacheprovider", "-q",
            f"--timeout={TEST_TIMEOUT}", *extra]


def run_environment(plugins: Path, outcomes: Path, installs: Path, slow: bool) -> dict[str, str]:
    """The child's environment: the plugins importable, where they write, offline, the tier."""
    env = {**os.environ, hf_record.OUTCOMES: str(outcomes), hf_plugin.INSTALLS: str(installs), "HF_HUB_OFFLINE": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(plugins), os.environ.get("PYTHONPATH"))))
    env.pop("RUN_SLOW", None)
    if slow:
        env["RUN_SLOW"] = "1"
    return env


def read_installs(path: Path) -> list[dict]:
    """The installs the plugin recorded (none when it wrote nothing)."""
    import json

    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def run_family(python: Path, source: Path, model_type: str, work: Path, plugins: Path, options: Options) -> FamilyResult:
    """One family's model tests, without and then with the rewrites, in ``source``."""
    files = model_test_files(source, model_type)
    result = FamilyResult(model_type, tuple(map(str, files)))
    if not files:
        result.error = f"no tests/models/{model_type}/test_modeling_*.py in {source}"
        return result
    installs = work / f"{model_type}.installs.jsonl"
    installs.unlink(missing_ok=True)
    for rewrites in (False, True):
        label = "with" if rewrites else "without"
        outcomes = work / f"{model_type}.{label}.outcomes.jsonl"
        outcomes.unlink(missing_ok=True)
        log = work / f"{model_type}.{label}.log"
        env = run_environment(plugins, outcomes, installs, options.slow)
        command = pytest_command(python, files, rewrites, options.pytest_args)
        try:
            done = run_logged(command, log, source, timeout=options.timeout, env=env)
            if done.returncode not in (0, 1, 5):  # 1: some test failed; 5: none selected
                result.notes.append(f"pytest {label} the rewrites exited {done.returncode} (see {log})")
        except subprocess.TimeoutExpired:
            result.notes.append(f"the run {label} the rewrites timed out after {options.timeout:.0f} s; its tests after that are absent")
        recorded = hf_record.read_outcomes(outcomes)
        setattr(result, "with_" if rewrites else "without", recorded)
    result.installs = read_installs(installs)
    if any(outcome == "passed" for outcome in result.with_.values()) and not result.installs:
        result.error = "the run with the rewrites built no model the plugin saw: the rewrites were not installed"
    return result


def check(python: Path, release: str, work: Path, log: Path, options: Options) -> Check:
    """The model tests of every served family (or those asked for) on the environment of ``python``; the work
    (the source, the plugins, each run's log and outcomes, the report) under ``work``."""
    work.mkdir(parents=True, exist_ok=True)
    try:
        source = options.source or fetch(python, release, work, log)
        why = missing(source)
        if why:
            return Check(error=why)
        if run_logged([str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q", "--no-deps",
                       *packages_for_tests(source)], log, source).returncode:
            return Check(error=f"installing what transformers' tests need failed (see {log})")
        served = served_model_types(python)
    except RuntimeError as error:
        return Check(error=str(error))
    unknown = [family for family in options.families if family not in served]
    if unknown:
        return Check(error=f"not served on transformers {release}: {', '.join(unknown)} (served: {', '.join(served)})")
    plugins = write_plugins(work / "plugins")
    results = []
    for model_type in options.families or served:
        print(f"transformers {release}: {model_type}'s model tests, without and with the rewrites", flush=True)
        results.append(run_family(python, source.resolve(), model_type, work, plugins, options))
    (work / "hf-tests.txt").write_text(report(results))
    return Check(results)
