"""Whether a compiled rule may serve values on the installed release: the policy for releases not yet checked.

A release the snapshot store records (``snapshots/manifest.toml``) has been
checked: its rules were rebuilt, compared and recorded (`maintain.releases`),
and the suite ran on it. Any other release, a newer one above all, is served
only where it provably changes nothing: a rewritten forward whose text (`listing.snapshot`)
is the one the nearest recorded release holds is served as there; one whose text
differs, or that the nearest release has no text for, is `Unchecked`, and the
values read at its sites are unavailable with that reason. The first such build in
a process says once, as a warning, that the release is not yet checked and
which recorded release it is compared with. A forward under a wrapper the
compiler does not know never gets this far: its rule fails to build (`decorators.peel`).

Reads the manifest once per process, and a stored text only for a rule built on
a release the store does not record.
"""

from __future__ import annotations

import warnings
from functools import cache
from pathlib import Path

from . import stored
from .compiler import Instrumented
from .listing import snapshot, snapshot_file_name
from .store import REPOSITORY_STORE, Recorded, StoreError, nearest
from .stored import recorded
from .versions import distribution_version

#: The snapshot store the installed release is judged against.
STORE = REPOSITORY_STORE


class UncheckedRelease(UserWarning):
    """The installed release of a rewritten library is one the snapshot store does not record."""


class Unchecked(Exception):
    """A rewritten forward on a release not yet checked reads differently from the nearest checked release's; the
    message names both releases, the forward, and what to do."""


@cache
def _recorded(root: Path) -> Recorded:
    """The store's manifest (`stored.recorded`), or, where it cannot be read, none, said once per process."""
    try:
        return recorded(root)
    except StoreError as error:
        warnings.warn(f"{error}: no transformers release counts as checked", UncheckedRelease, stacklevel=2)
        return Recorded((), {})


@cache
def _warn_once(installed: str, reference: str | None, newest: str | None, root: Path) -> None:
    if reference is None:
        message = (
            f"no release of {installed.rpartition('-')[0]} is recorded in a snapshot store at {root}, so none counts as "
            f"checked and no value at a rewritten forward is served; install the library from its checkout "
            f"(pip install -e .), which holds the store"
        )
    else:
        message = (
            f"{_spoken(installed)} is not a release this library was checked against (the newest checked is "
            f"{_spoken(newest)}): values at rewritten forwards are served where they read as on {_spoken(reference)}, "
            f"and the others say why they are unavailable; python -m maintain.releases "
            f"{installed.rpartition('-')[2]} checks it (docs/releases.md)"
        )
    warnings.warn(message, UncheckedRelease, stacklevel=4)


def forget() -> None:
    """Forget what this process read of the store and that it warned: the next build reads ``STORE`` again."""
    stored.forget()
    _recorded.cache_clear()
    _warn_once.cache_clear()


def _spoken(release: str) -> str:
    """``transformers-5.25.0`` -> ``transformers 5.25.0``."""
    return release.replace("-", " ", 1)


def release_of(instrumented: Instrumented) -> str | None:
    """``transformers-5.25.0``: the installed release of the library the rule targets, as the store names it; None
    when its version cannot be read."""
    top = instrumented.rule.module_name.partition(".")[0]
    version = distribution_version(top)
    return f"{top}-{version}" if version else None


def check(instrumented: Instrumented, root: Path | None = None) -> None:
    """Raise `Unchecked` when ``instrumented`` (or a rule it drills into) may not serve values on the installed
    release: the release is not recorded in the store at ``root`` and the forward's text differs from the nearest
    recorded release's. Returns quietly on a recorded release."""
    root = STORE if root is None else root
    recorded = _recorded(root)
    installed = release_of(instrumented)
    if installed is None:
        raise Unchecked(
            f"{instrumented.rule.qualname} is not served: the installed {instrumented.rule.module_name.partition('.')[0]} "
            "has no version metadata, so which release it is cannot be checked; reinstall it with pip"
        )
    if installed in recorded.releases:
        return
    reference = nearest(recorded.releases, installed)
    _warn_once(installed, reference, recorded.releases[-1] if recorded.releases else None, root)
    _check_text(instrumented, recorded, root, installed, reference)


def _check_text(instrumented: Instrumented, recorded: Recorded, root: Path, installed: str, reference: str | None):
    rule = instrumented.rule
    name = snapshot_file_name(rule)
    path = recorded.path(reference, name.removesuffix(".py")) if reference else None
    if path is None:
        found = f"{_spoken(reference)} has no text of it" if reference else f"no release is recorded at {root}"
    elif not path.endswith(".py") or (root / path).read_text(encoding="utf-8") != snapshot(instrumented):
        found = f"it reads differently from {_spoken(reference)}'s ({path} in the snapshot store)"
    else:
        for inner in instrumented.drills.values():
            _check_text(inner, recorded, root, installed, reference)
        return
    raise Unchecked(
        f"{_spoken(installed)} is not a release this library was checked against, and "
        f"{rule.qualname} ({rule.module_name}) is not served there: {found}. Check the release "
        f"(python -m maintain.releases {installed.rpartition('-')[2]}, docs/releases.md), or install a checked one"
    )
