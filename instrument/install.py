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

The forward installed runs the rewritten one only while the class still has
the function the rule rewrote (`dispatching`), so a tool that patches the
class's ``forward`` for a while (transformers' exporter) keeps working.

An instrumented module copies and pickles as its class has it, the rules
reinstalled on the copy (`_reduce_instrumented`): ``copy.deepcopy``,
``copy.copy``, ``pickle`` and ``torch.save`` of a model give one whose
modules are rewritten on their own, with sites served for the copy, never
for the module it was copied from.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from types import MethodType
from typing import TYPE_CHECKING, Any

import torch
from nnsight.intervention.source import STATE

import instrument  # the package, for its lazy names: it is still loading when this module is

from .dispatch import dispatching
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


#: Instance attribute holding the forward installed on a module (unbound: `dispatching`'s), for `adopt`.
BODY = "__vlm_instrumented_body__"

#: Instance attribute through which pickle and copy take an instrumented module (`_reduce_instrumented`).
REDUCE = "__reduce_ex__"

#: What the library adds to an instrumented module's ``__dict__`` besides the forward slot it fills.
ADDED = (INSTALLED, BODY, REDUCE)


def _run_in_controller(state: Any, body: Any, target: Any) -> None:
    """Make nnsight's controller run ``body``; a copy or pickle of its state carries ``target``, the class's
    function (nnsight's `State` pickles its ``original``), so the copy is the class's module until reinstalled."""
    state.body = body
    state.original = target


def _apply(module: torch.nn.Module, instrumented: Instrumented) -> None:
    forward = dispatching(instrumented, build_for(module, instrumented))
    state = module.__dict__.get(STATE)
    if state is not None:
        _run_in_controller(state, forward, instrumented.target)
    elif _accelerate_hooked(module):
        module.__dict__["_old_forward"] = MethodType(forward, module)
    else:
        module.__dict__["forward"] = MethodType(forward, module)
    module.__dict__[BODY] = forward
    module.__dict__[INSTALLED] = {**installed(module), instrumented.rule.name: instrumented}
    module.__dict__[REDUCE] = MethodType(_reduce_instrumented, module)


def _reduce_instrumented(module: torch.nn.Module, protocol: int) -> tuple:
    """``module`` as pickle and copy take it: rebuilt as its class builds it (`_rebuilt`) from its state without
    what the library added, its rules reinstalled once that state is set (`_restore`).

    pickle, ``copy.copy`` and ``copy.deepcopy`` all look ``__reduce_ex__`` up on the instance, so this one
    serves them all and the class is left as it is.
    """
    body = module.__dict__.get(BODY)
    controller = module.__dict__.get(STATE)
    if controller is not None and controller.original is body:  # wrapped by nnsight, not adopted since
        _run_in_controller(controller, controller.body, body.__wrapped__)
    plain = {name: value for name, value in module.__getstate__().items() if name not in ADDED}
    for slot in ("forward", "_old_forward"):
        if getattr(plain.get(slot), "__func__", None) is body:
            if slot == "forward":
                del plain[slot]  # the class's forward, as before install
            else:  # accelerate's wrapper calls the class's forward, kept here
                plain[slot] = MethodType(type(module).forward, module)
    rules = tuple(instrumented.rule for instrumented in installed(module).values())
    return _rebuilt, (type(module), rules), plain


def _rebuilt(cls: type, rules: tuple[Rule, ...]) -> torch.nn.Module:
    """An empty ``cls`` whose state, once pickle or copy sets it, gets ``rules`` reinstalled (`_restore`).

    Both set a rebuilt object's state through the ``__setstate__`` they find on it, which here is the
    instance's own, for this one call.
    """
    module = cls.__new__(cls)
    module.__dict__["__setstate__"] = MethodType(functools.partial(_restore, rules), module)
    return module


def _restore(rules: tuple[Rule, ...], module: torch.nn.Module, state: dict) -> None:
    """Set a copied or unpickled module's state as its class does, then reinstall ``rules`` (compiled for this
    process) on it."""
    del module.__dict__["__setstate__"]
    type(module).__setstate__(module, state)
    for rule in rules:
        _apply(module, instrument.compile_rule(rule))


def adopt(root: torch.nn.Module) -> int:
    """After nnsight wrapped ``root``: make each instrumented module's controller run its rewritten forward.

    nnsight's controller takes the ``forward`` slot and runs what it found
    there; for a module accelerate hooks that is the class's forward (it
    re-applies the hook around its body), and for every other the instance
    forward installed, whose copy or pickle should be the class's. This puts
    the installed forward in the body and the class's function in the state's
    ``original``. Returns how many modules it changed.
    """
    changed = 0
    for module in root.modules():
        body, state = module.__dict__.get(BODY), module.__dict__.get(STATE)
        if body is not None and state is not None and (state.body is not body or state.original is body):
            _run_in_controller(state, body, body.__wrapped__)
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
    # the compiler loads with the first install (the package's lazy name), not with `installed`
    compiled = [instrument.compile_rule(rule) for rule in rules if rule.owner_name is not None]
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
