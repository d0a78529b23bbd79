"""Standard values: nnsight eproperties that know their location, their part of it, and when they are unavailable.

An `EProperty` is an nnsight ``eproperty`` with three additions:

- its location may be computed from the envoy (``key=lambda envoy: ...``,
  an absolute location such as ``model.model.source.inputs_embeds_masked_scatter_0.input``),
  or is ``{envoy.path}.{key}`` as usual;
- ``select`` picks the part of the served value the user reads (an argument
  of the call, an item of a returned tuple, a field of a model output), and
  puts a written value back in its place (a `Selector`, or a function of the
  envoy returning one, where the part depends on the model: which argument of
  the host's scatter call holds the image features);
- ``unavailable`` says why the value cannot be had on this envoy (a reason
  string, or a function of the envoy returning one or None). Reading or
  writing an unavailable value raises `Unavailable` with the reason before
  anything is requested from the model, and `support` lists the reasons.

A write must keep the shape, dtype and device of the value it replaces;
another raises (``ValueError`` or ``TypeError``) naming both, before it
reaches the model. A read-only value (``read_only=``) refuses assignment and,
read as a tensor, is handed out as a `ReadOnly` tensor whose in-place edits
raise, since editing it would change nothing the model uses.

Gradients: a value that is the model's own tensor gets its ``.grad`` from
nnsight as it is. A value read as a view of it (reshaped, transposed, with a
leading 1) is handed out as a `Served` tensor, whose ``.grad`` inside ``with
loss.backward():`` is the model tensor's gradient in the value's layout; the
view is also swapped back into the model through its ``inverse`` when the
worker moves on, as nnsight's own ``eproperty.transform`` does, so an edit to
it reaches the model even where the view is a copy. A value the model
computes nothing from (its envoy's ``gradient_reason(name)`` says why) is a
`Served` whose ``.grad`` raises `Unavailable` with the reason.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from nnsight.intervention.eproperty import WriteBack, eproperty
from nnsight.intervention.interleaver import Mediator, OutOfOrderError

from .backends import served_location
from .passes import passes_before, pinned
from .paths import standard_path


class Unavailable(Exception):
    """A standard value this model does not have, with the reason; raised before anything runs."""


# -- selectors: which part of a served value a standard value is -------------------------------


class Selector:
    """Reads a part of a served value and puts a new part back (returning the value to swap in)."""

    def get(self, raw: Any) -> Any:
        raise NotImplementedError

    def put(self, raw: Any, part: Any) -> Any:
        raise NotImplementedError


@dataclass(frozen=True)
class Argument(Selector):
    """An argument of a call served as ``(args, kwargs)``: positional ``index``, else keyword ``name`` (None when not passed)."""

    index: int
    name: str

    def get(self, raw: Any) -> Any:
        args, kwargs = raw
        return args[self.index] if len(args) > self.index else kwargs.get(self.name)

    def put(self, raw: Any, part: Any) -> Any:
        args, kwargs = raw
        if len(args) > self.index:
            return (*args[: self.index], part, *args[self.index + 1 :]), kwargs
        return args, {**kwargs, self.name: part}


@dataclass(frozen=True)
class First(Selector):
    """The value itself, or its first item when it is a tuple (a module returning ``(output, weights)``)."""

    def get(self, raw: Any) -> Any:
        return raw[0] if isinstance(raw, tuple) else raw

    def put(self, raw: Any, part: Any) -> Any:
        return (part, *raw[1:]) if isinstance(raw, tuple) else part


@dataclass(frozen=True)
class Item(Selector):
    """Item ``index`` of a returned tuple (a kernel returning ``(output, state)``)."""

    index: int

    def get(self, raw: Any) -> Any:
        return raw[self.index]

    def put(self, raw: Any, part: Any) -> Any:
        return (*raw[: self.index], part, *raw[self.index + 1 :])


@dataclass(frozen=True)
class Field(Selector):
    """A field of a transformers ``ModelOutput`` (``logits``, ``last_hidden_state``)."""

    name: str

    def get(self, raw: Any) -> Any:
        return getattr(raw, self.name)

    def put(self, raw: Any, part: Any) -> Any:
        raw[self.name] = part
        return raw


Reason = str | Callable[[Any], "str | None"] | None
#: A selector, or a function of the envoy returning one.
Select = Selector | Callable[[Any], Selector] | None


class EProperty(eproperty):
    """A standard value on an envoy (see the module docstring), declared with `value` (which says what each argument
    is) or `pinning.pinned_value`; a subclass that locates or pins its own way is declared through `value`'s ``kind``.

    ``key``: the location's suffix under the envoy's path, or a function of the
    envoy returning the whole location. ``select``: a `Selector` (or a function
    of the envoy returning one), or None for the whole served value. ``unavailable``: a reason, or a function of the
    envoy returning one or None. ``read_only``: a reason, which makes assignment raise.
    ``every_step``: served on every step of generate even on an envoy whose values
    are computed on the first step only (its ``first_step_only`` reason).
    ``prepare``: run inside the trace before the value is requested (a drill
    that has to be asked for first).
    The decorated stub maps the selected part to what the user reads (its
    return annotation is the layout a repr shows); ``inverse``, when given,
    maps a written value back (``inverse(envoy, written, current_part)``).
    """

    def __init__(
        self,
        key: str | Callable[[Any], str] | None = None,
        description: str | None = None,
        unavailable: Reason = None,
        select: Select = None,
        read_only: str | None = None,
        prepare: Callable[[Any], None] | None = None,
        every_step: bool = False,
    ) -> None:
        super().__init__(key=key if isinstance(key, str) else None, description=description)
        self.locate = key if callable(key) else None
        self.unavailable = unavailable
        self.select = select
        self.read_only = read_only
        self.prepare = prepare
        self.every_step = every_step
        self._inverse: Callable[[Any, Any, Any], Any] | None = None

    def inverse(self, func: Callable[[Any, Any, Any], Any]) -> EProperty:
        """Register the map from a written (user-layout) value back to the served part's layout."""
        self._inverse = func
        return self

    def _location(self, obj: Any) -> str:
        location = self.locate(obj) if self.locate is not None else super()._location(obj)
        return served_location(obj, location)  # nnsight's label on a server's stock forward (`backends`)

    def selector(self, obj: Any) -> Selector | None:
        """The part of the served value this value is on ``obj``; None for all of it."""
        return self.select if self.select is None or isinstance(self.select, Selector) else self.select(obj)

    def reason(self, obj: Any) -> str | None:
        """Why this value is unavailable on ``obj``, or None."""
        if self.unavailable is None or isinstance(self.unavailable, str):
            return self.unavailable
        return self.unavailable(obj)

    def check(self, obj: Any, writing: bool = False) -> None:
        """Refuse, before anything is requested: `Unavailable` with the reason, then, outside a trace, a
        ``ValueError`` saying the value is read (or written) inside one."""
        reason = self.reason(obj)
        if reason is not None:
            raise Unavailable(f"{_label(obj, self.name)} is unavailable: {reason}")
        try:
            Mediator.current(self.name)  # the worker running the trace's code; none outside a trace
        except ValueError:
            raise ValueError(outside_trace(_label(obj, self.name), writing)) from None

    def handed_out(self, obj: Any, value: Any) -> Any:
        """``value``, recorded as this value's read on the model it came from (`envoys.core.not_saved`)."""
        record = getattr(getattr(obj, "root", None), "record_served", None)
        if record is not None:
            record(_label(obj, self.name), value)
        return value

    def check_step(self, obj: Any, location: str) -> None:
        """Inside a trace, before any pin of its own: refuse a value computed on generate's first step only when
        the worker is at a later one (the step ``tracer.iter`` pinned, else the root forwards it has seen)."""
        first_step_only = getattr(obj, "first_step_only", None)
        if first_step_only is None or self.every_step:
            return
        mediator = Mediator.current(location)
        step = mediator.iteration
        if step is None:  # relaxed after the step's first value: the forward running is the step
            step = max(mediator.occurrence(f"{obj.root.path}.input") - 1, 0)
        if step > 0:
            raise Unavailable(f"{_label(obj, self.name)} is not computed on step {step}: {first_step_only}")

    def _request(self, obj: Any, location: str) -> Any:
        with explained(obj, self.name):
            return Mediator.value(location)

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        if obj is None:
            return self
        self.check(obj)
        location = self._location(obj)
        self.check_step(obj, location)
        with self._on_run(obj, location):
            return self.handed_out(obj, self._read(obj, location))

    def __set__(self, obj: Any, value: Any) -> None:
        self.check(obj, writing=True)
        location = self._location(obj)
        self.check_step(obj, location)
        with self._on_run(obj, location):
            self._write(obj, value, location)

    def _on_run(self, obj: Any, location: str) -> AbstractContextManager:
        """Nothing, unless the read is inside `envoys.core.passes.on_pass` for this value's tower: then the pin to
        that later run of it (an `OutOfOrderError` naming the value where the forward already passed it)."""
        passes = passes_before(location)
        return nullcontext() if not passes else later_run(obj, self.name, location, passes)

    # The read and the write after the check, at a location computed once (a subclass that pins
    # the request checks and locates first, then calls these inside its pin).

    def _read(self, obj: Any, location: str) -> Any:
        if self.prepare is not None:
            self.prepare(obj)
        mediator = Mediator.current(location)
        occurrence = mediator.wanted(location)
        waiting = mediator.transform
        if waiting is not None and waiting.key == (self, location, occurrence):
            return waiting.view  # read again before it went back: the same view, so both edits are one
        raw = self._request(obj, location)
        select = self.selector(obj)
        part = select.get(raw) if select is not None else raw
        shown = self._preprocess(obj, part) if self._preprocess is not None else part
        if self.read_only is not None and isinstance(shown, torch.Tensor):
            no_gradient = getattr(obj, "gradient_reason", lambda name: None)(self.name)
            unused = None if no_gradient is None else f"{_label(obj, self.name)} has no gradient: {no_gradient}"
            return read_only(shown, self._read_only_message(obj), unused)
        if not isinstance(shown, torch.Tensor) or not isinstance(part, torch.Tensor):
            return shown
        no_gradient = getattr(obj, "gradient_reason", lambda name: None)(self.name)
        view = shown is not part
        if no_gradient is None and not view:
            return shown  # the model's own tensor: nnsight serves its .grad as it is
        copied = view and shown.untyped_storage().data_ptr() != part.untyped_storage().data_ptr()
        shown = served(shown, part, obj, self, no_gradient)
        if copied and self._inverse is not None:
            # The model goes on with the inverse of the copy the user holds, swapped in when the worker
            # next moves on (nnsight's eproperty.transform), so an edit to the copy is the model's. A view
            # that shares the model's memory needs none: an edit to it is the model's already, and a barrier
            # between the edit and the next request (which moves the worker on without a swap) loses nothing.
            back = partial(self._write_back, obj, shown, raw, part, select)
            mediator.transform = WriteBack(back, shown, self, location, occurrence)
        return shown

    def _read_only_message(self, obj: Any) -> str:
        return f"{_label(obj, self.name)} is read-only: {self.read_only}"

    def _write_back(self, obj: Any, shown: Any, raw: Any, part: Any, select: Selector | None) -> Any:
        """The served value with the user's view put back in the model's layout (values unchanged)."""
        restored = self._inverse(obj, shown, part)
        return select.put(raw, restored) if select is not None else restored

    def _write(self, obj: Any, value: Any, location: str) -> None:
        if self.read_only is not None:
            raise AttributeError(self._read_only_message(obj))
        if self.prepare is not None:
            self.prepare(obj)
        raw = self._request(obj, location)
        select = self.selector(obj)
        current = select.get(raw) if select is not None else raw
        shown = self._preprocess(obj, current) if self._preprocess is not None else current
        _check_replacement(_label(obj, self.name), value, shown)
        if self._inverse is not None:
            value = self._inverse(obj, value, current)
        Mediator.swap(location, select.put(raw, value) if select is not None else value)


