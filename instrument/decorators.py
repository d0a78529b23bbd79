"""Peel the decorators transformers puts on a forward, and rebuild them around its replacement.

A decorated forward is a chain of wrappers, each holding the next function in
a closure cell (``func``). Only decorators named in `KNOWN` are peeled: their
wrapper code objects are read off the decorator factories themselves, so a
wrapper is recognised by identity, not by its name. A closure that looks like
a wrapper but is not known is refused with a reason (`UnknownDecorator`),
leaving everything untouched. ``auto_docstring`` returns the function itself
and needs no peeling.

Rebuilding never edits a wrapper in place: the wrappers belong to the class,
shared by every instance, so each is copied with a fresh cell for the
function it calls.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from types import CellType, CodeType, FunctionType

#: Decorator factories whose wrappers are peeled, and the closure cell holding the wrapped function.
KNOWN: dict[str, str] = {
    "transformers.utils.generic:can_return_tuple": "func",
    "transformers.utils.generic:merge_with_config_defaults": "func",
    # Before 5.2 (and in 4.57): checks and records the outputs; what capture_outputs and
    # merge_with_config_defaults do from 5.2 on.
    "transformers.utils.generic:check_model_inputs": "func",
    "transformers.utils.output_capturing:capture_outputs": "func",
    "transformers.utils.deprecation:deprecate_kwarg": "func",
    "transformers.integrations.accelerate:force_accelerate_hooks": "forward_func",
    # Every GradientCheckpointingLayer subclass's forward is wrapped when the class is made.
    "transformers.modeling_layers:GradientCheckpointingLayer.__init_subclass__": "forward",
    # Where the `kernels` package is installed (a dependency of transformers from 5.25 on), transformers' class
    # decorator use_kernelized_func(...) wraps many attention forwards to route a function to a hub kernel.
    "kernels:use_kernelized_func": "orig_forward",
}


class UnknownDecorator(ValueError):
    """The target is wrapped by a decorator this module does not know how to peel.

    ``wrapped`` is the function the wrapper calls where it can be told (its ``__wrapped__``, as `functools.wraps`
    records it, or the one function its closure holds), else None.
    """

    def __init__(self, message: str, wrapped: FunctionType | None = None):
        super().__init__(message)
        self.wrapped = wrapped


@dataclass(frozen=True)
class Layer:
    """One peeled wrapper: the wrapper function and which closure cell holds what it wraps."""

    wrapper: FunctionType
    cell: int


def _nested_codes(code: CodeType):
    for constant in code.co_consts:
        if isinstance(constant, CodeType):
            yield constant
            yield from _nested_codes(constant)


@cache
def known_wrappers() -> dict[CodeType, str]:
    """The wrapper code objects of every importable decorator in `KNOWN`, with their cell name."""
    wrappers: dict[CodeType, str] = {}
    for path, cell_name in KNOWN.items():
        module_name, _, attribute = path.partition(":")
        try:
            factory = importlib.import_module(module_name)
            for part in attribute.split("."):
                factory = getattr(factory, part)
        except (ImportError, AttributeError):
            continue  # a release without this decorator cannot have wrapped anything with it
        code_of_factory = getattr(getattr(factory, "__func__", factory), "__code__", None)
        if code_of_factory is None:
            continue  # inherited from a builtin (object.__init_subclass__): this release wraps nothing there
        for code in _nested_codes(code_of_factory):
            if cell_name in code.co_freevars:
                wrappers[code] = cell_name
    return wrappers


def _closes_over_a_function(function: FunctionType) -> bool:
    cells = function.__closure__ or ()
    return "<locals>" in function.__code__.co_qualname and any(
        isinstance(getattr(cell, "cell_contents", None), FunctionType) for cell in cells
    )


def wrapped_function(wrapper: FunctionType) -> tuple[str, FunctionType] | None:
    """The closure cell of ``wrapper`` that holds the function it calls, and that function: the one
    `functools.wraps` recorded as ``__wrapped__``, else the only function in its closure; None when neither tells."""
    cells = dict(zip(wrapper.__code__.co_freevars, wrapper.__closure__ or ()))
    functions = {name: cell.cell_contents for name, cell in cells.items()
                 if isinstance(getattr(cell, "cell_contents", None), FunctionType)}
    recorded = getattr(wrapper, "__wrapped__", None)
    named = [name for name, function in functions.items() if function is recorded]
    if named:
        return named[0], recorded
    return next(iter(functions.items())) if len(functions) == 1 else None


def unknown_wrapper(wrapper: FunctionType) -> UnknownDecorator:
    """The error for ``wrapper``, a wrapper no `KNOWN` factory made: where it is, the factory that made it (the
    function its code is nested in, in the module that defines it) and the line to add to `KNOWN`."""
    code = wrapper.__code__
    factory = f"{wrapper.__globals__.get('__name__', '?')}:{code.co_qualname.partition('.<locals>')[0]}"
    inner = wrapped_function(wrapper)
    cell = f"the closure cell {inner[0]!r}" if inner else "the closure cell that holds the function it wraps"
    return UnknownDecorator(
        f"{code.co_qualname} ({code.co_filename}:{code.co_firstlineno}), made by {factory}, is a wrapper this "
        f"compiler does not know, so the forward under it cannot be rewritten; add {factory!r} to "
        f"instrument.decorators.KNOWN with {cell}, or pin the release this library was checked against",
        inner[1] if inner else None,
    )


def peel(function: Callable) -> tuple[FunctionType, tuple[Layer, ...]]:
    """The innermost function under ``function``'s known decorators, and the wrappers, outermost first.

    Raises `UnknownDecorator` for a wrapper it does not know.
    """
    if not isinstance(function, FunctionType):
        raise UnknownDecorator(f"{function!r} is not a Python function")
    layers: list[Layer] = []
    wrappers = known_wrappers()
    while function.__code__ in wrappers:
        index = function.__code__.co_freevars.index(wrappers[function.__code__])
        layers.append(Layer(function, index))
        function = function.__closure__[index].cell_contents
    if _closes_over_a_function(function):
        raise unknown_wrapper(function)
    return function, tuple(layers)


def copy_function(function: FunctionType, code: CodeType, closure: tuple[CellType, ...] | None) -> FunctionType:
    """A new function like ``function`` (same globals dict, defaults, names, doc, attributes) but running ``code``."""
    new = FunctionType(code, function.__globals__, function.__name__, function.__defaults__, closure)
    new.__kwdefaults__ = function.__kwdefaults__
    new.__qualname__ = function.__qualname__
    new.__doc__ = function.__doc__
    new.__module__ = function.__module__
    new.__annotations__ = function.__annotations__
    new.__dict__.update(function.__dict__)
    return new


def rebuild(layers: tuple[Layer, ...], innermost: FunctionType) -> FunctionType:
    """Wrap ``innermost`` in copies of ``layers``' wrappers, inside out."""
    for layer in reversed(layers):
        cells = list(layer.wrapper.__closure__)
        cells[layer.cell] = CellType(innermost)
        innermost = copy_function(layer.wrapper, layer.wrapper.__code__, tuple(cells))
    return innermost
