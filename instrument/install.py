"""Install a compiled rule on one module instance.

The rewritten forward goes where nnsight looks for an instance's own forward:
before an envoy wraps the module, the instance's ``forward`` attribute (its
``__dict__``), which nnsight's controller then runs as the module's body;
after, the body slot of the controller's state. Never the class, never a
module global: other instances of the class run the class's forward.

Everything that can fail (compiling the rule, checking the instance) happens
before the module is touched, so a failed install leaves it as it was.
"""

from __future__ import annotations

from types import MethodType

import torch
from nnsight.intervention.source import STATE

from .compiler import Instrumented
from .runtime import site_for

#: Instance attribute recording the rules installed on a module, by rule name.
INSTALLED = "__vlm_instrumented__"


class InstallError(RuntimeError):
    """The rule cannot be installed on this module."""


def installed(module: torch.nn.Module) -> dict[str, Instrumented]:
    """The rules installed on ``module``, by name (empty if none)."""
    return module.__dict__.get(INSTALLED, {})


def install(module: torch.nn.Module, instrumented: Instrumented) -> None:
    """Make ``module`` run ``instrumented``'s rewritten forward; idempotent per rule."""
    rule = instrumented.rule
    if rule.owner_name is None:
        raise InstallError(f"rule {rule.name!r} targets a function, not a method; it has no module to install on")
    if rule.name in installed(module):
        return
    owner, target = rule.resolve()
    if getattr(type(module), rule.attribute, None) is not target:
        raise InstallError(
            f"rule {rule.name!r} rewrites {rule.qualname}, but {type(module).__qualname__}.{rule.attribute} "
            "is a different function; install it on an instance whose class uses that method"
        )
    if rule.attribute != "forward":
        raise InstallError(f"rule {rule.name!r}: only a module's forward can be installed, not {rule.attribute!r}")
    state = module.__dict__.get(STATE)
    if state is not None and state.sourced:
        raise InstallError(
            f"{type(module).__qualname__}: nnsight's .source was opened on this module before the rule "
            f"{rule.name!r} was installed; install rules when the model is built, before any trace"
        )
    if "forward" in module.__dict__ and state is None:
        raise InstallError(f"{type(module).__qualname__} already has an instance forward; refusing to replace it")

    forward = instrumented.build(site_for(module))
    if state is None:
        module.__dict__["forward"] = MethodType(forward, module)
    else:
        state.body = state.original = forward
    module.__dict__[INSTALLED] = {**installed(module), rule.name: instrumented}
