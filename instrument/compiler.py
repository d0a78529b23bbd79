"""Compile a rule: the target's rewritten forward, ready to bind to a module instance.

`compile_rule` resolves the rule's target, peels its decorators
(`decorators.peel`) after choosing the rule's variant for the installed
release (`versions.for_installed`), reads the innermost function's source from its code
object (`sources`), takes its rewrite from the snapshot store where the store
records one of that very source (`stored`: no libcst), else rewrites it
(`rewriter.rewrite`), checks the sites against the rule
(`DriftError` otherwise) and compiles the result under the original file name
and line numbers, inside a shell function whose parameters are the original's
free variables plus the site helper, so that they compile as free variables
again. The compiled code is cached per (original code object, sites selected), for the life of
the process: building a second model reuses it; and on disk (`cache`), so a later process
reads it back without rewriting (or importing libcst).

`Instrumented.build(site)` makes the function to install: the compiled code
with the original ``__globals__`` (the same dict, so a later patch of the
module is seen), the original closure cells matched by name (``__class__``
included, for zero-argument ``super()``), a new cell holding ``site``, the
original defaults and names, and the peeled decorators rebuilt around it.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass
from types import CellType, CodeType, FunctionType

import instrument  # the package, for its lazy names (the rewriter, which imports libcst)

from . import cache as build_cache
from .cache import Compiled as _Compiled
from .decorators import Layer, UnknownDecorator, copy_function, peel, rebuild
from .rewritten import SITE, RewriteError, Rewritten
from .rule import Rule
from .sources import NoSource, dedented_source
from .store import forward_stem
from .stored import stored_rewrite
from .versions import for_installed, library_version

#: Name of the function the rewritten definition is compiled inside.
SHELL = "__vlm_shell__"


class DriftError(RuntimeError):
    """The installed library's target does not have the sites its rule expects."""


class TargetMissing(DriftError):
    """The installed library has no such target (a model added in a later release)."""


@dataclass(frozen=True)
class Instrumented:
    """A rule compiled against the installed library."""

    rule: Rule
    target: FunctionType  #: the target as its owner holds it (decorated)
    innermost: FunctionType  #: the undecorated original function
    layers: tuple[Layer, ...]  #: its decorators, outermost first
    rewritten: Rewritten  #: the rewritten source and its sites
    original_source: str  #: the original source, dedented, decorators included
    filename: str  #: the file the original was defined in
    first_line: int  #: the file line of the source's first line
    code: CodeType  #: the rewritten code, under the original file name and lines
    drills: dict[str, Instrumented]  #: site label -> the compiled rule of the function it calls

    @property
    def site_names(self) -> tuple[str, ...]:
        return tuple(site.served_as for site in self.rewritten.sites)

    def build(self, site: Callable) -> FunctionType:
        """The rewritten target, decorators and all, calling ``site`` at each site."""
        cells = dict(zip(self.innermost.__code__.co_freevars, self.innermost.__closure__ or ()))
        cells[SITE] = CellType(site)
        closure = tuple(cells[name] for name in self.code.co_freevars)
        return rebuild(self.layers, copy_function(self.innermost, self.code, closure))


def _where(rule: Rule, filename: str | None = None) -> str:
    place = f"{rule.qualname} in {filename or rule.module_name}"
    return f"rule {rule.name!r}: {place} ({library_version(rule.module_name)})"


def _drift(rule: Rule, rewritten: Rewritten, filename: str) -> str | None:
    """What the target has instead of the rule's sites, or None when they match."""
    problems = []
    for callee, expected in rule.sites.items():
        found = tuple(site.label for site in rewritten.sites if site.callee == callee)
        if found != tuple(expected):
            lines = ", ".join(f"{s.label} (line {s.line})" for s in rewritten.sites if s.callee == callee)
            problems.append(
                f"expected call sites {list(expected)} of `{callee}`, found "
                + (f"{list(found)}: {lines}" if found else "none")
            )
    return "; ".join(problems) or None


def _compile(source: str, filename: str, first_line: int, function_name: str, freevars: tuple[str, ...]) -> CodeType:
    """Compile ``source`` (one function definition) as a closure over ``freevars`` plus the site helper.

    The decorators are dropped here, on the ``ast``, so the text keeps its lines;
    the peeled decorators are rebuilt around the result instead.
    """
    tree = ast.parse(source)
    definition = tree.body[0]
    definition.decorator_list = []
    parameters = [ast.arg(arg=name) for name in (*freevars, SITE)]
    shell = ast.FunctionDef(
        name=SHELL,
        args=ast.arguments(posonlyargs=[], args=parameters, kwonlyargs=[], kw_defaults=[], defaults=[]),
        body=[definition, ast.Return(value=ast.Name(id=definition.name, ctx=ast.Load()))],
        decorator_list=[],
    )
    tree.body[0] = ast.copy_location(shell, definition)
    ast.increment_lineno(tree, first_line - 1)
    ast.fix_missing_locations(tree)
    module = compile(tree, filename, "exec", dont_inherit=True)
    shell_code = next(c for c in module.co_consts if isinstance(c, CodeType) and c.co_name == SHELL)
    return next(c for c in shell_code.co_consts if isinstance(c, CodeType) and c.co_name == function_name)


