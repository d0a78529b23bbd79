"""Bind a family's ``rename=`` aliases on an envoy tree in one pass, with nnsight's own binding.

nnsight binds ``rename=`` as it builds each envoy (`nnsight.intervention.aliasing.bind`):
every key is looked up from every envoy, and a key that names nothing there
costs a failed attribute lookup on the envoy and another on its module. With a
family's dozen keys on a model of a few hundred modules, that is most of what
wrapping the model costs. `bind_rename` binds the same aliases on a tree built
without ``rename=``: on each envoy, in the order nnsight binds them (children
before their parent, in module order), it hands nnsight's ``bind`` only the keys
whose first component can be found from that envoy. The other keys are the
ones nnsight skips there, so the aliases, their order and the errors are
nnsight's. Afterwards every envoy holds the whole ``rename``, as nnsight leaves
it, for the envoys it wraps later.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from functools import cache

import torch
from nnsight import Envoy
from nnsight.intervention import aliasing

from .standard import Standard

#: Envoy lookups that find what nnsight's finds (`Standard`'s differs only in its error's message).
NNSIGHT_LOOKUP = (Envoy.__getattr__, Standard.__getattr__)


@cache
def class_attributes(cls: type) -> frozenset[str]:
    """Every name defined on ``cls`` or a class it inherits from."""
    return frozenset().union(*(vars(klass) for klass in cls.__mro__))


def may_have(envoy: Envoy, name: str, alias_names: frozenset[str]) -> bool:
    """Whether ``getattr(envoy, name)`` can find anything: what the envoy holds (its children, and the aliases
    of ``alias_names`` bound on it), its class, or what its fallthrough to the module finds. A superset: False
    only where the lookup fails."""
    if name in envoy.__dict__ or name in alias_names or name in class_attributes(type(envoy)):
        return True
    module = envoy._module
    if type(envoy).__getattr__ not in NNSIGHT_LOOKUP or type(module).__getattr__ is not torch.nn.Module.__getattr__:
        return True  # a fallthrough of its own: anything may be found
    return (
        name in module.__dict__
        or name in module._modules
        or name in module._parameters
        or name in module._buffers
        or name in class_attributes(type(module))
    )


def could_name(envoy: Envoy, key: str | type, alias_names: frozenset[str]) -> bool:
    """Whether the ``rename`` key may name something from ``envoy`` (nnsight's ``named`` decides which)."""
    if isinstance(key, type):
        return True
    first = key.lstrip(".").split(".")[0]
    return first == "*" or may_have(envoy, first, alias_names)


def built_order(envoy: Envoy, modules: set[int]) -> Iterator[Envoy]:
    """The envoys under ``envoy`` (itself last) whose module is one of ``modules``, in the order nnsight
    finishes building them: each child's tree, in module order, then the envoy."""
    for child in envoy._children:
        if id(child._module) in modules:
            yield from built_order(child, modules)
    yield envoy


def bind_rename(root: Envoy, rename: Mapping[str | type, str | list[str]]) -> None:
    """Bind ``rename`` on the tree of ``root`` (built with no ``rename=``) as nnsight binds it while building."""
    rename = dict(rename)
    alias_names = frozenset(
        alias.rpartition(".")[2] for aliases in rename.values() for alias in ([aliases] if isinstance(aliases, str) else aliases)
    )
    envoys = list(built_order(root, {id(module) for module in root._module.modules()}))
    try:
        for envoy in envoys:
            envoy._rename = {key: aliases for key, aliases in rename.items() if could_name(envoy, key, alias_names)}
            aliasing.bind(envoy)
    finally:
        for envoy in envoys:
            envoy._rename = rename
