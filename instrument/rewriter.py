"""The pure source-to-source rewrite: selected calls become named call sites.

Contract: given the source text of one function and the dotted callees to
expose (``"inputs_embeds.masked_scatter"``), every call of one of those callees
is wrapped in place::

    inputs_embeds.masked_scatter(mask, features)
    ->  __vlm_site__("inputs_embeds_masked_scatter_0", inputs_embeds.masked_scatter, mask, features)

The label is the one nnsight's ``.source`` gives the same call (`naming`).
Nothing else changes: no statement is added, no line break is added or removed,
every other byte is kept, so a rewrite that selects nothing returns the source
byte for byte and every line keeps its number. Python evaluates the callee
before the arguments in both forms, so the order of evaluation is unchanged.
``__vlm_site__`` is a free name the installer binds (`compiler`); a source that
already uses a name with the reserved prefix is refused.

Pure: libcst in, text out. No torch, no nnsight, no imports of the target.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

import libcst as cst
from libcst import matchers as m
from libcst.metadata import MetadataWrapper, PositionProvider

from .naming import dotted_callee, name_operations
from .rewritten import RESERVED_PREFIX, SITE, RewriteError, Rewritten, Site

__all__ = ["RESERVED_PREFIX", "SITE", "RewriteError", "Rewritten", "Site", "rewrite", "wrap_call"]

#: Any name carrying the reserved prefix.
RESERVED_NAME = m.Name(value=m.MatchIfTrue(lambda value: value.startswith(RESERVED_PREFIX)))


def _the_function(module: cst.Module) -> cst.FunctionDef:
    statements = [s for s in module.body if not isinstance(s, cst.EmptyLine)]
    if len(statements) != 1 or not isinstance(statements[0], cst.FunctionDef):
        raise RewriteError("expected the source of exactly one function definition")
    return statements[0]


class _WrapSelectedCalls(cst.CSTTransformer):
    """Replace each selected call (keyed by its original node) with a site call."""

    def __init__(self, labels: dict[int, str]) -> None:
        super().__init__()
        self.labels = labels

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        label = self.labels.get(id(original_node))
        if label is None:
            return updated_node
        return wrap_call(updated_node, label)


def wrap_call(call: cst.Call, label: str) -> cst.Call:
    """``f(args)`` -> ``__vlm_site__("label", f, args)`` on the same lines.

    The whitespace after the original ``(`` (possibly a line break) moves to
    after the callee's comma, so the original arguments keep their layout.
    """
    space = cst.SimpleWhitespace(" ")
    name_argument = cst.Arg(cst.SimpleString(f'"{label}"'), comma=cst.Comma(whitespace_after=space))
    if call.args:
        after_callee = call.whitespace_before_args
        if isinstance(after_callee, cst.SimpleWhitespace) and not after_callee.value:
            after_callee = space
        callee = cst.Arg(call.func, comma=cst.Comma(whitespace_after=after_callee))
        opening = cst.SimpleWhitespace("")
    else:
        callee = cst.Arg(call.func)
        opening = call.whitespace_before_args
    return call.with_changes(
        func=cst.Name(SITE),
        args=(name_argument, callee, *call.args),
        whitespace_before_args=opening,
    )


def rewrite(source: str, callees: Collection[str], serve_as: Mapping[str, str] | None = None) -> Rewritten:
    """Wrap every call of one of ``callees`` (dotted, as written) in ``source`` in a named site.

    ``source`` is one function definition (decorators included, dedented).
    ``serve_as`` renames sites: a call nnsight labels with a key is served
    under the value (a release that numbers the same call differently).
    Raises `RewriteError` if it is not, or if it already uses a reserved name.
    """
    try:
        wrapper = MetadataWrapper(cst.parse_module(source))
    except cst.ParserSyntaxError as error:
        raise RewriteError(f"cannot parse the source: {error}") from error
    function = _the_function(wrapper.module)
    clashes = sorted({n.value for n in m.findall(function, RESERVED_NAME)})
    if clashes:
        raise RewriteError(f"the source already uses the reserved name(s) {', '.join(clashes)}")

    names = name_operations(function)
    positions = wrapper.resolve(PositionProvider)
    selected = [(node, label) for node, label in names.calls if dotted_callee(node) in callees]
    serve_as = serve_as or {}
    sites = tuple(
        Site(serve_as.get(label, label), dotted_callee(node), positions[node].start.line, label)
        for node, label in selected
    )
    rewritten = wrapper.module.visit(_WrapSelectedCalls({id(node): serve_as.get(label, label) for node, label in selected}))
    return Rewritten(rewritten.code, sites)
