"""The build cache: compiled rewrites kept on disk, as pytest keeps its rewritten test modules.

Compiling a rule means parsing and rewriting the target's source with libcst,
which costs tenths of a second per family and the import of libcst itself. The
result depends only on what `key` lists (the target's file, by content hash,
and where the function sits in it; the rule's sites; this library's version
and the source of its compiler; libcst's, the target library's and Python's
versions), so it is written to disk once and read back by every later process.

An entry is the rewritten source, its sites, the original
source and first line, and the compiled code object (``marshal``, as a pyc
holds it), after `MAGIC` and a SHA-256 of that body. It is code that will run,
so the cache is trusted exactly as far as the user's own private files are: a
folder and an entry only this user can write. Anything else is ignored:

- the folder must be a directory owned by the user that no one else can write
  (it is created private, mode 0700; an existing folder others may read, 0755,
  is used: they can read entries, not change them); otherwise the cache is not
  used at all. Its path is opened without following a symlink in its last
  part: a symlink where the folder should be is refused, not resolved, since
  it cannot be told from one planted there (the folders above it are followed,
  so a symlinked ``~/.cache`` works; to keep the cache elsewhere, name the real
  folder in ``$VLM_INSTRUMENT_CACHE``);
- an entry is opened relative to the folder that was checked (its descriptor:
  no second lookup of the folder's path), never through a symlink and without
  waiting on a FIFO, and read only when it is a regular file owned by the user
  that no one else can write (entries are written 0600), with no other hard
  link, of at most `MAX_ENTRY_BYTES` (no more is ever read);
- its checksum must match: it detects corruption (a truncated or torn write,
  flipped bits), not tampering, since anyone who can write the file can
  recompute it; that is why who can write the file is checked;
- it must record exactly the key it is loaded for, and hold exactly the types
  an entry holds (its code a function of the target's name and file, closing
  over the target's free variables and the site helper only).

Any failure while reading an entry (missing, refused, stale, truncated,
corrupt, malformed) means it is ignored: the rule is compiled in memory, as if
there were no cache, without an error, and the entry is written again,
replacing the bad one. libcst is imported by the build, so only on a miss.

Entries are written to a new temporary file (``.<entry>.<random>.tmp``, mode
0600) created in the checked folder and renamed into place relative to it
(``os.replace`` with ``dir_fd``), so a folder swapped for a symlink after the
check cannot redirect the write, a reader sees a whole entry or none, and
processes building at once each write the same bytes. A writer killed before
the rename leaves its temporary file; each write removes the ones older than
`STALE_TEMPORARY_SECONDS` (this library's names, this user's regular files,
nothing else). On Windows, which has no ``dir_fd``, names are joined to the
folder's path and there is no owner or mode to check.

Where: ``$VLM_INSTRUMENT_CACHE`` when set (a folder; ``off``, ``0``, ``false``
or ``no`` disables the cache), else the user's cache folder
(``$XDG_CACHE_HOME/vlm-instrument`` or ``~/.cache/vlm-instrument`` on Linux,
``~/Library/Caches/vlm-instrument`` on macOS,
``%LOCALAPPDATA%\\vlm-instrument\\Cache`` on Windows). Never inside the
installed package. Entries are small (a few kB); delete the folder to clear it.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import logging
import marshal
import os
import re
import secrets
import stat
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import CodeType, FunctionType

from .rewritten import SITE, Rewritten, Site
from .versions import distribution_version, library_version

#: The environment variable that moves the cache folder, or disables the cache (`DISABLED`).
ENVIRONMENT = "VLM_INSTRUMENT_CACHE"

#: Values of `ENVIRONMENT` (any case) that disable the cache.
DISABLED = frozenset({"off", "0", "false", "no"})

#: Bumped whenever the layout of an entry changes.
FORMAT = 3

#: First bytes of every entry file; the SHA-256 of the body follows, then the body.
MAGIC = b"vlm-instrument build cache\n"

#: The largest entry file read or written. Entries are a few kB; a larger file is not one of ours.
MAX_ENTRY_BYTES = 4 * 1024 * 1024

#: A temporary file older than this was left by a killed writer (a write takes milliseconds); writes remove it.
STALE_TEMPORARY_SECONDS = 60 * 60

#: The name of a temporary file a write creates: ``.<entry>.<random>.tmp``.
TEMPORARY = re.compile(r"\.[A-Za-z0-9_.]+-[0-9a-f]{32}\.vlmc\.[a-z0-9_]+\.tmp")

_BINARY = getattr(os, "O_BINARY", 0)  # Windows: no newline translation

#: How an entry is opened: never through a symlink, and without waiting for a writer (a FIFO would block).
_READ = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | _BINARY

#: How a temporary file is created: a new file, or an error (``O_EXCL`` refuses a symlink too).
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _BINARY

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Compiled:
    """What depends only on the original code object: the rewrite and its compiled code."""

    original: CodeType  #: held so that its id, the in-memory cache key, is never reused
    rewritten: Rewritten
    source: str  #: the original source, dedented, decorators included
    first_line: int  #: the file line of the source's first line
    code: CodeType  #: the rewritten code, under the original file name and lines


class _Refused(OSError):
    """A cache folder or entry that is there but is not trusted; the message says why."""


# -- where ------------------------------------------------------------------------------------------


def default_folder() -> Path:
    """The user's cache folder for this library (not created)."""
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
        return Path(base) / "vlm-instrument" / "Cache"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "vlm-instrument"
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "vlm-instrument"