def pickled_plain(tensor: torch.Tensor, protocol: Any) -> Any:
    """How a served tensor pickles (``torch.save``, ``pickle``, a server's reply to a remote trace): as the plain
    tensor it holds; what ties it to the model (its envoy, held weakly; why it is read-only) means nothing outside
    the trace that served it."""
    return torch.Tensor.__reduce_ex__(tensor.as_subclass(torch.Tensor), protocol)


class Served(torch.Tensor):
    """A standard value handed out as a view of the tensor the model computes with (reshaped, transposed, a
    leading 1 added), or one the model computes nothing from.

    A plain tensor in every other way (operations on it give plain tensors).
    Inside ``with loss.backward():`` its ``.grad`` is the gradient of the
    model's own tensor, in this value's layout (and writing ``.grad`` writes
    that tensor's, mapped back); the gradient does not depend on whether the
    model's later computations go through the view. On a value the model
    does not use downstream, ``.grad`` raises `Unavailable` saying so, instead
    of waiting for a gradient that never comes.
    """

    __torch_function__ = torch._C._disabled_torch_function_impl

    __reduce_ex__ = pickled_plain

    @property
    def grad(self) -> Any:
        backward = torch.Tensor.__dict__.get("grad")  # nnsight's property, only inside `with loss.backward():`
        origin = self.__dict__.get("_served_from")
        if not isinstance(backward, property) or origin is None:
            return torch._C.TensorBase.grad.__get__(self)
        part, envoy, prop, reason = origin
        obj = envoy()
        if reason is not None:
            raise Unavailable(f"{_label(obj, prop.name)} has no gradient: {reason}")
        gradient = backward.fget(part)
        return prop._preprocess(obj, gradient) if prop._preprocess is not None else gradient

    @grad.setter
    def grad(self, value: Any) -> None:
        backward = torch.Tensor.__dict__.get("grad")
        origin = self.__dict__.get("_served_from")
        if not isinstance(backward, property) or origin is None:
            torch._C.TensorBase.grad.__set__(self, value)
            return
        part, envoy, prop, reason = origin
        obj = envoy()
        if reason is not None:
            raise Unavailable(f"{_label(obj, prop.name)} has no gradient: {reason}")
        if prop._inverse is None and getattr(value, "shape", part.shape) != part.shape:
            raise ValueError(f"{_label(obj, prop.name)}.grad takes a tensor of shape {tuple(part.shape)}")
        backward.fset(part, prop._inverse(obj, value, part) if prop._inverse is not None else value)


