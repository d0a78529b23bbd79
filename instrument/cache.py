"""The build cache: compiled rewrites kept on disk, as pytest keeps its rewritten test modules.

Compiling a rule means parsing and rewriting the target's source with libcst,
which costs tenths of a second per family and the import of libcst itself. The
result depends only on what `key` lists (the target's file, by content hash,
and where the function sits in it; the rule's sites; this library's version
and the source of its compiler; libcst's, the target library's and Python's
versions), so it is written to disk once and read back by every later process.

An entry is the rewritten source, its sites and operations, the original
source and first line, and the compiled code object (``marshal``, as a pyc
holds it). It is code that will run, so it is treated more strictly than a
pyc:

- the folder must be a directory owned by the user that no one else can write
  (it is created private, mode 0700); otherwise the cache is not used at all;
- an entry file must be owned by the user, carry a SHA-256 of its body that
  matches, and record exactly the key it is loaded for; otherwise it is ignored;
- entries are written to a temporary file in the folder and renamed into
  place (``os.replace``), so a reader sees a whole entry or none, a crash
  leaves at most a stray temporary file, and processes building at once each
  write the same bytes.

Anything that goes wrong (no folder, not writable, not private, an entry
missing, stale, truncated or corrupt) means the rule is compiled in memory, as
if there were no cache, without an error. libcst is imported by the build,
so only on a miss.

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
import stat
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import CodeType, FunctionType

from .rewritten import Rewritten, Site
from .versions import distribution_version, library_version

#: The environment variable that moves the cache folder, or disables the cache (`DISABLED`).
ENVIRONMENT = "VLM_INSTRUMENT_CACHE"

#: Values of `ENVIRONMENT` (any case) that disable the cache.
DISABLED = frozenset({"off", "0", "false", "no"})

#: Bumped whenever the layout of an entry changes.
FORMAT = 2

#: First bytes of every entry file; the SHA-256 of the body follows, then the body.
MAGIC = b"vlm-instrument build cache\n"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Compiled:
    """What depends only on the original code object: the rewrite and its compiled code."""

    original: CodeType  #: held so that its id, the in-memory cache key, is never reused
    rewritten: Rewritten
    source: str  #: the original source, dedented, decorators included
    first_line: int  #: the file line of the source's first line
    code: CodeType  #: the rewritten code, under the original file name and lines


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


def _private(folder: Path) -> bool:
    """Whether ``folder`` is a directory owned by this user that no one else can write."""
    status = os.stat(folder)
    if not stat.S_ISDIR(status.st_mode):
        return False
    if os.name == "nt":
        return True
    return status.st_uid == os.getuid() and not status.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _folder(create: bool) -> Path | None:
    """The cache folder if it can be trusted (created private when ``create``), else None."""
    folder = location()
    if folder is None:
        return None
    try:
        if create:
            os.makedirs(folder, mode=0o700, exist_ok=True)
        if _private(folder):
            return folder
        log.debug("build cache %s ignored: not a folder only this user can write", folder)
    except OSError as error:
        log.debug("build cache %s ignored: %s", folder, error)
    return None


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


# -- read and write ---------------------------------------------------------------------------------


def _payload(compiled: Compiled) -> tuple:
    rewritten = compiled.rewritten
    sites = tuple((site.name, site.callee, site.line, site.numbered) for site in rewritten.sites)
    return (rewritten.source, sites, rewritten.operations, compiled.source, compiled.first_line, compiled.code)


def _unpack(original: CodeType, payload: object) -> Compiled:
    """The entry's payload as a `Compiled`; ``ValueError`` when it is not one."""
    source, sites, operations, original_source, first_line, code = payload  # type: ignore[misc]
    if not (
        isinstance(source, str)
        and isinstance(original_source, str)
        and isinstance(first_line, int)
        and isinstance(code, CodeType)
        and isinstance(operations, tuple)
        and all(isinstance(o, str) for o in operations)
        and isinstance(sites, tuple)
        and all(isinstance(s, tuple) and len(s) == 4 for s in sites)
    ):
        raise ValueError("malformed payload")
    rewritten = Rewritten(source, tuple(Site(str(n), str(c), int(line), str(k)) for n, c, line, k in sites), operations)
    return Compiled(original, rewritten, original_source, first_line, code)


def load(path: Path, entry_key: tuple, original: CodeType) -> Compiled | None:
    """The entry at ``path`` if it is whole, ours and recorded for ``entry_key``; else None."""
    try:
        with open(path, "rb") as file:
            if os.name != "nt" and os.fstat(file.fileno()).st_uid != os.getuid():
                log.debug("build cache entry %s ignored: owned by another user", path)
                return None
            data = file.read()
    except OSError:
        return None
    digest, body = data[len(MAGIC) : len(MAGIC) + 32], data[len(MAGIC) + 32 :]
    if not data.startswith(MAGIC) or hashlib.sha256(body).digest() != digest:
        log.debug("build cache entry %s ignored: not a whole entry", path)
        return None
    try:
        stored_key, payload = marshal.loads(body)
        if stored_key != entry_key:
            log.debug("build cache entry %s ignored: recorded for another key", path)
            return None
        return _unpack(original, payload)
    except (ValueError, TypeError, EOFError) as error:
        log.debug("build cache entry %s ignored: %s", path, error)
        return None


def store(folder: Path, path: Path, entry_key: tuple, compiled: Compiled) -> None:
    """Write the entry atomically: to a temporary file in ``folder``, then renamed to ``path``."""
    body = marshal.dumps((entry_key, _payload(compiled)))
    descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(MAGIC + hashlib.sha256(body).digest() + body)
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise


def compiled(function: FunctionType, sites: tuple, build: Callable[[], Compiled]) -> Compiled:
    """The compiled rewrite of ``function`` (the undecorated target) with ``sites``.

    From the cache when a valid entry is there, else ``build()``, then written
    to the cache when it can be. Errors of ``build`` propagate; the cache's own never do.
    """
    if location() is None:
        return build()
    try:
        entry_key = key(function, sites)
    except OSError as error:  # no file to hash: compiled every time
        log.debug("build cache not used for %s: %s", function.__qualname__, error)
        return build()
    folder = _folder(create=False)
    if folder is not None:
        found = load(entry_path(folder, entry_key), entry_key, function.__code__)
        if found is not None:
            return found
    result = build()
    folder = _folder(create=True)
    if folder is not None:
        try:
            store(folder, entry_path(folder, entry_key), entry_key, result)
        except (OSError, ValueError) as error:  # unwritable, disk full; ValueError: not marshallable
            log.debug("build cache entry for %s not written: %s", function.__qualname__, error)
    return result
