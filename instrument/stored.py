"""A forward's rewrite read back from the snapshot store, so that a first build imports no libcst.

The store (`store`) holds every rewritten forward as text (`listing.snapshot`:
comment lines naming the rule and its sites, a blank line, the rewritten
source), and records, per stored ``.py`` text, the SHA-256 of the original
source it was rewritten from and of the text itself (``sources.json``, written
by ``python -m maintain.snapshot --update``, read only by a build the build
cache misses). When the installed forward's source has the digest a stored
text records, that text is the rewrite the rewriter would make of it with the
same sites, and `stored_rewrite` gives it back as a `Rewritten`: the source after the header, and its sites, read off
Python's own syntax tree of it (each ``__vlm_site__("label", callee, ...)``: its
label, the callee as the rewriter spells it, its line) in the order of the
header's ``# sites:`` line, which also gives nnsight's label where the site is
served under another.

The store is code the package ships, trusted as the build cache is (`cache`):
a text is used only when its bytes have the digest ``sources.json`` records, and
whatever does not read as expected (no record, another digest, a header or a
site call of another shape) gives None, and the compiler rewrites the source
with libcst as if the store held nothing. The compiler then checks the sites
against the rule either way.
"""

from __future__ import annotations

import ast
import logging
from functools import cache
from pathlib import Path

from .calls import dotted_name
from .rewritten import SITE, Rewritten, Site
from .sources import digest
from .store import REPOSITORY_STORE, Recorded, StoreError, read_sources

#: The snapshot store rewrites are read from (a test may point it elsewhere).
STORE = REPOSITORY_STORE

#: The header line of a stored text that lists its sites (`listing` writes it).
SITES_LINE = "# sites: "

#: How a site served under another name than nnsight's label says so on the sites line.
NUMBERED = " (numbered "

log = logging.getLogger(__name__)


@cache
def recorded(root: Path) -> Recorded:
    """The manifest of the store at ``root``, read once per process (`forget` clears it); `StoreError` when it
    cannot be read."""
    return Recorded.load(root)


@cache
def sources(root: Path) -> dict[str, dict[str, str]]:
    """The store's digests (`store.read_sources`), read once per process (`forget` clears them)."""
    return read_sources(root)


def forget() -> None:
    """Forget the manifests and digests read: the next build reads them again."""
    recorded.cache_clear()
    sources.cache_clear()


def rewrites_of(root: Path, stem: str, original: str) -> list[str]:
    """The stored texts (paths relative to the store at ``root``) of forward ``stem`` recorded as rewritten from the
    original source with digest ``original``."""
    records = sources(root)
    paths = dict.fromkeys(recorded(root).changes.get(stem, {}).values())
    return [path for path in paths if records.get(path, {}).get("original") == original]


def site_labels(text: str) -> dict[str, str]:
    """A stored text's sites, from its header's ``# sites:`` line: served name -> nnsight's label, in the line's order;
    ``ValueError`` when it has none.
    ``"attention_interface_1 (numbered attention_interface_2)"`` is served as the first and labelled the second."""
    for line in text.splitlines():
        if line.startswith(SITES_LINE):
            labels = {}
            for entry in filter(None, line.removeprefix(SITES_LINE).split(", ")):
                served, _, numbered = entry.partition(NUMBERED)
                labels[served.strip()] = numbered.rstrip(")").strip() or served.strip()
            return labels
    raise ValueError("no sites line")


def _site_calls(source: str) -> dict[str, tuple[str, int]]:
    """Each site call of ``source``: its served name -> (the callee as the rewriter spells it, its line)."""
    found = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == SITE:
            if len(node.args) < 2 or not isinstance(node.args[0], ast.Constant) or not isinstance(node.args[0].value, str):
                raise ValueError(f"a site call of another shape at line {node.lineno}")
            served, callee = node.args[0].value, dotted_name(node.args[1])
            if callee is None or served in found:
                raise ValueError(f"site {served!r} at line {node.lineno}: no callee, or named twice")
            found[served] = (callee, node.lineno)
    return found


def read_rewrite(text: str) -> Rewritten:
    """A stored text as the `Rewritten` it records; ``ValueError`` when it does not read as one."""
    header, separator, source = text.partition("\n\n")
    if not separator or not all(line.startswith("#") for line in header.splitlines()):
        raise ValueError("no header of comment lines and a blank line")
    labels, calls = site_labels(header), _site_calls(source)
    if set(labels) != set(calls):
        raise ValueError(f"the sites line names {sorted(labels)}, the source calls {sorted(calls)}")
    return Rewritten(source, tuple(Site(served, *calls[served], label) for served, label in labels.items()))


def stored_rewrite(stem: str, source: str, root: Path | None = None) -> Rewritten | None:
    """The stored rewrite of the forward ``stem`` whose original source is ``source``, or None when the store at
    ``root`` (`STORE`) holds none it can vouch for (see the module docstring). Never raises."""
    root = STORE if root is None else root
    try:
        candidates = rewrites_of(root, stem, digest(source))
    except StoreError as error:
        log.debug("snapshot store not read: %s", error)
        return None
    for path in candidates:
        try:
            data = (root / path).read_bytes().decode("utf-8")
            if digest(data) != sources(root)[path]["text"]:
                raise ValueError("its text is not the one sources.json records")
            return read_rewrite(data)
        except (OSError, UnicodeDecodeError, SyntaxError, ValueError) as error:
            log.debug("stored rewrite %s not used: %s", path, error)
    return None