#: The in-place operators whose method names do not end in ``_``.
IN_PLACE_OPERATORS = frozenset(
    f"__i{name}__" for name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and", "or",
                                "xor", "lshift", "rshift")
) | {"__setitem__"}


class ReadOnly(torch.Tensor):
    """A read-only standard value as a tensor: any in-place edit of it raises, naming the value and why.

    Operations on it give plain tensors (``mask.clone()`` is an ordinary copy to edit). Only the value
    itself refuses: it is computed for the user off the model's inputs, so an edit would change nothing
    the model uses.
    """

    __reduce_ex__ = pickled_plain

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        edits = name in IN_PLACE_OPERATORS or (name.endswith("_") and not name.endswith("__"))
        if (edits and args and isinstance(args[0], ReadOnly)) or isinstance(kwargs.get("out"), ReadOnly):
            target = args[0] if edits else kwargs["out"]
            raise AttributeError(f"{target.__dict__['_read_only']}; it cannot be edited in place (clone it to edit a copy)")
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **kwargs)

    @property
    def grad(self) -> Any:
        """nnsight's ``.grad`` inside ``with loss.backward():``; `Unavailable` there on a value the model computes
        nothing from (its ``gradient_reason``), instead of waiting for a gradient that never comes."""
        unused = self.__dict__.get("_no_gradient")
        if unused is not None and isinstance(torch.Tensor.__dict__.get("grad"), property):
            raise Unavailable(unused)
        return torch.Tensor.grad.__get__(self, type(self))


