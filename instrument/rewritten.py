"""What a rewrite produces, without the rewriter: the sites and the rewritten text.

Kept apart from `rewriter` (which needs libcst) so that a compiled rule read
back from the build cache (`cache`) is whole without importing libcst.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Prefix reserved for the names the rewrite inserts.
RESERVED_PREFIX = "__vlm_"

#: The free name every site calls; the installer binds it to the runtime helper.
SITE = f"{RESERVED_PREFIX}site__"


class RewriteError(ValueError):
    """The source cannot be rewritten (not one function, or it uses a reserved name)."""


@dataclass(frozen=True)
class Site:
    """One call site inserted by the rewrite."""

    served_as: str  #: the label the site is served under, the same on every release, e.g. ``inputs_embeds_masked_scatter_0``
    callee: str  #: the callee as written, e.g. ``inputs_embeds.masked_scatter``
    line: int  #: 1-based line of the call within the rewritten source
    label: str  #: nnsight's label for the call in this source (``served_as`` unless `rewrite`'s ``serve_as`` renames it)


@dataclass(frozen=True)
class Rewritten:
    """A rewritten function: its text and the sites it now calls."""

    source: str  #: the whole source, rewritten; same number of lines as the input
    sites: tuple[Site, ...]  #: the inserted sites, in nnsight's order
