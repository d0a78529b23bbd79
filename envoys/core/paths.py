"""Spell an envoy's place in the model the way a user does, in standard names."""

from __future__ import annotations

from nnsight import Envoy


def standard_path(envoy: Envoy) -> str:
    """``envoy``'s path in standard names from the root: ``vision.layers[0].self_attn``.

    Walks down from the root, taking at each envoy the longest alias whose
    native path the remaining path starts with, else the native name.
    """
    node: Envoy = envoy.root
    remaining = envoy.path.split(".")[len(node.path.split(".")):]
    spelled: list[str] = []
    while remaining:
        aliases = [
            (alias, native.split("."))
            for alias, native in node._aliases.items()
            if remaining[: len(native.split("."))] == native.split(".")
        ]
        if aliases:
            alias, native = max(aliases, key=lambda pair: len(pair[1]))
            spelled.append(f".{alias}")
            node, remaining = getattr(node, alias), remaining[len(native):]
            continue
        name, remaining = remaining[0], remaining[1:]
        spelled.append(f"[{name}]" if name.isdigit() else f".{name}")
        node = node[int(name)] if name.isdigit() else getattr(node, name)
    return "".join(spelled).lstrip(".") or "model"