def read_only(value: torch.Tensor, message: str, no_gradient: str | None = None) -> ReadOnly:
    """``value`` as a `ReadOnly` tensor whose in-place edits raise with ``message``; ``no_gradient``, where given, is
    what its ``.grad`` raises inside a backward (the model computes nothing from it)."""
    view = value.as_subclass(ReadOnly)
    view.__dict__["_read_only"] = message
    view.__dict__["_no_gradient"] = no_gradient
    return view


def served(shown: torch.Tensor, part: torch.Tensor, obj: Any, prop: EProperty, reason: str | None) -> Served:
    """``shown`` (the same data, still in the autograd graph) as a `Served` whose gradient is ``part``'s."""
    view = shown.as_subclass(Served)
    # The envoy weakly: a value saved past the model's life does not keep the model alive.
    view.__dict__["_served_from"] = (part, weakref.ref(obj), prop, reason)
    return view


def outside_trace(label: str, writing: bool = False) -> str:
    """Why a standard value cannot be read (or written) here: only a running trace has it."""
    verb, how = ("written", f"model.{label} = new_value") if writing else ("read", f"value = model.{label}.save()")
    return (
        f"{label} is {verb} inside a trace, while the model runs: with model.trace(prompt, images=[image]): "
        f"{how} (then use the saved value after the block); outside a trace no forward runs, so there is no "
        f"value to {'write' if writing else 'read'}"
    )


