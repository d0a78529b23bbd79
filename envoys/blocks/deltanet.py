"""Gated DeltaNet blocks (Qwen3.5's ``linear_attn``): linear attention with a recurrent state, read at its kernel call.

The module projects and convolves the block's input into queries, keys and
values, computes a decay and a beta per value head and token, and calls one
gated-delta-rule kernel (rewrites/deltanet.py)::

    kernel(query, key, value, g=decay, beta=beta, initial_state=..., output_final_state=cache is not None, ...)
        -> (output, final state or None)

Which kernel runs depends on the forward:

- ``torch_chunk_gated_delta_rule_0``, the chunked kernel, on a forward that
  does not continue a cached state with one token: a trace's forward, the
  prompt pass of a generation, and every step of a generation without a cache
  (``use_cache=False``);
- ``torch_recurrent_gated_delta_rule_0``, the per-token kernel, on a decode
  step: one token against the cached state (every step after the first of a
  generation that keeps a cache, the default).

`GatedDeltaNet`'s values are served at whichever of the two runs in the
forward the trace's worker is at: inside ``for step in tracer.iter[...]``,
step 0 is the chunk call and step s > 0 the recurrent call (its occurrence
s - 1) when the run keeps a cache, the chunk call (occurrence s) when not.
A trace that itself continues a cache it passes in with one token (a manual
decode step) runs the recurrent kernel at step 0: read that call at
``linear_attn.source.torch_recurrent_gated_delta_rule_0`` instead.

From transformers 5.25 a prompt pass whose cache keeps the recurrent states of
its last n tokens (``cache.get_recurrent_states_to_keep``: none unless a caller
asks for them) runs the chunked kernel on the other tokens only, then the
per-token kernel once per kept token: the values then read the chunk call, its
``seq - n`` tokens, and the kept tokens' calls are
``linear_attn.source.torch_recurrent_gated_delta_rule_1``, one per token. A
trace or a generation that keeps no state reads every token at the chunk call,
as before 5.25.

The names follow the softmax attention's (``attention_queries``, ...), with
``linear_attention_`` in front: ``linear_attention_queries``, ``_keys``,
``_values``, ``_decays``, ``_betas``, ``_head_outputs`` and ``_state``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from nnsight.intervention.interleaver import Mediator

from rewrites.deltanet import CHUNK_SITE, RECURRENT_SITE

from ..core.layouts import Layout
from ..core.standard import Standard, child, missing_site, site_label
from ..core.values import Argument, EProperty, First, Item, Selector, standard_values, value
from .hybrid import HybridLayer

#: The cache arguments of the forward: a cache passed in is used whatever ``use_cache`` says.
CACHE_ARGUMENTS = ("past_key_values", "cache")


# -- layouts ---------------------------------------------------------------------------------------


class LinearQueries(Layout):
    """[batch, seq, key_heads, key_head_dim]: the queries as the gated delta rule kernel receives them, before its l2 norm."""


class LinearKeys(Layout):
    """[batch, seq, key_heads, key_head_dim]: the keys as the gated delta rule kernel receives them, before its l2 norm."""


class LinearValues(Layout):
    """[batch, seq, value_heads, value_head_dim]: the values as the gated delta rule kernel receives them."""


class Decays(Layout):
    """[batch, seq, value_heads]: the log decay (g <= 0) of each value head's state at each token."""


class Betas(Layout):
    """[batch, seq, value_heads]: the write strength (sigmoid, in (0, 1)) of each value head at each token."""


class LinearHeadOutputs(Layout):
    """[batch, seq, value_heads, value_head_dim]: each value head's output, before the gated norm and out_proj."""


class RecurrentState(Layout):
    """[batch, value_heads, key_head_dim, value_head_dim]: the state the kernel returns after the forward's last token."""


# -- which kernel call ----------------------------------------------------------------------------


@dataclass(frozen=True)
class KernelCall:
    """The kernel call a value is served at: the site, and which of its occurrences in the run."""

    site: str
    occurrence: int


