"""What a function's source calls and binds, read on Python's own syntax tree, so rules can be found from a model.

The rules that are found rather than listed (`rewrites.attention`,
`rewrites.image_scatter`, `rewrites.router`, and those of a forward's shape,
`rewrites.found`) ask three questions of a forward: how many times does it
call a dotted callee (``inputs_embeds.masked_scatter``; every callee at once,
`callees`, for a shape), which global function does it bind a local name to
by default (``attention_interface: Callable = eager_attention_forward``), and
which call does it assign a local name from (``router_logits = F.linear(...)``). All are
answered here with `ast`, not libcst, because they are asked at every build,
cached or not, and libcst is imported only when a rule has to be rewritten.
The callee is spelled as `instrument.naming` spells it (attribute chain,
subscripts skipped), so a count here is the number of sites the rewriter will
find; the compiler checks that again when it rewrites (`DriftError` otherwise).

Answers are kept per code object for the life of the process. Pure: no torch,
no nnsight.
"""

from __future__ import annotations

import ast
from collections import Counter
from functools import cache
from types import CodeType, FunctionType

from .decorators import UnknownDecorator, peel
from .sources import NoSource, dedented_source


def defining_class(cls: type, attribute: str = "forward") -> type | None:
    """The class that defines the ``attribute`` instances of ``cls`` use (``cls`` itself or a base), or None."""
    return next((base for base in cls.__mro__ if attribute in base.__dict__), None)


def innermost(function: object) -> FunctionType | None:
    """The undecorated function under ``function``, for the rule finders to read; None when ``function`` is not a
    Python function (a class without a forward of its own).

    A wrapper the compiler does not know is looked through to the function it calls, so that a finder still sees
    the forward and gives it its rule, whose build then fails naming the wrapper (`decorators.peel`): a class is
    never left without a rule because of how it is wrapped. A wrapper that does not tell what it calls raises
    `UnknownDecorator`.
    """
    if not isinstance(function, FunctionType):
        return None
    while True:
        try:
            return peel(function)[0]
        except UnknownDecorator as error:
            if error.wrapped is None:
                raise
            function = error.wrapped


@cache
def _tree(code: CodeType) -> ast.FunctionDef | None:
    """The definition ``code`` was compiled from, or None when its source cannot be read (`sources`)."""
    try:
        definition = ast.parse(dedented_source(code)[0]).body[0]
    except (NoSource, SyntaxError, IndexError):
        return None
    return definition if isinstance(definition, ast.FunctionDef | ast.AsyncFunctionDef) else None


def dotted_name(expression: ast.expr) -> str | None:
    """The callee as `instrument.naming` spells it: ``self.a[0].b`` -> ``"self.a.b"`` (subscripts skipped), the chain
    after the last call or other expression where it is not rooted in a name (``x.to(d).masked_scatter`` ->
    ``"masked_scatter"``); None when nothing names it."""
    parts: list[str] = []
    while True:
        if isinstance(expression, ast.Attribute):
            parts.append(expression.attr)
            expression = expression.value
        elif isinstance(expression, ast.Subscript):
            expression = expression.value
        elif isinstance(expression, ast.Name):
            parts.append(expression.id)
            return ".".join(reversed(parts))
        else:
            return ".".join(reversed(parts)) or None


@cache
def _callees(code: CodeType) -> Counter[str]:
    tree = _tree(code)
    dotted = (dotted_name(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)) if tree is not None else ()
    return Counter(name for name in dotted if name is not None)


def callees(function: FunctionType) -> Counter[str]:
    """Every dotted callee ``function``'s source calls, with how many times (empty when it cannot be read)."""
    return _callees(function.__code__)


def calls(function: FunctionType, callee: str) -> int:
    """How many calls of the dotted ``callee`` ``function``'s source makes (0 when it cannot be read)."""
    return callees(function)[callee]


def bound_default(function: FunctionType, name: str) -> FunctionType | None:
    """The global function ``function``'s first binding of its local ``name`` defaults to, or None.

    That is the function the binding names (``name: T = f``), or the one
    global function passed to the call it binds (``name = lookup(key, f)``,
    as transformers' ``ALL_ATTENTION_FUNCTIONS.get_interface(implementation,
    eager_attention_forward)``); None when the binding names none, or several.
    The names are read once per code object; the globals they name, on every call.
    """
    found = [function.__globals__.get(named) for named in _names_bound(function.__code__, name)]
    functions = [f for f in found if isinstance(f, FunctionType)]
    return functions[0] if len(functions) == 1 else None


@cache
def _names_bound(code: CodeType, name: str) -> tuple[str, ...]:
    """The plain names the first binding of the local ``name`` in ``code``'s source names: its value, or its call's
    arguments; empty when nothing binds ``name`` or the source cannot be read."""
    tree = _tree(code)
    if tree is None:
        return ()
    for node in sorted(ast.walk(tree), key=lambda node: (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))):
        if isinstance(node, ast.AnnAssign):
            targets, value = [node.target], node.value
        elif isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        else:
            continue
        if not any(isinstance(target, ast.Name) and target.id == name for target in targets):
            continue
        named = [value] if isinstance(value, ast.Name) else [*value.args, *(k.value for k in value.keywords)] if isinstance(value, ast.Call) else []
        return tuple(n.id for n in named if isinstance(n, ast.Name))
    return ()


def assigned_call(function: FunctionType, name: str) -> str | None:
    """The dotted callee of the call ``function``'s first assignment to its local ``name`` is (``router_logits =
    F.linear(hidden_states, self.weight)`` -> ``"F.linear"``), or None: where the source cannot be read, nothing
    assigns ``name`` alone (a tuple target does not count), or the value is not a call nnsight names by a callee."""
    tree = _tree(function.__code__)
    if tree is None:
        return None
    for node in sorted(ast.walk(tree), key=lambda node: (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return dotted_name(node.value.func) if isinstance(node.value, ast.Call) else None
    return None


def filled_in_place(function: FunctionType, name: str) -> bool:
    """Whether ``function`` assigns into its local ``name`` by subscript (``router_logits[mask] = ...``, alone or in a
    tuple target): a local filled in place is a buffer, so the call it was first assigned from made no value of it."""
    tree = _tree(function.__code__)
    if tree is None:
        return False
    def parts(target: ast.expr) -> list[ast.expr]:
        if isinstance(target, (ast.Tuple, ast.List)):
            return [part for element in target.elts for part in parts(element)]
        return parts(target.value) if isinstance(target, ast.Starred) else [target]

    targets = (t for node in ast.walk(tree) if isinstance(node, (ast.Assign, ast.AugAssign))
               for t in (node.targets if isinstance(node, ast.Assign) else [node.target]))
    return any(isinstance(part, ast.Subscript) and isinstance(part.value, ast.Name) and part.value.id == name
               for target in targets for part in parts(target))


def label_stem(callee: str) -> str:
    """The name part of nnsight's label for a call of ``callee``: ``inputs_embeds.masked_scatter`` -> ``inputs_embeds_masked_scatter``."""
    return callee.replace(".", "_")
