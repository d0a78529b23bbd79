"""The source text a function was compiled from, read as `inspect.getsourcelines` reads it, without its module search.

`inspect.getsourcelines` first looks for the module that owns the file, walking
every loaded module on its first call (tens of milliseconds, on every first
build in a process). The function's code object already names its file and
first line (its first decorator's), so this reads the lines there (``linecache``,
refreshed if the file changed on disk, as inspect does) and takes the block
that starts at that line.
"""

from __future__ import annotations

import hashlib
import inspect
import linecache
import textwrap
from types import CodeType


class NoSource(OSError):
    """The function's source cannot be read: its file is gone or holds no definition at its first line."""


def source_lines(code: CodeType) -> tuple[list[str], int]:
    """The lines of the definition ``code`` was compiled from, decorators included, and the file line of the first;
    `NoSource` when they cannot be read."""
    linecache.checkcache(code.co_filename)
    lines = linecache.getlines(code.co_filename)
    first = code.co_firstlineno
    if not lines or len(lines) < first:
        raise NoSource(f"{code.co_filename} has no line {first}: the source of {code.co_name} cannot be read")
    try:
        block = inspect.getblock(lines[first - 1 :])
    except (SyntaxError, IndexError) as error:
        raise NoSource(f"{code.co_filename}:{first}: no definition of {code.co_name} to read ({error})") from None
    return block, first


def dedented_source(code: CodeType) -> tuple[str, int]:
    """The source ``code`` was compiled from, dedented (the text the rewriter reads), and its first file line."""
    lines, first = source_lines(code)
    return textwrap.dedent("".join(lines)), first


def digest(text: str) -> str:
    """The SHA-256 of a text's UTF-8 bytes, in hex: how the snapshot store names an original forward and a stored text."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
