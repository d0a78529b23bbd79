"""A mixture-of-experts router: the call that computes its logits, one score per expert for every token.

Found from the model, not listed: every module class a loaded model holds
whose own forward assigns a local ``router_logits`` from one call gets a rule
(`router_rules`). transformers' routers all read so (5.24): Qwen3-VL-MoE's and
Qwen3.5-MoE's ``router_logits = F.linear(hidden_states, self.weight)``, Aria's
``nn.functional.linear``, Mistral Large 4's, NemotronH's and GLM-4.5V's
``F.linear`` on float32, Llama 4's ``super().forward(hidden_states)`` (its
router is an ``nn.Linear``). The call takes the block's tokens flattened,
``[tokens, hidden_size]``, and returns the logits, ``[tokens, experts]``, from
which the router picks each token's top-k experts and their weights; so the
call's output is what the router decides on, and a write there changes which
experts run and how much each adds. The router module itself returns the
logits beside its choice (``(logits, weights, indices)``; Llama 4's ``(scores,
logits)``), and the sparse block discards them: a write to the module's output
would change nothing.

The site is the callee's only call in the forward (``F_linear_0``,
``nn_functional_linear_0``, ``forward_0``); a forward that calls it more than
once is not guessed at (no rule). `logits_site` gives a router class's label,
for the envoys (`envoys.blocks.moe`).
"""

from __future__ import annotations

from collections.abc import Iterable

from instrument import Rule
from instrument.calls import assigned_call, calls, defining_class, filled_in_place, innermost, label_stem

from .attention import model_type_of

#: The local a router's forward assigns its logits to.
LOGITS = "router_logits"


def logits_callee(cls: type) -> str | None:
    """The dotted callee of the call ``cls``'s forward assigns ``router_logits`` from, where it calls it once; else None."""
    owner = defining_class(cls)
    forward = innermost(owner.__dict__.get("forward")) if owner is not None else None
    if forward is None or LOGITS not in forward.__code__.co_varnames or filled_in_place(forward, LOGITS):
        return None
    callee = assigned_call(forward, LOGITS)
    return callee if callee is not None and calls(forward, callee) == 1 else None


def logits_site(cls: type) -> str | None:
    """The label of ``cls``'s router-logits call (``F_linear_0``), or None where ``cls`` is no router we serve."""
    callee = logits_callee(cls)
    return f"{label_stem(callee)}_0" if callee is not None else None


def router_rule(owner: type) -> Rule:
    """The rule of a router class (``{model_type}.{RouterClass}``, as Qwen3-VL-MoE's ``Qwen3VLMoeTextTopKRouter``): its logits call."""
    callee = logits_callee(owner)
    return Rule(
        f"{model_type_of(owner.__module__)}.{owner.__qualname__}",
        f"{owner.__module__}:{owner.__qualname__}.forward",
        {callee: (f"{label_stem(callee)}_0",)},
        purpose="the router's logits: tokens in, one score per expert out, before the top-k choice",
    )


def router_rules(classes: Iterable[type], claimed: Iterable[str] = ()) -> tuple[Rule, ...]:
    """The logits rules of every router class in ``classes`` (once each); forwards in ``claimed`` are left out."""
    taken = set(claimed)
    rules: dict[str, Rule] = {}
    for owner in dict.fromkeys(filter(None, map(defining_class, classes))):
        if f"{owner.__module__}:{owner.__qualname__}.forward" in taken or logits_callee(owner) is None:
            continue
        rule = router_rule(owner)
        rules.setdefault(rule.name, rule)
    return tuple(rules.values())
