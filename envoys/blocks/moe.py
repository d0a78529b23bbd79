"""Mixture-of-experts text blocks: the router's logits on the block's MLP, and which blocks are dense.

A sparse block's MLP (``layers[i].mlp``) is the mixture: a router scores
every expert for each token, its top-k experts run on that token and their
outputs, weighted, are summed (plus any always-on shared expert). The module's
output is what the block adds to the stream, so ``mlp_output`` is the
block's as on a dense block and ``layer_input + attention_output +
mlp_output == layer_output`` holds; where a mixture returns more than that
tensor (Llama 4's ``(out, router_logits)``), the family serves ``mlp_output``
where the block adds it.

``layers[i].mlp.router_logits`` is the router's logits, ``[tokens,
experts]``, the batch's tokens flattened (``batch * seq``, row-major): the
output of the call in the router's forward that computes them
(`rewrites.router`, found from the model), before the router chooses each
token's experts from them, so a write there changes which experts run and
what they add. On a plain top-k router (Qwen3-VL-MoE, Qwen3.5-MoE, Aria,
Llama 4) ``router_logits.topk(k)`` is that choice (a softmax or sigmoid keeps
the order); a DeepSeek-V3-style router (Mistral Large 4, NemotronH,
GLM-4.5V) first keeps each token's best ``topk_group`` of ``n_group`` expert
groups, and NemotronH's and GLM-4.5V's add a score-correction bias, so there
the choice is the router's own output (``mlp.gate.output[2]``), which equals
the logits' top-k only with one group and no bias. nnterp (1.3.0, its latest
release) names no mixture-of-experts value, so the name is
``layers[i].mlp.router_logits``, what transformers' routers call it.

The router is the MLP's child whose class's forward computes the logits
(``mlp.gate`` on Qwen3-VL-MoE, Qwen3.5-MoE, Mistral Large 4, NemotronH and
GLM-4.5V; ``mlp.router`` on Aria and Llama 4), or the MLP itself where it
computes them in its own forward. On a model with sparse blocks every block's MLP is a `RoutedMlp`
(`Family.envoys_for` keys them), so ``support()`` says for each dense block
that it has no router.
"""

from __future__ import annotations

from typing import Any

import torch

from rewrites.router import logits_site

from ..core.layouts import RouterLogits
from ..core.standard import missing_site, site_label
from ..core.values import value
from ..text.blocks import Mlp


def routes(module: torch.nn.Module) -> bool:
    """Whether ``module`` (a block's MLP) is a mixture of experts with a router we serve: it or a child computes the
    router's logits."""
    return logits_site(type(module)) is not None or any(logits_site(type(c)) is not None for c in module.children())


def router(mlp: Any) -> Any | None:
    """The envoy of ``mlp``'s router: itself where its forward computes the logits, else its child that does; or None."""
    if logits_site(type(mlp._module)) is not None:
        return mlp
    return next((c for c in mlp._children if logits_site(type(c._module)) is not None), None)


def _block_name(mlp: Any) -> str:
    index = mlp.parent.path.rpartition(".")[2] if mlp.parent is not None else ""
    return f"layers[{index}].mlp" if index.isdigit() else mlp.path


def not_routed(mlp: Any) -> str | None:
    """Why ``mlp`` has no router_logits (a dense MLP, or its router's call is not served), or None."""
    found = router(mlp)
    if found is None:
        return (
            f"{_block_name(mlp)} is a dense MLP ({type(mlp._module).__name__}), not a mixture of experts: "
            "it has no router; the model's sparse blocks have one"
        )
    return missing_site(found, logits_site(type(found._module)))


def router_location(mlp: Any) -> str:
    """The output of the router's logits call: ``{router}.source.F_linear_0.output``."""
    found = router(mlp)
    return f"{found.path}.source.{site_label(found, logits_site(type(found._module)))}.output"


class RoutedMlp(Mlp):
    """A block's MLP in a model with mixture-of-experts blocks: `Mlp`'s ``mlp_output``, and the router's logits
    (``router_logits``, Unavailable on a dense block's MLP, saying so)."""

    router_logits = value(
        "router_logits", RouterLogits, description="the router's score for each expert, before its top-k choice",
        key=router_location, select=None, unavailable=not_routed,
        doc=(
            "The router's logits, ``[tokens, experts]`` (the batch's tokens flattened, row-major), from which it "
            "chooses each token's experts (on a plain top-k router, their top-k). Assign, or edit in place, to change "
            "which experts run."
        ),
    )