def _worker() -> Mediator | None:
    """The running trace's worker, or None outside a trace."""
    try:
        return Mediator.current("a gated DeltaNet value")
    except ValueError:
        return None


def trace_arguments(worker: Mediator | None) -> dict[str, Any]:
    """The keyword arguments the running trace passes to the model (its own and its invokes'); {} outside one."""
    batcher = worker.interleaver.batcher if worker is not None and worker.interleaver is not None else None
    if batcher is None:
        return {}
    found = dict(batcher.kwargs)
    for _, kwargs in batcher.invokes:
        found.update(kwargs)
    found.update(batcher.extra_kwargs)
    return found


def keeps_cache(deltanet: Any, arguments: dict[str, Any]) -> bool:
    """Whether the forward has a cache: one passed in, else ``use_cache`` as passed, else the text config's."""
    if any(arguments.get(name) is not None for name in CACHE_ARGUMENTS):
        return True
    if arguments.get("use_cache") is not None:
        return bool(arguments["use_cache"])
    config = deltanet.root.config
    return bool(getattr(getattr(config, "text_config", config), "use_cache", True))


def forward_step(deltanet: Any, worker: Mediator) -> int:
    """The forward (generation step) the worker is at: its ``tracer.iter`` pin (0 with no loop), or, relaxed after
    the first read of a later step, the forwards of this module whose output it has already seen."""
    if worker.iteration is not None:
        return worker.iteration
    return worker.occurrence(f"{deltanet.path}.output")


def kernel_call(deltanet: Any, worker: Mediator) -> KernelCall:
    """The kernel call of the forward the worker is at: the chunked one on step 0 and on every step of a run
    without a cache; the recurrent one, on steps after the first of a run that keeps a cache."""
    step = forward_step(deltanet, worker)
    if step > 0 and keeps_cache(deltanet, trace_arguments(worker)):
        return KernelCall(RECURRENT_SITE, step - 1)
    return KernelCall(CHUNK_SITE, step)


@contextmanager
def pinned_to(worker: Mediator, occurrence: int) -> Iterator[None]:
    """Tag the requests made in the block with ``occurrence``, then restore the worker's pin."""
    previous = worker.iteration
    worker.iteration = occurrence
    try:
        yield
    finally:
        worker.iteration = previous


class KernelValue(EProperty):
    """An `EProperty` at the kernel call the forward runs (`kernel_call`): its ``key`` is the call's ``input`` or
    ``output``. Declared with `value` (``kind=KernelValue``)."""

    def __init__(self, **eproperty: Any) -> None:
        super().__init__(**eproperty)
        self._call: KernelCall | None = None

    def _location(self, obj: Any) -> str:
        call = self._call or KernelCall(CHUNK_SITE, 0)
        return f"{obj.path}.source.{site_label(obj, call.site)}.{self.key}"

    @contextmanager
    def _at_kernel(self, obj: Any) -> Iterator[None]:
        worker = Mediator.current(f"{type(obj).__name__}.{self.name}")
        call = kernel_call(obj, worker)
        # The location is read synchronously, before the request parks the worker, so holding the
        # call on the (shared) descriptor for the block is safe.
        self._call = call
        try:
            with pinned_to(worker, call.occurrence):
                yield
        finally:
            self._call = None

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        if obj is None:
            return self
        self.check(obj)
        with self._at_kernel(obj):
            return self._read(obj, self._location(obj))

    def __set__(self, obj: Any, value: Any) -> None:
        self.check(obj, writing=True)
        with self._at_kernel(obj):
            self._write(obj, value, self._location(obj))


# -- reasons --------------------------------------------------------------------------------------


def no_kernel_sites(deltanet: Any) -> str | None:
    """Why the kernel calls are not served on this module, or None."""
    return missing_site(deltanet, CHUNK_SITE) or missing_site(deltanet, RECURRENT_SITE)


