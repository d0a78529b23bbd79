"""Name every call and assignment of a function the way nnsight's ``.source`` does.

nnsight labels an operation ``{dotted callee}_{n}``: the callee's attribute chain
joined with ``_`` (``self._deepstack_process`` -> ``self__deepstack_process``,
subscripts skipped, ``call`` when nothing names it) and ``n`` a counter per name
that calls and assignments share (``x = f(x)`` binds ``x_n``). The counter runs
in the order nnsight's ``ast.NodeTransformer`` visits the tree: a node's fields
in ``ast`` field order, a call's callee and arguments before the call itself, an
assignment's value before its targets and the binding. That order differs from
source order in a few places (an ``ast.Call`` lists positional arguments before
keywords, an ``ast.Dict`` its keys before its values, an ``ast.IfExp`` its test
first, a ``def`` its defaults after its annotations and its return annotation
after its body), which `children_in_visit_order` reproduces on libcst's tree.

Pure: libcst in, names out. No torch, no nnsight.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import libcst as cst

#: The name nnsight gives a call whose callee has no dotted path (``f()()``).
ANONYMOUS_CALLEE = "call"


def dotted(expression: cst.BaseExpression) -> tuple[list[str], bool]:
    """The attribute chain of ``expression`` and whether it is rooted in a plain name.

    ``self.a.b`` -> ``(['self', 'a', 'b'], True)``; ``x[i].y`` -> ``(['x', 'y'], True)``;
    ``(a @ b).sum`` -> ``(['sum'], False)``.
    """
    parts: list[str] = []
    while True:
        if isinstance(expression, cst.Attribute):
            parts.append(expression.attr.value)
            expression = expression.value
        elif isinstance(expression, cst.Subscript):
            expression = expression.value
        elif isinstance(expression, cst.Name):
            parts.append(expression.value)
            return parts[::-1], True
        else:
            return parts[::-1], False


def callee_name(call: cst.Call) -> str:
    """The name part of a call's label: ``inputs_embeds.masked_scatter(...)`` -> ``inputs_embeds_masked_scatter``."""
    parts, _ = dotted(call.func)
    return "_".join(parts) or ANONYMOUS_CALLEE


def dotted_callee(call: cst.Call) -> str:
    """The callee as written, dots kept: ``inputs_embeds.masked_scatter``."""
    parts, _ = dotted(call.func)
    return ".".join(parts) or ANONYMOUS_CALLEE


def is_zero_argument_super(call: cst.Call) -> bool:
    """``super()``: nnsight leaves it unnumbered (it reads ``__class__`` off its caller's frame)."""
    return isinstance(call.func, cst.Name) and call.func.value == "super" and not call.args


def _positional_then_keywords(arguments: Sequence[cst.Arg]) -> list[cst.Arg]:
    """``ast.Call`` keeps positional and ``*`` arguments in ``args`` and named and ``**`` ones in ``keywords``."""
    positional = [a for a in arguments if a.keyword is None and a.star != "**"]
    keywords = [a for a in arguments if a.keyword is not None or a.star == "**"]
    return positional + keywords


def _parameters_in_ast_order(parameters: cst.Parameters) -> list[cst.CSTNode]:
    """``ast.arguments`` field order: annotations of posonly, regular, ``*``, kw-only
    parameters, then kw-only defaults, ``**`` annotation, then positional defaults."""
    nodes: list[cst.CSTNode] = []
    positional = [*parameters.posonly_params, *parameters.params]
    star = parameters.star_arg if isinstance(parameters.star_arg, cst.Param) else None
    for parameter in positional:
        if parameter.annotation is not None:
            nodes.append(parameter.annotation)
    if star is not None and star.annotation is not None:
        nodes.append(star.annotation)
    for parameter in parameters.kwonly_params:
        if parameter.annotation is not None:
            nodes.append(parameter.annotation)
    nodes.extend(p.default for p in parameters.kwonly_params if p.default is not None)
    kwarg = parameters.star_kwarg
    if kwarg is not None and kwarg.annotation is not None:
        nodes.append(kwarg.annotation)
    nodes.extend(p.default for p in positional if p.default is not None)
    return nodes


