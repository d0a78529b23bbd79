"""A source-rewriting instrumentation compiler for nnsight.

Three layers, kept apart:

- `rewriter` (with `naming`): pure source to source, libcst in and text out,
  wrapping the calls a rule selects in named sites, named as nnsight's
  ``.source`` names them;
- `compiler` (with `decorators`) and `install`: compile the rewritten source
  under the original file and lines, rebuild the function (closure, globals,
  defaults, decorators) and put it on one module instance;
- `runtime`: the helper each site calls, straight through outside a trace and
  through nnsight's interleaver inside one.

The compiler knows no model family: the rules live in ``rewrites``, and
this package imports neither them, nor the user layer (``envoys``), nor the
maintainer's tools (``maintain``: the snapshot check, the release checks);
its one command, ``python -m instrument.show``, finds the rules through an
entry point (`targets`). Besides the compiler it holds what a build needs at
run time: the release check against the snapshot store's manifest
(`checked`, `store`) and the texts it compares (`listing`). A forward
whose source the store records is compiled from the stored rewrite (`stored`,
with `sources` reading the installed source), and a compiled rule is kept on
disk (`cache`), so libcst is imported only when a forward the store does not
record has to be rewritten. The compiler's names are loaded on first use: reading
which rules a module holds (`installed`) or defining a rule loads neither the
compiler nor libcst.
"""

from importlib import import_module

from .install import InstallError, adopt, install, install_all, installed
from .rewritten import RewriteError, Rewritten, Site
from .rule import Rule, Variant

#: The names loaded on first use, and the module of this package that defines each.
_LAZY = {
    "DriftError": "compiler",
    "Instrumented": "compiler",
    "TargetMissing": "compiler",
    "compile_rule": "compiler",
    "Unchecked": "checked",
    "check": "checked",
    "name_operations": "naming",  # imports libcst
    "source_names": "naming",  # imports libcst
    "rewrite": "rewriter",  # imports libcst
}

__all__ = [
    "DriftError",
    "InstallError",
    "Instrumented",
    "RewriteError",
    "Rewritten",
    "Rule",
    "Site",
    "TargetMissing",
    "Unchecked",
    "Variant",
    "adopt",
    "check",
    "compile_rule",
    "install",
    "install_all",
    "installed",
    "name_operations",
    "rewrite",
    "source_names",
]


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f".{_LAZY[name]}", __name__), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