def location() -> Path | None:
    """The cache folder this process uses, or None when the cache is disabled (or there is no home)."""
    configured = os.environ.get(ENVIRONMENT, "").strip()
    if configured.lower() in DISABLED:
        return None
    if configured:
        return Path(os.path.abspath(configured))
    try:
        return default_folder()
    except (RuntimeError, KeyError):  # no home directory to be found
        return None


# -- what is trusted --------------------------------------------------------------------------------


def _owned(status: os.stat_result) -> bool:
    """Whether this user owns the file (always, on Windows: it has no POSIX owner)."""
    return os.name == "nt" or status.st_uid == os.getuid()


def _writer_problem(status: os.stat_result) -> str | None:
    """Why someone other than this user could write the file, or None when no one else can."""
    if not _owned(status):
        return "owned by another user"
    if os.name != "nt" and status.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return "others can write it"
    return None


def _folder_problem(status: os.stat_result) -> str | None:
    """Why the cache folder with this status is not trusted, or None."""
    if not stat.S_ISDIR(status.st_mode):
        return "not a folder"
    return _writer_problem(status)


def _entry_problem(status: os.stat_result) -> str | None:
    """Why the entry file with this status is not read, or None."""
    if not stat.S_ISREG(status.st_mode):
        return "not a regular file"
    if status.st_size > MAX_ENTRY_BYTES:
        return f"larger than {MAX_ENTRY_BYTES} bytes"
    if os.name != "nt" and status.st_nlink != 1:
        return f"{status.st_nlink} hard links to it"
    return _writer_problem(status)


