"""Where transformers' own model tests come from, which of them are a family's, and what they need installed.

`fetch` takes a release's source distribution from the package index
(``pip download --no-binary :all: --no-deps transformers==X``) and unpacks it
in a scratch folder; `model_test_files` finds a model_type's test modules in a
source tree (``tests/models/<model_type>/test_modeling_<model_type>.py``, or
the folder's other ``test_modeling_*.py`` where that name is not used);
`packages_for_tests` names the few packages the model tests import beyond what
the project's environment has (`PACKAGES`), each as the release's ``setup.py``
pins it (its ``_deps``). Nothing here imports torch or transformers.

A source tree without ``tests/models/`` cannot be checked, and `missing` says
why: transformers' source distributions (4.57.6, 5.0.0 and 5.24.0 at least)
ship ``tests/`` with only the shared mixins (``tests/test_modeling_common.py``
and its kin), not the model tests, nor ``tests/generation/`` and
``tests/exporters/``, which ``test_modeling_common`` imports. A checkout of
the release's tag has them (``python -m maintain.releases X --hf-tests
--hf-tests-source DIR``).
"""

from __future__ import annotations

import ast
import tarfile
from pathlib import Path

from packaging.requirements import Requirement

from .commands import run_logged

#: What transformers' model tests import that the project's environment lacks: ``parameterized``
#: (``test_modeling_common``), and ``pytest-timeout`` for the per-test limit the runs set. Of the
#: rest of the release's "testing" extra the model tests need nothing; pytest itself is the project's.
PACKAGES = ("parameterized", "pytest-timeout")


def fetch(python: Path, release: str, scratch: Path, log: Path) -> Path:
    """The source distribution of transformers ``release``, downloaded and unpacked under ``scratch``; its root."""
    download = scratch / "sdist"
    command = [str(python), "-m", "pip", "download", "--disable-pip-version-check", "-q",
               "--no-binary", ":all:", "--no-deps", f"transformers=={release}", "-d", str(download)]
    if run_logged(command, log, scratch).returncode:
        raise RuntimeError(f"downloading the source distribution of transformers {release} failed (see {log})")
    archives = sorted(download.glob(f"transformers-{release}.tar.gz"))
    if not archives:
        raise RuntimeError(f"pip left no transformers-{release}.tar.gz in {download}")
    with tarfile.open(archives[0]) as archive:
        archive.extractall(scratch / "source", filter="data")
    return scratch / "source" / f"transformers-{release}"


def missing(source: Path) -> str:
    """Why ``source`` holds no model tests, or "" when it has ``tests/models/``."""
    if (source / "tests" / "models").is_dir():
        return ""
    return (
        f"{source} has no tests/models/ (transformers' source distributions ship only the shared test mixins of "
        "tests/, not the model tests); give a checkout of the release with --hf-tests-source DIR"
    )


def model_test_files(source: Path, model_type: str) -> tuple[Path, ...]:
    """``model_type``'s model test modules in ``source``, relative to it: ``test_modeling_<module>.py``, else
    every ``test_modeling_*.py`` of its folder (a family whose tests go by another name); none when it has none.
    The folder and the module are named as transformers names the model's package: the model_type with its hyphens
    as underscores (``blip-2``'s are ``tests/models/blip_2/test_modeling_blip_2.py``)."""
    module = model_type.replace("-", "_")
    folder = source / "tests" / "models" / module
    named = folder / f"test_modeling_{module}.py"
    found = (named,) if named.is_file() else tuple(sorted(folder.glob("test_modeling_*.py")))
    return tuple(path.relative_to(source) for path in found)


def pinned_dependencies(setup: Path) -> dict[str, str]:
    """The release's pins, by package name: the string literals of ``_deps = [...]`` in its ``setup.py``."""
    for node in ast.walk(ast.parse(setup.read_text())):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_deps" for t in node.targets):
            pins = [element.value for element in getattr(node.value, "elts", ()) if isinstance(element, ast.Constant)]
            return {Requirement(pin).name: pin for pin in pins if isinstance(pin, str)}
    return {}


def packages_for_tests(source: Path) -> tuple[str, ...]:
    """`PACKAGES`, each as the release's setup.py pins it (by name alone where it does not list it)."""
    pins = pinned_dependencies(source / "setup.py") if (source / "setup.py").is_file() else {}
    return tuple(pins.get(name, name) for name in PACKAGES)
