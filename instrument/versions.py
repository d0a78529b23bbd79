"""Which release of a rule's library is installed, and the rule as it reads there (`Rule.at`)."""

from __future__ import annotations

import importlib.metadata

from packaging.version import InvalidVersion, Version

from .rule import Rule


def installed_version(module_name: str) -> Version | None:
    """The installed version of the distribution ``module_name`` belongs to, or None when unknown."""
    try:
        return Version(importlib.metadata.version(module_name.partition(".")[0]))
    except (importlib.metadata.PackageNotFoundError, InvalidVersion):
        return None


def for_installed(rule: Rule) -> Rule:
    """``rule`` as it reads on the installed release of its library (itself when the version is unknown)."""
    version = installed_version(rule.module_name)
    return rule if version is None or not rule.variants else rule.at(version)
