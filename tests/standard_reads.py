"""Every standard value a trace of a checkpoint can read: what the suites that compare each value with another
reading of it (its native gradient, a remote run) walk over."""

from __future__ import annotations

from typing import Any

from envoys.core.standard import Standard
from envoys.core.values import standard_values


def first_or_last_block(model: Any, envoy: Any) -> bool:
    """Whether ``envoy`` is outside every stack of blocks, or in the first or the last block of each it is in
    (the blocks between run the same code; the last is where LLaVA's unused blocks are)."""
    parts = envoy.path.split(".")[1:]
    for depth, segment in enumerate(parts):
        if segment.isdigit():
            stack = model._module.get_submodule(".".join(parts[:depth]))
            if int(segment) not in (0, len(stack) - 1):
                return False
    return True


def every_value(model: Any, prompt: str, images: list) -> list[tuple[Any, str, Any]]:
    """(envoy, name, value) for every standard value of every standard envoy of the model, in the first and the
    last block of each stack, that is available in a trace of ``prompt`` with ``images``: a value of a medium the
    trace does not carry (a video's, an audio tower's) says so inside a trace only."""
    candidates = [(envoy, name, prop) for envoy in model.modules()
                  if (isinstance(envoy, Standard) or envoy is model) and first_or_last_block(model, envoy)
                  for name, prop in standard_values(type(envoy)).items() if prop.reason(envoy) is None]
    available = []
    with model.trace(prompt, images=images) as tracer:
        for candidate in candidates:
            if candidate[2].reason(candidate[0]) is None:
                available.append(candidate)
        tracer.stop()
    return available
