"""A model output nnsight cannot copy: a ``ModelOutput`` whose class has a required field.

nnsight narrows a served value to an invoke's rows by rebuilding its
containers, a dict by ``value.copy()``; the C ``OrderedDict.copy`` calls the
class with no arguments, which a ``ModelOutput`` dataclass with a field without a
default refuses (transformers' ``TimmWrapperModelOutput``: ``last_hidden_state``,
which PerceptionLM's root output holds as its ``image_outputs``). `by_keyword`
rebuilds such an output (and any output holding one) by keyword instead,
applying the narrowing to what it holds; any other value is left to nnsight.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from functools import cache
from typing import Any

from transformers.utils import ModelOutput


@cache
def needs_arguments(cls: type) -> bool:
    """Whether the ``ModelOutput`` class ``cls`` has a field without a default (so its class cannot be called bare)."""
    return dataclasses.is_dataclass(cls) and any(
        field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
        for field in dataclasses.fields(cls)
    )


def uncopyable(value: Any) -> bool:
    """Whether ``value`` is, or holds (as a field, at any depth), a ``ModelOutput`` nnsight's copy would refuse."""
    return isinstance(value, ModelOutput) and (
        needs_arguments(type(value)) or any(uncopyable(item) for item in value.values()))


def by_keyword(value: Any, each: Callable[[Any], Any]) -> Any:
    """``each`` applied to ``value``, but where ``value`` is an output nnsight cannot copy (`uncopyable`): rebuilt by
    keyword, ``each`` applied to each of its fields."""
    if not uncopyable(value):
        return each(value)
    return type(value)(**{key: by_keyword(item, each) for key, item in value.items()})
