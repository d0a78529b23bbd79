"""The attention interior: the kernel call in an attention forward, and the softmax inside eager attention.

Found from the model, not listed: every module class a loaded model holds
whose forward binds transformers' shared attention interface (a local
``attention_interface``) gets a rule (`attention_rules`). Such a forward binds
the kernel (``attention_interface_0``, an annotated assignment) and calls it
once (``attention_interface_1``) with ``(self, queries, keys, values,
attention_mask, ...)``, returning ``(head outputs [batch, query, heads,
head_dim], weights)``. The call drills into the rewritten form of the eager
kernel the forward binds by default (``attention_interface: Callable =
eager_attention_forward``, a function of its own modeling module; Llama 4's
tower binds ``vision_eager_attention_forward``), whose
``nn.functional.softmax`` call (``nn_functional_softmax_0``) takes the scores
and returns the probabilities, ``[batch, heads, query, key]``, before they
multiply the values. A forward that binds the interface but does not call it
exactly once is not guessed at: its rule fails to build with the compiler's
`DriftError`, which names the class (a forward with its own rule, such as the
Qwen ViT's per-image calls, is left to that rule).

Before transformers 5.1 (4.57 included) the forward assigns the kernel twice
(``attention_interface_0`` annotated, ``attention_interface_1`` from
``ALL_ATTENTION_FUNCTIONS``), so nnsight numbers the call
``attention_interface_2``; it is served as ``attention_interface_1``
(`BEFORE_5_1`). Gemma 4's text attention did so until 5.7
(`ASSIGNED_TWICE_LATER`).
"""

from __future__ import annotations

from collections.abc import Iterable
from types import FunctionType

from instrument import Rule, Variant
from instrument.calls import bound_default, defining_class, innermost

#: The local name transformers' attention forwards bind their kernel to.
INTERFACE = "attention_interface"
#: The kernel call: ``(self, queries, keys, values, attention_mask, ...)`` in, ``(head outputs, weights)`` out.
KERNEL_SITE = "attention_interface_1"
KERNEL = {"attention_interface": (KERNEL_SITE,)}
#: Inside eager attention: the scores in, the probabilities out.
SOFTMAX_SITE = "nn_functional_softmax_0"
SOFTMAX = {"nn.functional.softmax": (SOFTMAX_SITE,)}


def kernel_assigned_twice(versions: str) -> Variant:
    """On ``versions`` the forward assigns the kernel once more before calling it: the call is numbered one higher."""
    return Variant(
        versions,
        sites={"attention_interface": ("attention_interface_2",)},
        serve_as={"attention_interface_2": KERNEL_SITE},
        note="the kernel is assigned twice before the call, which nnsight numbers attention_interface_2",
    )


BEFORE_5_1 = kernel_assigned_twice("<5.1")

#: Classes that kept the double assignment longer than the rest: class -> the releases where they have it.
#: Gemma 4 came in 5.5 with it; its text attention lost it in 5.7.
ASSIGNED_TWICE_LATER = {"Gemma4TextAttention": kernel_assigned_twice("<5.7")}


def model_type_of(module_name: str) -> str:
    """The model_type a modeling module belongs to: ``transformers.models.llama.modeling_llama`` -> ``llama``; a timm
    module's is ``timm`` (``timm.layers.attention``), timm being one package of its own."""
    if module_name.startswith("timm."):
        return "timm"
    return module_name.rpartition(".")[2].removeprefix("modeling_")


def on_shared_interface(owner: type) -> bool:
    """Whether ``owner``'s own forward binds transformers' shared attention interface (a local ``attention_interface``)."""
    forward = innermost(owner.__dict__.get("forward"))
    return forward is not None and INTERFACE in forward.__code__.co_varnames


def eager_rule(kernel: FunctionType) -> Rule:
    """The softmax rule of an eager attention kernel (``llama.eager-attention``)."""
    name = kernel.__name__.removesuffix("_forward").replace("_", "-")
    return Rule(
        f"{model_type_of(kernel.__module__)}.{name}",
        f"{kernel.__module__}:{kernel.__qualname__}",
        SOFTMAX,
        purpose="the softmax of eager attention: scores in, probabilities out",
    )


def kernel_rule(owner: type) -> Rule:
    """The kernel-call rule of an attention class on the shared interface (``llama.LlamaAttention``), drilling into
    the eager kernel its forward binds by default, where it binds one."""
    kernel = bound_default(innermost(owner.__dict__["forward"]), INTERFACE)
    return Rule(
        f"{model_type_of(owner.__module__)}.{owner.__qualname__}",
        f"{owner.__module__}:{owner.__qualname__}.forward",
        KERNEL,
        purpose="the attention kernel call: queries, keys, values in, head outputs out",
        drill={KERNEL_SITE: eager_rule(kernel)} if kernel is not None else {},
        variants=(ASSIGNED_TWICE_LATER.get(owner.__qualname__, BEFORE_5_1),),
    )


def attention_rules(classes: Iterable[type], claimed: Iterable[str] = ()) -> tuple[Rule, ...]:
    """The kernel-call rules of every class in ``classes`` whose forward is on the shared attention interface, each
    after the eager kernel it drills into (once per kernel); forwards whose target is in ``claimed`` (another rule's)
    are left out."""
    taken = set(claimed)
    rules: dict[str, Rule] = {}
    for owner in dict.fromkeys(filter(None, map(defining_class, classes))):
        if f"{owner.__module__}:{owner.__qualname__}.forward" in taken or not on_shared_interface(owner):
            continue
        rule = kernel_rule(owner)
        for eager in rule.drill.values():
            rules.setdefault(eager.name, eager)
        rules.setdefault(rule.name, rule)
    return tuple(rules.values())