def no_state(deltanet: Any) -> str | None:
    """Why the kernel returns no state, or None: the forward asks for one only when it has a cache."""
    reason = no_kernel_sites(deltanet)
    if reason is not None:
        return reason
    if keeps_cache(deltanet, trace_arguments(_worker())):
        return None
    return (
        "this forward keeps no cache (use_cache=False), so it asks the kernel for no final state "
        "(output_final_state=False) and the kernel returns None; trace with use_cache=True (the default) "
        "or pass a cache"
    )


def refuse_missing_state(written: Any, current: Any) -> Any:
    if current is None:
        raise ValueError(
            "linear_attention_state is None in this forward (it keeps no cache, so the kernel returns no state); "
            "there is nothing to replace"
        )
    return written


# -- queries and keys repeated to the value heads by the block ---------------------------------------


def key_heads(deltanet: Any, received: Any) -> Any:
    """The queries or keys ``[batch, seq, key_heads, key_head_dim]`` of what the kernel received: the same tensor, or,
    where the block repeated each key head to its ``value_heads // key_heads`` value heads before the call
    (transformers before 5.23), one copy of each (a view). The model then goes on with this view repeated again
    (`repeated_as_received`), so an edit reaches every copy and the gradient is the sum over the copies."""
    heads = deltanet._module.num_k_heads
    if received.shape[2] == heads:
        return received
    return received.unflatten(2, (heads, received.shape[2] // heads))[:, :, :, 0]


def repeated_as_received(deltanet: Any, written: Any, received: Any) -> Any:
    """A written ``[batch, seq, key_heads, key_head_dim]`` value in the layout the kernel receives (repeated as the
    block repeats it)."""
    return written.repeat_interleave(received.shape[2] // written.shape[2], dim=2)


# -- the envoys -----------------------------------------------------------------------------------


def kernel_value(
    name: str, layout: type, part: str, select: Selector, description: str, doc: str, unavailable: Any = no_kernel_sites,
    per_key_head: bool = False,
) -> KernelValue:
    """A DeltaNet value at the kernel call: ``select``'s part of its ``part`` (``input`` or ``output``), annotated with
    ``layout``. ``per_key_head``: a query or key, served with one head per key head whatever the block repeats
    (`key_heads`)."""
    heads = {"view": key_heads, "inverse": repeated_as_received, "needs_envoy": True} if per_key_head else {}
    return value(
        name, layout, description=description, key=part, select=select, unavailable=unavailable, doc=doc,
        kind=KernelValue, **heads,
    )


class GatedDeltaNet(Standard):
    """A gated DeltaNet (``linear_attn``): its interior at the gated delta rule kernel call of the forward.

    Per token t and value head, the kernel l2-normalises the query and key,
    decays the state ``S`` by ``exp(g_t)``, writes ``beta_t * (v_t - S k_t)``
    along ``k_t`` (the delta rule), and reads the output as ``S q_t`` (the
    query scaled by ``key_head_dim ** -0.5``); each key head serves
    ``value_heads // key_heads`` consecutive value heads. The values are the
    kernel's arguments and results, in its own layout (token axis before the
    head axis); each is readable, and writable with a tensor of the same shape
    (the kernel then uses it; a written state is what the cache keeps).
    """

    linear_attention_queries = kernel_value(
        "linear_attention_queries", LinearQueries, "input", Argument(0, "query"),
        "the queries the kernel receives, before its l2 norm",
        "The queries the gated delta rule kernel receives, ``[batch, seq, key_heads, key_head_dim]``: after the "
        "causal convolution and its activation, before the kernel's own l2 norm and scaling. Where the block "
        "repeats them to the value heads before the call (transformers before 5.23), one copy of each key head.",
        per_key_head=True,
    )
    linear_attention_keys = kernel_value(
        "linear_attention_keys", LinearKeys, "input", Argument(1, "key"),
        "the keys the kernel receives, before its l2 norm",
        "The keys the gated delta rule kernel receives, ``[batch, seq, key_heads, key_head_dim]``: after the causal "
        "convolution and its activation, before the kernel's own l2 norm. Where the block repeats them to the "
        "value heads before the call (transformers before 5.23), one copy of each key head.",
        per_key_head=True,
    )
    linear_attention_values = kernel_value(
        "linear_attention_values", LinearValues, "input", Argument(2, "value"),
        "the values the kernel receives",
        "The values the gated delta rule kernel receives, ``[batch, seq, value_heads, value_head_dim]``: after the "
        "causal convolution and its activation.",
    )
    linear_attention_decays = kernel_value(
        "linear_attention_decays", Decays, "input", Argument(3, "g"),
        "the log decay of each value head's state per token (g)",
        "The kernel's ``g``, ``[batch, seq, value_heads]``: the log of the factor each value head's state is "
        "multiplied by at each token, ``-exp(A_log) * softplus(a + dt_bias)`` (<= 0), in float32.",
    )
    linear_attention_betas = kernel_value(
        "linear_attention_betas", Betas, "input", Argument(4, "beta"),
        "each value head's write strength per token (beta)",
        "The kernel's ``beta``, ``[batch, seq, value_heads]``: how strongly each token's value is written into "
        "each value head's state, ``sigmoid(b)`` in (0, 1); 0 leaves the state as decayed.",
    )
    linear_attention_head_outputs = kernel_value(
        "linear_attention_head_outputs", LinearHeadOutputs, "output", First(),
        "each value head's output, before the gated norm",
        "The kernel's output, ``[batch, seq, value_heads, value_head_dim]``: each value head's read of its state, "
        "before the gated RMS norm (gated by ``in_proj_z``) and ``out_proj``.",
    )
    linear_attention_state = kernel_value(
        "linear_attention_state", RecurrentState, "output", Item(1),
        "the state the kernel returns after the forward's last token",
        "The recurrent state the kernel returns, ``[batch, value_heads, key_head_dim, value_head_dim]`` (float32): "
        "each value head's state after the forward's last token, which the cache keeps for the next step. "
        "Unavailable when the forward keeps no cache (the kernel then returns None).",
        unavailable=no_state,
    ).inverse(lambda self, written, current: refuse_missing_state(written, current))

    def gradient_reason(self, name: str) -> str | None:
        """Why the value ``name`` has no gradient: the returned state feeds only the cache, for the next forward."""
        if name != "linear_attention_state":
            return None
        return ("the kernel returns it for the cache to carry into the next forward, and nothing this forward's "
                "logits depend on is computed from it; linear_attention_head_outputs is what this forward reads "
                "from the state")


# -- the blocks ------------------------------------------------------------------------------------


def no_deltanet(block: Any) -> str | None:
    """Why this block has no gated DeltaNet values, or None when it has ``linear_attn``."""
    if child(block, "linear_attn") is not None:
        return None
    index = block.path.rpartition(".")[2]
    return (
        f"layers[{index}]'s token mixer is softmax attention, self_attn, not a gated DeltaNet, so it has no "
        f"linear_attn values; its interior is layers[{index}].self_attn.attention_queries and the other "
        f"attention values"
    )


class DeltaNetHybridLayer(HybridLayer):
    """A block of a gated-DeltaNet hybrid (Qwen3.5): `HybridLayer`'s values, and its support rows for
    ``linear_attn``'s values: the DeltaNet's own on a DeltaNet block, each with the reason on a full-attention one."""

    def support(self) -> dict[str, str | None]:
        rows = super().support()
        deltanet = child(self, "linear_attn")
        if deltanet is None:
            reason = no_deltanet(self)
            rows.update({f"linear_attn.{name}": reason for name in standard_values(GatedDeltaNet)})
        elif isinstance(deltanet, Standard):
            rows.update({f"linear_attn.{name}": reason for name, reason in deltanet.support().items()})
        return rows