@contextmanager
def later_run(obj: Any, name: str | None, location: str, passes: int) -> Iterator[None]:
    """The requests of value ``name`` in the block pinned to the run of its module after ``passes`` runs."""
    with explained(obj, name), pinned(location, None, 1, passes):
        yield


@contextmanager
def explained(obj: Any, name: str | None) -> Iterator[None]:
    """Say, in an `OutOfOrderError` raised in the block, which value it was and what order reads take (`_explain`)."""
    try:
        yield
    except OutOfOrderError as error:
        _explain(error, obj, name)
        raise


def _explain(error: OutOfOrderError, obj: Any, name: str | None) -> None:
    """Say, in the error nnsight raised, which value it was and what order reads take.

    The same exception object is re-raised (nnsight unwinds an open
    ``tracer.iter`` loop with it), so only its message grows.
    """
    if getattr(error, "_explained", False):  # once, where nested blocks both explain it
        return
    error._explained = True
    hint = getattr(obj, "order_hint", None) or "reads follow the order in which the forward computes the values"
    error.args = (f"{_label(obj, name)}: {error.args[0] if error.args else error}; {hint}", *error.args[1:])


def _label(obj: Any, name: str | None) -> str:
    """The value's name as a user spells it: ``vision.layers[0].self_attn.attention_probabilities``."""
    spelled = vars(type(obj)).get("spelled_path")  # a value holder that is not an envoy spells itself
    path = spelled.__get__(obj) if spelled is not None else standard_path(obj)
    return str(name) if path == "model" else f"{path}.{name}"


def _check_replacement(label: str, value: Any, current: Any) -> None:
    """Refuse a written value the model could not use in place of ``current``: not a tensor, or another shape,
    dtype or device; the message names the value and what to do."""
    if not isinstance(current, torch.Tensor):
        return
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{label} takes a tensor of shape {tuple(current.shape)}; got {type(value).__name__}")
    if value.shape != current.shape:
        raise ValueError(
            f"{label} takes a tensor of shape {tuple(current.shape)}, the shape of the value it replaces; "
            f"got {tuple(value.shape)}. Edit it in place, or build the replacement from the value you read."
        )
    if value.dtype != current.dtype:
        raise TypeError(
            f"{label} takes a tensor of dtype {current.dtype}, the dtype of the value it replaces; got {value.dtype}. "
            f"Convert it first: value.to({current.dtype})."
        )
    if value.device != current.device:
        raise ValueError(
            f"{label} takes a tensor on {current.device}, where the value it replaces is; got one on {value.device}. "
            f"Move it first: value.to({str(current.device)!r})."
        )


