"""Which release of a library is installed, and a rule as it reads there (`Rule.at`).

Every version the compiler, the build cache and the snapshots name is read here,
from the distribution's metadata, once per process: the library's modules are
already imported, so a later install is not what runs.
"""

from __future__ import annotations

import importlib.metadata
from functools import cache

from packaging.version import InvalidVersion, Version

from .rule import Rule


@cache
def distribution_version(distribution: str) -> str | None:
    """The installed version of ``distribution`` as its metadata spells it (``"5.24.0"``), or None when not installed."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def installed_version(module_name: str) -> Version | None:
    """The installed version of the distribution ``module_name`` belongs to, or None when unknown."""
    text = distribution_version(module_name.partition(".")[0])
    try:
        return None if text is None else Version(text)
    except InvalidVersion:
        return None


def library_version(module_name: str) -> str:
    """The distribution a module belongs to and its installed version, as messages name it (``transformers 5.24.0``)."""
    top = module_name.partition(".")[0]
    text = distribution_version(top)
    return f"{top} {text}" if text is not None else f"{top} (version unknown)"


def for_installed(rule: Rule) -> Rule:
    """``rule`` as it reads on the installed release of its library (itself when the version is unknown)."""
    version = installed_version(rule.module_name)
    return rule if version is None or not rule.variants else rule.at(version)
