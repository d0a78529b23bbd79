"""The snapshot store, written: each rewritten forward's text kept once per distinct content, and what every release
resolves to (the layout: `instrument.store`, which reads the manifest for the library).

The files are written from the releases' entries alone, in one canonical
form (`Store.write`): a text no release resolves to is deleted, a new release
whose entries equal its predecessor's adds one line to the manifest, and one
that changes a forward rewrites that forward's head file (the previous text
moving under ``older/`` while an older release still resolves to it), so
``git diff`` shows the change as a diff of that file. ``sources.json`` holds,
per stored rewrite whose original the recording release gave (`Store.put`),
the digests of that original and of the text; a record of a text that changed
since is dropped. Reading checks the store (`Store.load`): every file the
manifest names exists, and files it names nowhere are listed
(`unreferenced`). It handles text only and compiles nothing:
`maintain.snapshot` makes the entries.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from instrument.sources import digest
from instrument.store import (
    ABSENT,
    MANIFEST,
    OLDER,
    REPOSITORY_STORE,
    SOURCES,
    StoreError,
    nearest,
    read_manifest,
    read_sources,
    release_key,
    release_version,
    write_sources,
)

__all__ = ["ABSENT", "MANIFEST", "OLDER", "REPOSITORY_STORE", "SOURCES", "Store", "StoreError", "Stored", "Written"]

_PREAMBLE = """\
# Written by `python -m maintain.snapshot --update` (maintain/store.py); not edited by hand.
# `releases`: every release recorded. Under each forward: the releases at which what it
# resolves to changes, and the stored file it changes to ("absent": no entry from there on).
# A release resolves a forward to the latest change at or before it.
"""


@dataclass(frozen=True)
class Stored:
    """One forward's entry for a release: the file's name (``<stem>.py``, ``.drift``, ``.unavailable``) and its text."""

    name: str
    text: str

    @property
    def stem(self) -> str:
        return self.name.rpartition(".")[0]


@dataclass(frozen=True)
class Written:
    """What `Store.write` changed, as paths relative to the store."""

    written: tuple[str, ...]  #: files created or rewritten (the manifest included when it changed)
    removed: tuple[str, ...]  #: files no release resolves to any more


class Store:
    """Every release recorded and its entries (release -> stem -> `Stored`), and the digest of the original source
    each stored rewrite was made from (by the digest of its text); immutable, written whole."""

    def __init__(self, releases: Mapping[str, Mapping[str, Stored]] | None = None,
                 originals: Mapping[str, str] | None = None):
        self._originals = dict(originals or {})  # digest of a stored text -> digest of the original it rewrites
        releases = releases or {}
        for release, entries in releases.items():
            for stem, stored in entries.items():
                if stored.stem != stem:
                    raise StoreError(f"{release}: the entry for {stem} names another forward's file, {stored.name}")
        self._releases = {r: dict(sorted(releases[r].items())) for r in sorted(releases, key=release_key)}

    @property
    def releases(self) -> tuple[str, ...]:
        """Every release recorded, oldest first (by library, then version)."""
        return tuple(self._releases)

    def entries(self, release: str) -> dict[str, Stored]:
        """What ``release`` resolves each forward to (a forward it has no entry for is absent)."""
        return dict(self._releases[release])

    def put(self, release: str, entries: Mapping[str, Stored], originals: Mapping[str, str] | None = None) -> Store:
        """This store with ``release``'s entries set to ``entries`` (added, or replacing what it held), and
        ``originals`` (an entry's stem -> the digest of the original source it rewrites) recorded for them."""
        release_version(release)
        recorded = {digest(entries[stem].text): original for stem, original in (originals or {}).items()}
        return Store({**self._releases, release: {stored.stem: stored for stored in entries.values()}},
                     {**self._originals, **recorded})

    def nearest(self, release: str) -> str | None:
        """``release`` when recorded, else the nearer of the recorded releases just before and just after it (of
        the same library), else None."""
        return nearest(self._releases, release)

    # -- the files ------------------------------------------------------------------------------------------

    def paths(self) -> dict[str, dict[Stored, str]]:
        """Where each distinct entry is stored, per forward: ``{stem: {stored: path}}``, paths relative to the
        store: the forward's newest entry in its head file, each other under ``older/<first release with it>/``."""
        by_stem: dict[str, dict[Stored, str]] = {}
        newest: dict[str, Stored] = {}
        for release, entries in self._releases.items():  # oldest first
            for stem, stored in entries.items():
                by_stem.setdefault(stem, {}).setdefault(stored, f"{OLDER}/{release}/{stored.name}")
            newest.update(entries)
        for stem, stored in newest.items():
            by_stem[stem][stored] = stored.name
        return by_stem

    def manifest(self) -> str:
        """The manifest's text: every release, and per forward the releases at which its entry changes."""
        paths = self.paths()
        lines = [_PREAMBLE, "releases = ["]
        lines += [f"    {_quote(release)}," for release in self._releases]
        lines.append("]")
        for stem in sorted(paths):
            lines += ["", f"[forwards.{_quote(stem)}]"]
            before: str | None = None
            for release, entries in self._releases.items():
                now = paths[stem][entries[stem]] if stem in entries else None
                if now != before:
                    lines.append(f"{_quote(release)} = {_quote(now or ABSENT)}")
                before = now
        return "\n".join(lines) + "\n"

    def sources(self) -> dict[str, dict[str, str]]:
        """``sources.json``'s records: per stored rewrite whose original is known, the digests of that original
        and of the text."""
        texts = ((path, digest(stored.text)) for entries in self.paths().values() for stored, path in entries.items())
        return {path: {"original": self._originals[text], "text": text} for path, text in texts if text in self._originals}

    def files(self) -> dict[str, str]:
        """Every file of the store, path (relative to it) -> text: the stored texts and the manifest."""
        files = {path: stored.text for entries in self.paths().values() for stored, path in entries.items()}
        files[MANIFEST] = self.manifest()
        records = self.sources()
        if records:
            files[SOURCES] = write_sources(records)
        return files

    @classmethod
    def load(cls, root: Path) -> Store:
        """The store under ``root``; empty when ``root`` has no files. A `StoreError` when the manifest is missing
        (``root`` holds other files), unreadable, or names a file that is not there."""
        manifest = root / MANIFEST
        if not manifest.is_file():
            if _owned(root):
                raise StoreError(
                    f"{root} holds files but no {MANIFEST}: it is not a snapshot store "
                    "(give the store's folder, or an empty one to start a new store)"
                )
            return cls()
        data = read_manifest(manifest)
        texts: dict[str, Stored] = {}
        for changes in data.get("forwards", {}).values():
            for path in changes.values():
                if path != ABSENT and path not in texts:
                    file = root / path
                    if not file.is_file():
                        raise StoreError(f"{manifest} names {path}, which is not in {root}; restore it from git")
                    texts[path] = Stored(file.name, file.read_bytes().decode("utf-8"))
        originals = {record["text"]: record["original"] for path, record in read_sources(root).items()
                     if path in texts and digest(texts[path].text) == record["text"]}  # a record of another text: dropped
        return cls(_resolve(data, texts, manifest), originals)

    def unreferenced(self, root: Path) -> tuple[str, ...]:
        """Files under ``root`` that are not this store's: texts no release resolves to (`write` removes them)."""
        return tuple(sorted(set(_owned(root)) - set(self.files())))

    def write(self, root: Path) -> Written:
        """Make ``root`` hold exactly this store's files: changed ones rewritten (each atomically, the manifest
        last), the ones no release resolves to removed. Refuses a ``root`` that holds files but no manifest."""
        if not (root / MANIFEST).is_file() and _owned(root):
            Store.load(root)  # raises, saying why
        files = self.files()
        manifest = files.pop(MANIFEST)
        written = [path for path, text in files.items() if _write(root / path, text)]
        if _write(root / MANIFEST, manifest):
            written.append(MANIFEST)
        removed = sorted(set(_owned(root)) - set(files) - {MANIFEST})
        for path in removed:
            (root / path).unlink()
        folders = [root / OLDER, *(root / OLDER).rglob("*")] if (root / OLDER).is_dir() else []
        for folder in sorted((f for f in folders if f.is_dir()), key=lambda f: len(f.parts), reverse=True):
            if not any(folder.iterdir()):
                folder.rmdir()
        return Written(tuple(sorted(written)), tuple(removed))


def _quote(text: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's for these names)."""
    return json.dumps(text, ensure_ascii=False)


def _resolve(data: dict, texts: Mapping[str, Stored], where: Path | str = MANIFEST) -> dict[str, dict[str, Stored]]:
    """The manifest ``data`` read as release -> stem -> entry, its paths' texts in ``texts``."""
    releases = data.get("releases")
    if not isinstance(releases, list) or not all(isinstance(r, str) for r in releases) or len(set(releases)) != len(releases):
        raise StoreError(f"{where}: `releases` must list each release once, as strings")
    ordered = sorted(releases, key=release_key)
    index = {release: i for i, release in enumerate(ordered)}
    table: dict[str, dict[str, Stored]] = {release: {} for release in ordered}
    for stem, changes in data.get("forwards", {}).items():
        unknown = [release for release in changes if release not in index]
        if unknown:
            raise StoreError(f"{where}: {stem} changes at {', '.join(unknown)}, not in `releases`")
        points = sorted((index[release], path) for release, path in changes.items())
        for (start, path), (end, _) in zip(points, [*points[1:], (len(ordered), "")]):
            if path == ABSENT:
                continue
            stored = texts[path]
            if stored.stem != stem:
                raise StoreError(f"{where}: {stem} resolves to {path}, another forward's file")
            for release in ordered[start:end]:
                table[release][stem] = stored
    return {release: dict(sorted(entries.items())) for release, entries in table.items()}


def _owned(root: Path) -> list[str]:
    """The files under ``root`` a store may hold: the manifest, the top-level files (not dotfiles), ``older/``."""
    if not root.is_dir():
        return []
    top = [p.name for p in root.iterdir() if p.is_file() and not p.name.startswith(".")]
    older = [p.relative_to(root).as_posix() for p in (root / OLDER).rglob("*") if p.is_file()] if (root / OLDER).is_dir() else []
    return sorted(top + older)


def _write(path: Path, text: str) -> bool:
    """Write ``text`` to ``path`` atomically, unless it holds it already; whether it wrote."""
    data = text.encode("utf-8")
    if path.is_file() and path.read_bytes() == data:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return True
