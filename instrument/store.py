"""The snapshot store, read: the releases it records and what each resolves a forward to, from its manifest alone.

A release's entries are what `maintain.snapshot` writes for it: per rewritten
forward (its *stem*, ``modeling_llava.LlavaModel.forward``), one file name and
its text (``<stem>.py``, ``.drift`` or ``.unavailable``); a forward whose target
the release lacks has no entry. The store under ``snapshots/`` holds them so:

- ``<stem>.<suffix>``, the *head* file of each forward: the text of the newest
  release that has an entry for it;
- ``older/<release>/<stem>.<suffix>``: each other distinct text of that
  forward, under the first release that has it;
- ``manifest.toml``: every release recorded, in version order, and per
  forward the releases at which its entry changes, each naming the stored file
  it changes to, or ``"absent"``. A release resolves a forward to the latest
  change at or before it; with none, the forward has no entry there;
- ``sources.json``: per stored rewrite (``.py``), the SHA-256 of the original
  source it was rewritten from and of its own text, from which a build the
  build cache misses compiles it without libcst (`stored`, `read_sources`).

The library reads the manifest at build time (`instrument.checked`: a release
the store records has been checked, and an unrecorded one is compared with the
nearest recorded one, `nearest`; `instrument.stored`: the rewrite of a source
the store records): `Recorded` reads no stored text and this module writes
nothing. The maintainer's tools read the texts and write the
store (`maintain.store`).
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

#: The repository's snapshot store (the library is installed from its checkout, which holds it).
REPOSITORY_STORE = Path(__file__).resolve().parent.parent / "snapshots"
MANIFEST = "manifest.toml"
OLDER = "older"
#: The manifest's value for a forward that has no entry from that release on.
ABSENT = "absent"
#: The file of the digests of each stored rewrite and of the original it was rewritten from.
SOURCES = "sources.json"


class StoreError(Exception):
    """The snapshot store cannot be read or written as it is; the message says where and what to do."""


def forward_stem(module_name: str, qualname: str) -> str:
    """The name the store gives a rewritten forward: ``modeling_llava.LlavaModel.forward`` (its files add a suffix)."""
    return f"{module_name.rpartition('.')[2]}.{qualname}"


def release_version(release: str) -> Version:
    """``transformers-5.24.0`` -> ``Version("5.24.0")``; a `StoreError` when the name carries no version."""
    try:
        return Version(release.rpartition("-")[2])
    except InvalidVersion:
        raise StoreError(f"{release!r} is not a release name such as transformers-5.24.0") from None


def release_key(release: str) -> tuple[str, Version]:
    """How releases sort: by library, then version (``transformers-5.10.4`` after ``transformers-5.9.0``)."""
    return release.rpartition("-")[0], release_version(release)


def _nearer(installed: Version, a: Version, b: Version) -> Version:
    """Of two releases, the one nearer ``installed``: the one in its major series, else the nearer minor, micro."""
    def key(v: Version) -> tuple[int, ...]:
        parts = [abs(x - y) for x, y in zip((*v.release, 0, 0)[:3], (*installed.release, 0, 0)[:3])]
        return (parts[0], parts[1], parts[2], v > installed)  # the older wins a tie

    return min(a, b, key=key)


def nearest(recorded: Iterable[str], release: str) -> str | None:
    """``release`` when it is in ``recorded``, else the nearer of the recorded releases just before and just after
    it (of the same library), else None."""
    recorded = tuple(recorded)
    if release in recorded:
        return release
    library, installed = release_key(release)
    versions = {}
    for name in recorded:
        recorded_library, version = release_key(name)
        if recorded_library == library:
            versions[version] = name
    older = max((v for v in versions if v < installed), default=None)
    newer = min((v for v in versions if v > installed), default=None)
    if older is None or newer is None:
        return versions[older or newer] if (older or newer) is not None else None
    return versions[_nearer(installed, older, newer)]


@dataclass(frozen=True)
class Recorded:
    """What the manifest alone says of the releases: every release recorded, oldest first, and per forward (its
    stem) the releases at which the file it resolves to changes. No text is read."""

    releases: tuple[str, ...]
    changes: Mapping[str, Mapping[str, str]]

    @classmethod
    def load(cls, root: Path) -> Recorded:
        """The manifest under ``root``; empty when there is none. A `StoreError` when it cannot be read."""
        manifest = root / MANIFEST
        if not manifest.is_file():
            return cls((), {})
        data = read_manifest(manifest)
        return cls(tuple(sorted(data.get("releases", ()), key=release_key)), data.get("forwards", {}))

    def path(self, release: str, stem: str) -> str | None:
        """The stored file (relative to the store) ``stem`` resolves to at the recorded ``release``: its latest
        change at or before it; None when it has no entry there."""
        index = {name: i for i, name in enumerate(self.releases)}
        before = [(index[name], path) for name, path in self.changes.get(stem, {}).items()
                  if name in index and index[name] <= index[release]]
        latest = max(before, default=None)
        return None if latest is None or latest[1] == ABSENT else latest[1]


def read_sources(root: Path) -> dict[str, dict[str, str]]:
    """The store's ``sources.json``: stored path -> ``{"original": SHA-256 of the original forward's dedented source,
    "text": SHA-256 of the file}``; empty when there is none. A `StoreError` when it cannot be read as that."""
    path = root / SOURCES
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_bytes())
    except (ValueError, UnicodeDecodeError) as error:
        raise StoreError(f"{path} cannot be read: {error}") from None
    if not isinstance(data, dict) or not all(
        isinstance(record, dict) and isinstance(record.get("original"), str) and isinstance(record.get("text"), str)
        for record in data.values()
    ):
        raise StoreError(f"{path} is not a table of stored paths to their original and text digests")
    return data


def write_sources(records: Mapping[str, Mapping[str, str]]) -> str:
    """``sources.json``'s text: one record per line, by path, so that a release's records show as lines in a diff."""
    lines = [f"  {json.dumps(path)}: {json.dumps(dict(records[path]))}" for path in sorted(records)]
    return "{\n" + ",\n".join(lines) + "\n}\n"


def read_manifest(manifest: Path) -> dict:
    """The manifest's TOML; a `StoreError` when it cannot be read."""
    try:
        return tomllib.loads(manifest.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise StoreError(f"{manifest} cannot be read: {error}") from None