def standard_values(envoy_class: type) -> dict[str, EProperty]:
    """Every `EProperty` of an envoy class, by name, in definition order (base classes first)."""
    found: dict[str, EProperty] = {}
    for cls in reversed(envoy_class.__mro__):
        for name, attribute in vars(cls).items():
            if isinstance(attribute, EProperty):
                found[name] = attribute
    return found


#: Maps a served part to what the user reads (a view, so in-place edits reach the model).
View = Callable[[Any], Any]
#: Maps a written value back to the served part's shape: ``inverse(written, current_part)``.
Inverse = Callable[[Any, Any], Any]


def value(
    name: str,
    layout: type,
    *,
    description: str,
    key: str | Callable[[Any], str],
    select: Select = None,
    unavailable: Reason = None,
    read_only: str | None = None,
    every_step: bool = False,
    prepare: Callable[[Any], None] | None = None,
    view: Callable[..., Any] | None = None,
    inverse: Callable[..., Any] | None = None,
    needs_envoy: bool = False,
    shape: str | None = None,
    doc: str | None = None,
    kind: Callable[..., EProperty] = EProperty,
) -> EProperty:
    """A standard value, the one way to declare one (`pinning.pinned_value` for one pinned to an occurrence of its
    location): the selected part (through ``view`` if given), annotated with its layout.

    ``name``: the attribute it is on its envoy class. ``layout``: the `Layout`
    a repr and the docs show as its type. ``description``: what it is, as a
    repr shows it, before its axes (``shape``). ``key``: the location's suffix
    under the envoy's path (``"output"``), or a function of the envoy returning
    the whole location. ``select``: which part of what is served there (a
    `Selector`, or a function of the envoy returning one; None for all of it).
    ``unavailable``: a reason, or a function of the envoy returning one or None.
    ``read_only``: why it takes no write (assigning it, or editing the tensor
    read, raises with it); None for a writable value. ``every_step``: served on
    every step of generate, even on an envoy whose values are computed on the
    first step only (its ``first_step_only``). ``prepare``: run inside the trace
    before the value is requested (a drill that has to be asked for first).
    ``view`` maps the part to what the user reads (``view(part)``), and
    ``inverse`` maps a written value back to the part's own shape
    (``inverse(written, current_part)``; needed whenever ``view`` changes the
    shape); with ``needs_envoy`` both take the envoy first (``view(envoy,
    part)``, ``inverse(envoy, written, current_part)``), for a view sized off
    the model. ``shape``: the axes a repr shows after the description where
    they are not the layout's (``layout.shape()``), "" for none. ``doc``: the
    value's docstring (by default its description and axes). ``kind``: the
    `EProperty` class that serves it (or a partial of one), for a value that
    finds its location or its occurrence its own way.
    """
    axes = layout.shape() if shape is None else shape

    def read(self: Any, part: Any) -> Any:
        if view is None:
            return part
        return view(self, part) if needs_envoy else view(part)

    read.__name__ = name
    read.__annotations__ = {"return": layout}
    read.__doc__ = doc or f"{description[:1].upper()}{description[1:]}" + (f", ``{axes}``." if axes else ".")
    prop = kind(
        key=key, description=f"{description} {axes}" if axes else description, select=select, unavailable=unavailable,
        read_only=read_only, prepare=prepare, every_step=every_step,
    )(read)
    if inverse is not None:
        prop.inverse(inverse if needs_envoy else lambda self, written, current: inverse(written, current))
    return prop


def documented(prop: EProperty, doc: str) -> EProperty:
    """``prop`` with its own docstring (a copy: the shared value keeps its own)."""
    copied = type(prop).__new__(type(prop))
    property.__init__(copied)  # an eproperty is a property, which copy.copy refuses
    copied.__dict__.update(vars(prop))
    copied.__doc__ = doc
    return copied
