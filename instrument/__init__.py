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

The compiler knows no model family: the rules live in ``rewrites``.
"""

from .compiler import DriftError, Instrumented, TargetMissing, compile_rule
from .install import InstallError, install, install_all, installed
from .rewriter import RewriteError, Rewritten, Site, rewrite
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
    "compile_rule",
    "install",
    "install_all",
    "installed",
    "rewrite",
]