class _Folder:
    """The cache folder, opened once and checked; its entries are opened, created and renamed relative to it.

    On POSIX it is held by a descriptor, opened without following a symlink, so
    the folder checked is the folder used even if its path is swapped meanwhile.
    On Windows (no ``dir_fd``) names are joined to its path. Raises ``OSError``
    (`_Refused` with the reason when it is there but not trusted).
    """

    def __init__(self, path: Path, create: bool = False) -> None:
        if create:
            os.makedirs(path, mode=0o700, exist_ok=True)
        self.path = path
        self.descriptor: int | None = None
        if os.name != "nt":
            self.descriptor = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            problem = _folder_problem(os.lstat(path) if self.descriptor is None else os.fstat(self.descriptor))
            if problem:
                raise _Refused(f"folder {path}: {problem}")
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> _Folder:
        return self

    def __exit__(self, *exception: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the folder. On POSIX it is then unusable (-1: EBADF), never used by its path instead."""
        if self.descriptor is not None and self.descriptor >= 0:
            os.close(self.descriptor)
            self.descriptor = -1

    def open(self, name: str, flags: int) -> int:
        """A descriptor of the file ``name`` in this folder (mode 0600 if ``flags`` create it)."""
        if self.descriptor is None:
            return os.open(self.path / name, flags, 0o600)
        return os.open(name, flags, 0o600, dir_fd=self.descriptor)

    def lstat(self, name: str) -> os.stat_result:
        """The status of ``name`` in this folder, not following a symlink."""
        if self.descriptor is None:
            return os.lstat(self.path / name)
        return os.stat(name, dir_fd=self.descriptor, follow_symlinks=False)

    def names(self) -> list[str]:
        """The names in this folder."""
        return os.listdir(self.path if self.descriptor is None else self.descriptor)

    def replace(self, source: str, destination: str) -> None:
        """Rename ``source`` to ``destination`` within this folder, replacing what is there."""
        if self.descriptor is None:
            os.replace(self.path / source, self.path / destination)
        else:
            os.replace(source, destination, src_dir_fd=self.descriptor, dst_dir_fd=self.descriptor)

    def unlink(self, name: str) -> None:
        if self.descriptor is None:
            os.unlink(self.path / name)
        else:
            os.unlink(name, dir_fd=self.descriptor)


# -- the key ----------------------------------------------------------------------------------------


@cache
def _toolchain() -> tuple[tuple[str, str], ...]:
    """What every entry depends on in this process: Python, libcst, this library and its compiler's source."""
    package = Path(__file__).resolve().parent
    compiler = hashlib.sha256()
    for path in sorted(package.glob("*.py")):
        compiler.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return (
        ("format", str(FORMAT)),
        ("python", f"{sys.implementation.cache_tag} {importlib.util.MAGIC_NUMBER.hex()}"),
        ("libcst", distribution_version("libcst") or "unknown"),
        ("vlm-instrument", distribution_version("vlm-instrument") or "unknown"),
        ("compiler source", compiler.hexdigest()),
    )


_FILE_HASHES: dict[tuple[str, int, int], str] = {}


def _file_hash(filename: str) -> str:
    """SHA-256 of a file's bytes (memoised by path, size and modification time)."""
    status = os.stat(filename)
    memo = (filename, status.st_size, status.st_mtime_ns)
    if memo not in _FILE_HASHES:
        with open(filename, "rb") as file:
            _FILE_HASHES[memo] = hashlib.sha256(file.read()).hexdigest()
    return _FILE_HASHES[memo]


def key(function: FunctionType, sites: tuple) -> tuple[tuple[str, str], ...]:
    """Everything the compiled rewrite of ``function`` (the undecorated target) with ``sites`` depends on.

    Raises ``OSError`` when the function's file cannot be read (then it is not cached).
    """
    code = function.__code__
    return (
        *_toolchain(),
        ("library", library_version(function.__module__ or "")),
        ("file", code.co_filename),
        ("file sha256", _file_hash(code.co_filename)),
        ("function", f"{code.co_qualname} line {code.co_firstlineno} freevars {code.co_freevars!r}"),
        ("sites", repr(sites)),
    )


def entry_path(folder: Path, entry_key: tuple) -> Path:
    """The file of the entry for ``entry_key``: the function's name and a hash of the whole key."""
    digest = hashlib.sha256(repr(entry_key).encode()).hexdigest()[:32]
    qualname = dict(entry_key)["function"].partition(" ")[0]
    return folder / f"{re.sub(r'[^A-Za-z0-9_.]', '_', qualname)}-{digest}.vlmc"


# -- an entry's bytes -------------------------------------------------------------------------------


def _payload(compiled: Compiled) -> tuple:
    rewritten = compiled.rewritten
    sites = tuple((site.served_as, site.callee, site.line, site.label) for site in rewritten.sites)
    return (rewritten.source, sites, compiled.source, compiled.first_line, compiled.code)


def _encode(entry_key: tuple, compiled: Compiled) -> bytes:
    """The bytes of an entry: `MAGIC`, the SHA-256 of the body, the body (the key and the payload, marshalled)."""
    body = marshal.dumps((entry_key, _payload(compiled)))
    return MAGIC + hashlib.sha256(body).digest() + body


def _tuple_of(value: object, kinds: tuple[type, ...] | type) -> bool:
    """Whether ``value`` is a tuple of exactly ``kinds`` (one type for every item, or one type per item)."""
    if type(value) is not tuple:
        return False
    if isinstance(kinds, type):
        return all(type(item) is kinds for item in value)
    return len(value) == len(kinds) and all(type(item) is kind for item, kind in zip(value, kinds))


_SITE_FIELDS = (str, str, int, str)  # name, callee, line, numbered
_PAYLOAD_FIELDS = (str, tuple, str, int, CodeType)  # as `_payload` writes them


def _fits(code: CodeType, original: CodeType) -> bool:
    """Whether ``code`` can stand for ``original``: a function of its name and file, closing over its free
    variables and the site helper only (anything else fails when the function is built, on every load)."""
    return (
        code.co_name == original.co_name
        and code.co_filename == original.co_filename
        and set(code.co_freevars) <= {*original.co_freevars, SITE}
    )


def _unpack(original: CodeType, payload: object) -> Compiled:
    """The entry's payload as a `Compiled`; ``ValueError`` when it is not exactly one (types checked, not converted)."""
    if not _tuple_of(payload, _PAYLOAD_FIELDS):
        raise ValueError("malformed payload")
    source, sites, original_source, first_line, code = payload  # type: ignore[misc]
    if not all(_tuple_of(site, _SITE_FIELDS) for site in sites):
        raise ValueError("malformed sites")
    if not _fits(code, original):
        raise ValueError(f"its code is not a rewrite of {original.co_name} in {original.co_filename}")
    rewritten = Rewritten(source, tuple(Site(*site) for site in sites))
    return Compiled(original, rewritten, original_source, first_line, code)


def _decode(data: bytes, entry_key: tuple, original: CodeType) -> Compiled:
    """The `Compiled` an entry's bytes hold; ``ValueError`` when they are not a whole entry for ``entry_key``."""
    digest, body = data[len(MAGIC) : len(MAGIC) + 32], data[len(MAGIC) + 32 :]
    if not data.startswith(MAGIC) or hashlib.sha256(body).digest() != digest:
        raise ValueError("not a whole entry (truncated, torn or corrupt)")
    stored_key, payload = marshal.loads(body)
    if stored_key != entry_key:
        raise ValueError("recorded for another key")
    return _unpack(original, payload)


# -- read and write ---------------------------------------------------------------------------------


def _read_at_most(descriptor: int, limit: int) -> bytes:
    """The bytes of ``descriptor`` up to its end or ``limit`` bytes, whichever comes first."""
    chunks, size = [], 0
    while size < limit:
        chunk = os.read(descriptor, limit - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _read(folder: _Folder, name: str) -> bytes:
    """The bytes of the entry file ``name`` in ``folder``; ``OSError`` (`_Refused`) when it is not to be read."""
    descriptor = folder.open(name, _READ)
    try:
        problem = _entry_problem(os.fstat(descriptor))
        if problem:
            raise _Refused(problem)
        data = _read_at_most(descriptor, MAX_ENTRY_BYTES + 1)  # one more: a file grown since fstat shows
    finally:
        os.close(descriptor)
    if len(data) > MAX_ENTRY_BYTES:
        raise _Refused(f"larger than {MAX_ENTRY_BYTES} bytes")
    return data


def load(path: Path, entry_key: tuple, original: CodeType) -> Compiled | None:
    """The entry at ``path`` if its folder and file are trusted, it is whole and it holds ``entry_key``; else None."""
    try:
        with _Folder(path.parent) as folder:
            data = _read(folder, path.name)
        return _decode(data, entry_key, original)
    except Exception as error:  # whatever is wrong with it: ignored, rebuilt, replaced
        log.debug("build cache entry %s ignored: %s", path, error)
        return None


def _remove_stale_temporaries(folder: _Folder) -> None:
    """Remove what killed writers left in ``folder``: files named `TEMPORARY`, regular, this user's,
    older than `STALE_TEMPORARY_SECONDS`. Anything else is left alone.

    All of the folder's, not only the entry being written: the entry a killed
    writer meant to write may since have been written by another process.
    """
    now = time.time()
    for name in folder.names():
        if not TEMPORARY.fullmatch(name):
            continue
        try:
            status = folder.lstat(name)
            if stat.S_ISREG(status.st_mode) and _owned(status) and now - status.st_mtime > STALE_TEMPORARY_SECONDS:
                folder.unlink(name)
        except OSError:  # removed meanwhile, by another writer
            pass


def _discard(folder: _Folder, name: str) -> None:
    try:
        folder.unlink(name)
    except OSError:
        pass


def _write_temporary(folder: _Folder, entry: str, data: bytes) -> str:
    """A new file in ``folder`` (mode 0600) holding ``data``, for the entry named ``entry``: its name."""
    name = f".{entry}.{secrets.token_hex(8)}.tmp"
    descriptor = folder.open(name, _CREATE)  # random enough that an existing name is an error, not a retry
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(data)
    except BaseException:
        _discard(folder, name)
        raise
    return name


def store(path: Path, entry_key: tuple, compiled: Compiled) -> None:
    """Write the entry for ``entry_key`` at ``path`` atomically: to a temporary file in its folder (created
    private, checked), then renamed into place.

    Raises ``OSError`` when the folder is not trusted or cannot be written, ``ValueError``
    when the entry cannot be marshalled or would be over `MAX_ENTRY_BYTES`.
    """
    data = _encode(entry_key, compiled)
    if len(data) > MAX_ENTRY_BYTES:
        raise ValueError(f"the entry would be {len(data)} bytes, over {MAX_ENTRY_BYTES}")
    with _Folder(path.parent, create=True) as folder:
        _remove_stale_temporaries(folder)
        temporary = _write_temporary(folder, path.name, data)
        try:
            folder.replace(temporary, path.name)
        except BaseException:
            _discard(folder, temporary)
            raise


def compiled(function: FunctionType, sites: tuple, build: Callable[[], Compiled]) -> Compiled:
    """The compiled rewrite of ``function`` (the undecorated target) with ``sites``.

    From the cache when a valid entry is there, else ``build()``, then written
    to the cache when it can be. Errors of ``build`` propagate; the cache's own never do.
    """
    folder = location()
    if folder is None:
        return build()
    try:
        entry_key = key(function, sites)
    except OSError as error:  # no file to hash: compiled every time
        log.debug("build cache not used for %s: %s", function.__qualname__, error)
        return build()
    path = entry_path(folder, entry_key)
    found = load(path, entry_key, function.__code__)
    if found is not None:
        return found
    result = build()
    try:
        store(path, entry_key, result)
    except (OSError, ValueError) as error:  # not trusted, unwritable, disk full; ValueError: not marshallable
        log.debug("build cache entry for %s not written: %s", function.__qualname__, error)
    return result
