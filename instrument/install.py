"""Install a compiled rule on one module instance.

The rewritten forward goes where nnsight looks for an instance's own forward:
before an envoy wraps the module, the instance's ``forward`` attribute (its
``__dict__``), which nnsight's controller then runs as the module's body;
after, the body slot of the controller's state. Never the class, never a
module global: other instances of the class run the class's forward.

Everything that can fail (compiling the rule, checking the instance) happens
before the module is touched, so a failed install leaves it as it was.

A module that accelerate has hooked (``device_map=``: ``_hf_hook``, its own
forward kept in ``_old_forward``, a wrapper in ``forward``) gets the rewritten
forward in ``_old_forward``, so accelerate's wrapper runs it between its
``pre_forward`` (weights loaded, inputs moved) and ``post_forward``. nnsight's
controller, once it wraps such a module, runs the class's forward inside the
hook instead; `adopt` (called after wrapping) makes it run the rewritten one.
"""

from __future__ import annotations

from collections.abc import Iterable
from types import MethodType
from typing import TYPE_CHECKING

import torch
from nnsight.intervention.source import STATE

from .runtime import site_for

if TYPE_CHECKING:
    from .compiler import Instrumented
    from .rule import Rule

#: Instance attribute recording the rules installed on a module, by rule name.
INSTALLED = "__vlm_instrumented__"


class InstallError(RuntimeError):
    """The rule cannot be installed on this module."""


def installed(module: torch.nn.Module) -> dict[str, Instrumented]:
    """The rules installed on ``module``, by name (empty if none)."""
    return module.__dict__.get(INSTALLED, {})


def _check(module: torch.nn.Module, instrumented: Instrumented) -> bool:
    """Raise `InstallError` if the rule cannot go on ``module``; False if it is already there."""
    rule = instrumented.rule
    if rule.owner_name is None or rule.attribute != "forward":
        raise InstallError(f"rule {rule.name!r} targets {rule.qualname}, not a module's forward; it cannot be installed")
    if rule.name in installed(module):
        return False
    if type(module).forward is not instrumented.target:
        raise InstallError(
            f"rule {rule.name!r} rewrites {rule.qualname}, but {type(module).__qualname__}.forward "
            "is a different function; install it on an instance whose class uses that method"
        )
    state = module.__dict__.get(STATE)
    if state is not None and state.sourced:
        raise InstallError(
            f"{type(module).__qualname__}: nnsight's .source was opened on this module before the rule "
            f"{rule.name!r} was installed; install rules when the model is built, before any trace"
        )
    if state is None and "forward" in module.__dict__ and not _accelerate_hooked(module):
        raise InstallError(f"{type(module).__qualname__} already has an instance forward; refusing to replace it")
    return True


def _accelerate_hooked(module: torch.nn.Module) -> bool:
    """Whether accelerate's hook wraps ``module``'s own class forward (kept in ``_old_forward``)."""
    kept = module.__dict__.get("_old_forward")
    return "_hf_hook" in module.__dict__ and getattr(kept, "__func__", None) is type(module).forward


def build_for(module: torch.nn.Module, instrumented: Instrumented, prefix: str = "source"):
    """``instrumented``'s function with sites served for ``module`` under ``prefix``, drills included."""
    substitutes = {
        label: (inner.target, build_for(module, inner, f"{prefix}.{label}.source"))
        for label, inner in instrumented.drills.items()
    }
    return instrumented.build(site_for(module, prefix, substitutes))


#: Instance attribute holding the rewritten forward (unbound) of a module accelerate hooks, for `adopt`.
BODY = "__vlm_instrumented_body__"


def _apply(module: torch.nn.Module, instrumented: Instrumented) -> None:
    forward = build_for(module, instrumented)
    state = module.__dict__.get(STATE)
    if state is not None:
        state.body = state.original = forward
    elif _accelerate_hooked(module):
        module.__dict__["_old_forward"] = MethodType(forward, module)
        module.__dict__[BODY] = forward
    else:
        module.__dict__["forward"] = MethodType(forward, module)
    module.__dict__[INSTALLED] = {**installed(module), instrumented.rule.name: instrumented}


def adopt(root: torch.nn.Module) -> int:
    """After nnsight wrapped ``root``: make each accelerate-hooked module's controller run its rewritten forward.

    nnsight runs the class's forward inside accelerate's hook on such a module
    (its controller takes the ``forward`` slot and re-applies the hook around its
    body); this puts the rewritten forward in that body. Returns how many modules
    it changed.
    """
    changed = 0
    for module in root.modules():
        body, state = module.__dict__.get(BODY), module.__dict__.get(STATE)
        if body is not None and state is not None and state.body is not body:
            state.body = state.original = body
            changed += 1
    return changed


def install(module: torch.nn.Module, instrumented: Instrumented) -> None:
    """Make ``module`` run ``instrumented``'s rewritten forward; a no-op if that rule is already on it."""
    if _check(module, instrumented):
        _apply(module, instrumented)


def install_all(root: torch.nn.Module, rules: Iterable[Rule]) -> dict[str, tuple[str, ...]]:
    """Install each rule on every module under ``root`` (``root`` included) whose class runs its target.

    All or nothing: every rule is compiled and every module checked before the
    first one is changed. Returns, per rule name, the paths it was installed at
    (``""`` for the root). Raises `DriftError` or `InstallError`.
    """
    from .compiler import compile_rule  # the compiler loads with the first install, not with `installed`

    compiled = [compile_rule(rule) for rule in rules if rule.owner_name is not None]
    plan = [
        (path, module, instrumented)
        for path, module in root.named_modules(remove_duplicate=True)
        for instrumented in compiled
        if type(module).forward is instrumented.target
    ]
    plan = [(path, module, instrumented) for path, module, instrumented in plan if _check(module, instrumented)]
    for _, module, instrumented in plan:
        _apply(module, instrumented)
    return {i.rule.name: tuple(path for path, _, j in plan if j is i) for i in compiled}
