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

The compiler knows no model family: the rules live in ``rewrites``. A
compiled rule is kept on disk (`cache`), so libcst is imported only when one
has to be rewritten: ``rewrite`` is loaded on first use.
"""

from .compiler import DriftError, Instrumented, TargetMissing, compile_rule
from .install import InstallError, adopt, install, install_all, installed
from .rewritten import RewriteError, Rewritten, Site
from .rule import Rule, Variant

__all__ = [
    "DriftError",
    "InstallError",
    "Instrumented",
    "RewriteError",
    "Rewritten",
    "Rule",
    "Site",
    "TargetMissing",
    "Variant",
    "adopt",
    "compile_rule",
    "install",
    "install_all",
    "installed",
    "rewrite",
]


def __getattr__(name: str):
    if name == "rewrite":  # imports libcst: only when asked for
        from .rewriter import rewrite

        return rewrite
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
