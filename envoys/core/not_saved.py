"""A standard value read in a trace and not saved: after the trace its variable says so, instead of being unbound.

nnsight hands back from a trace only the values marked with ``.save()``; a
variable bound to any other is left unbound (``UnboundLocalError`` or
``NameError`` at the first use, naming only the variable). For the values a
`StandardizedTransformer` serves under its standard names, the variable is
bound to a `NotSaved` instead, whose every use raises `NotSavedError` naming
the value and what to write.

Which values were saved is read off nnsight's per-thread record of saves
(``nnsight.tracing.tracer._saves``, the set its own hand-back filters by);
where an nnsight release lacks it, variables are left as nnsight leaves them.
"""

from __future__ import annotations

from typing import Any

import nnsight.tracing.tracer as nnsight_tracer


class NotSavedError(RuntimeError):
    """A variable bound in a trace to a standard value that was not saved was used after the trace."""


class NotSaved:
    """What a variable holds after a trace when it was bound there to a standard value it did not save."""

    __slots__ = ("message",)

    def __init__(self, variable: str, label: str) -> None:
        object.__setattr__(self, "message", (
            f"{variable!r} holds {label}, read in the trace but not saved, so it did not leave the trace; "
            f"save it there: {variable} = <the read>.save(), or nnsight.save(...) for several"
        ))

    def __repr__(self) -> str:
        return f"<NotSaved: {self.message}>"

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise NotSavedError(self.message)

    def __reduce__(self) -> tuple:
        """Pickled with its message (a server's reply carries it to the client, where its uses still say why)."""
        return _not_saved, (self.message,)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # a protocol probed (pickle's, copy's), not a use
            raise AttributeError(name)
        raise NotSavedError(self.message)

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        placeholder = next(a for a in (*args, *(kwargs or {}).values()) if isinstance(a, NotSaved))
        raise NotSavedError(placeholder.message)


def _not_saved(message: str) -> NotSaved:
    """A `NotSaved` with ``message``, as pickle rebuilds one."""
    placeholder = NotSaved.__new__(NotSaved)
    object.__setattr__(placeholder, "message", message)
    return placeholder


for _name in (
    "__str__", "__format__", "__bool__", "__len__", "__iter__", "__contains__", "__getitem__", "__setitem__",
    "__call__", "__index__", "__int__", "__float__", "__array__", "__setattr__", "__eq__", "__ne__", "__lt__",
    "__le__", "__gt__", "__ge__", "__neg__", "__abs__", "__hash__",
    *(f"__{p}{op}__" for op in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and", "or", "xor")
      for p in ("", "r", "i")),
):
    setattr(NotSaved, _name, NotSaved._refuse)


def served_unsaved(variables: dict[str, Any], served: dict[int, tuple[str, Any]]) -> dict[str, NotSaved]:
    """The variables among ``variables`` bound to a value in ``served`` (id -> (label, value)) that was not saved,
    each as the `NotSaved` to bind instead; empty inside a nested trace (it hands everything on) or where
    nnsight keeps no record of saves."""
    saves = getattr(nnsight_tracer, "_saves", None)
    if saves is None or getattr(nnsight_tracer._local, "depth", 1) != 1:
        return {}
    saved = saves()
    return {
        name: NotSaved(name, served[id(value)][0])
        for name, value in variables.items()
        if id(value) in served and id(value) not in saved
    }


def bind_not_saved(mediators: list, served: dict[int, tuple[str, Any]]) -> None:
    """After a trace's run: bind each of its blocks' unsaved standard values to a `NotSaved`, marked to be handed
    back as nnsight hands back a saved value."""
    for mediator in mediators:
        scope = getattr(mediator, "lcls", None)
        if scope is None:
            continue
        for name, placeholder in served_unsaved(scope.writes(), served).items():
            scope[name] = nnsight_tracer.mark(placeholder)