#: Compiled rewrites by (id of the original code object, the rule's sites), for the life of the process.
#: By identity: code objects compare equal across files and closures that differ.
_CACHE: dict[tuple[int, tuple], _Compiled] = {}


def _compile_code(rule: Rule, code: CodeType) -> _Compiled:
    try:
        source, first_line = dedented_source(code)
    except NoSource as error:
        raise DriftError(f"{_where(rule, code.co_filename)}: no source to rewrite ({error})") from error
    rewritten = _stored(rule, source) or _rewrite(rule, source, code)
    problem = _drift(rule, rewritten, code.co_filename)
    if problem:
        raise DriftError(
            f"{_where(rule, f'{code.co_filename}:{first_line}')}: {problem}. "
            "The library's forward changed: update the rule (rewrites/) and its snapshot."
        )
    compiled = _compile(rewritten.source, code.co_filename, first_line, code.co_name, code.co_freevars)
    return _Compiled(code, rewritten, source, first_line, compiled)


def _stored(rule: Rule, source: str) -> Rewritten | None:
    """The snapshot store's rewrite of ``source`` (`stored`), where it has exactly the sites ``rule`` selects."""
    found = stored_rewrite(forward_stem(rule.module_name, rule.qualname), source)
    return found if found is not None and _selects(rule, found) else None


def _selects(rule: Rule, rewritten: Rewritten) -> bool:
    """Whether ``rewritten``'s sites are the ones rewriting its source with ``rule`` gives: every call of the rule's
    callees, labelled as the rule expects, each served under the name the rule gives its label."""
    labels: dict[str, tuple[str, ...]] = {}
    for site in rewritten.sites:
        labels[site.callee] = (*labels.get(site.callee, ()), site.label)
        if site.served_as != rule.serve_as.get(site.label, site.label):
            return False
    return labels == {callee: tuple(expected) for callee, expected in rule.sites.items()}


def _rewrite(rule: Rule, source: str, code: CodeType) -> Rewritten:
    """``source`` rewritten with libcst (imported here, on the first rewrite of a process)."""
    try:
        return instrument.rewrite(source, set(rule.sites), rule.serve_as)
    except RewriteError as error:
        raise DriftError(f"{_where(rule, code.co_filename)}: {error}") from error


def selection(rule: Rule) -> tuple:
    """What a rule selects in its target, as a cache key: its callees with their labels, and the labels it serves
    calls under (a release variant's ``serve_as``)."""
    return (
        tuple(sorted((callee, tuple(labels)) for callee, labels in rule.sites.items())),
        tuple(sorted(rule.serve_as.items())),
    )


def compile_rule(rule: Rule) -> Instrumented:
    """The rule's target rewritten and compiled against the installed library.

    The rewrite and its code are cached per (original code object, sites selected);
    the returned object pairs them with the target as it is now (its closure,
    its decorators). Raises `DriftError` (naming the rule, the target, its
    file, the library version and what was found) when the target is missing,
    cannot be read or rewritten, or does not have exactly the rule's sites.
    """
    rule = for_installed(rule)
    try:
        _, target = rule.resolve()
    except (ImportError, LookupError) as error:
        raise TargetMissing(f"{_where(rule)}: the target is missing: {error}") from error
    if rule.unavailable is not None:
        raise DriftError(f"{_where(rule)}: {rule.unavailable}")
    try:
        innermost, layers = peel(target)
    except UnknownDecorator as error:
        raise DriftError(f"{_where(rule)}: {error}") from error
    key = (id(innermost.__code__), selection(rule))
    if key not in _CACHE:
        _CACHE[key] = build_cache.compiled(innermost, key[1], lambda: _compile_code(rule, innermost.__code__))
    cached = _CACHE[key]
    unknown = set(rule.drill) - {site.served_as for site in cached.rewritten.sites}
    if unknown:
        raise DriftError(f"{_where(rule)}: drill names {sorted(unknown)}, which are not sites of this rule")
    drills = {label: compile_rule(inner) for label, inner in rule.drill.items()}
    return Instrumented(
        rule, target, innermost, layers, cached.rewritten, cached.source,
        innermost.__code__.co_filename, cached.first_line, cached.code, drills,
    )
