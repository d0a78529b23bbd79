"""Which release of a rule's library is installed, and the rule as it reads there (`Rule.at`)."""

from __future__ import annotations

import importlib.metadata
from functools import cache

from packaging.version import InvalidVersion, Version

from .rule import Rule


def installed_version(module_name: str) -> Version | None:
    """The installed version of the distribution ``module_name`` belongs to, or None when unknown."""
    return _distribution_version(module_name.partition(".")[0])


@cache
def _distribution_version(distribution: str) -> Version | None:
    """Read once per process: the library's modules are already imported, so a later install is not what runs."""
    try:
        return Version(importlib.metadata.version(distribution))
    except (importlib.metadata.PackageNotFoundError, InvalidVersion):
        return None


def for_installed(rule: Rule) -> Rule:
    """``rule`` as it reads on the installed release of its library (itself when the version is unknown)."""
    version = installed_version(rule.module_name)
    return rule if version is None or not rule.variants else rule.at(version)