def children_in_visit_order(node: cst.CSTNode) -> list[cst.CSTNode]:
    """``node``'s children in the order ``ast.NodeTransformer.generic_visit`` reaches them."""
    if isinstance(node, cst.Call):
        return [node.func, *(a.value for a in _positional_then_keywords(node.args))]
    if isinstance(node, cst.Dict):
        keys = [e.key for e in node.elements if isinstance(e, cst.DictElement)]
        return [*keys, *(e.value for e in node.elements)]
    if isinstance(node, cst.IfExp):
        return [node.test, node.body, node.orelse]
    if isinstance(node, cst.FunctionDef):
        returns = [node.returns] if node.returns is not None else []
        return [*_parameters_in_ast_order(node.params), node.body, *node.decorators, *returns]
    if isinstance(node, cst.Lambda):
        return [*_parameters_in_ast_order(node.params), node.body]
    if isinstance(node, cst.ClassDef):
        return [*(a.value for a in _positional_then_keywords([*node.bases, *node.keywords])), node.body, *node.decorators]
    return list(node.children)


@dataclass
class Names:
    """Every label nnsight would give in one function, and which call got which."""

    #: each call node of the tree that was named, with its label, in nnsight's order
    calls: list[tuple[cst.Call, str]] = field(default_factory=list)
    #: every label (calls and assignments) in nnsight's order
    order: list[str] = field(default_factory=list)
    #: each value bound to a name by an assignment that nnsight labels, with the binding's label, in nnsight's order
    bindings: list[tuple[cst.BaseExpression, str]] = field(default_factory=list)


class _Namer:
    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.names = Names()

    def number(self, name: str) -> str:
        occurrence = self.counts.get(name, 0)
        self.counts[name] = occurrence + 1
        label = f"{name}_{occurrence}"
        self.names.order.append(label)
        return label

    def visit(self, node: cst.CSTNode) -> None:
        if isinstance(node, cst.Call):
            if is_zero_argument_super(node):
                return
            for child in children_in_visit_order(node):
                self.visit(child)
            self.names.calls.append((node, self.number(callee_name(node))))
        elif isinstance(node, cst.Assign):
            self.visit(node.value)
            for target in node.targets:
                self.visit(target.target)
            if len(node.targets) == 1:  # `a = b = v` binds no op
                self.bind(node.targets[0].target, node.value)
        elif isinstance(node, cst.AnnAssign):
            if node.value is not None:  # the annotation is not evaluated at run time
                self.visit(node.value)
                self.bind(node.target, node.value)
        else:
            for child in children_in_visit_order(node):
                self.visit(child)

    def bind(self, target: cst.BaseExpression, value: cst.BaseExpression) -> None:
        """Number an assignment's binding: one per name of ``a, b = e1, e2``, none for other unpacking."""
        sequences = (cst.Tuple, cst.List)
        if isinstance(target, sequences) and isinstance(value, sequences):
            elements = [*target.elements, *value.elements]
            if len(target.elements) == len(value.elements) and not any(
                isinstance(e, cst.StarredElement) for e in elements
            ):
                for t, v in zip(target.elements, value.elements):
                    self.bind(t.value, v.value)
            return
        parts, rooted = dotted(target)
        if rooted:
            self.names.bindings.append((value, self.number("_".join(parts))))


def name_operations(function: cst.FunctionDef) -> Names:
    """Label every operation of ``function`` as nnsight's ``.source`` does.

    The function's own decorators are not operations (nnsight peels them before
    it instruments), so they are skipped; everything else is visited.
    """
    namer = _Namer()
    namer.visit(_undecorated_view(function))
    return namer.names


def source_names(source: str) -> Names:
    """Every label nnsight's ``.source`` gives in ``source``, the text of one function definition (dedented)."""
    function = next(node for node in cst.parse_module(source).body if isinstance(node, cst.FunctionDef))
    return name_operations(function)


def _undecorated_view(function: cst.FunctionDef) -> cst.CSTNode:
    """The function's own node minus its decorators, keeping child identities.

    ``with_changes`` would copy the node but not its children, so labels keyed
    on child identity still match the original tree; the function node itself
    is never a call, so its own identity does not matter.
    """
    return function.with_changes(decorators=())

