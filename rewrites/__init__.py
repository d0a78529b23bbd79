"""The rules: which forwards are rewritten, and which calls in them become sites.

Every rule is data (`instrument.Rule`) found from a model's classes; none
names a particular forward:

- the rule of every forward of a shape some concern recognises (`FOUND`,
  `found`): a packed tower's per-image attention, and an audio tower's;
  RADIO's attention; a windowed tower's window order; DeepStack; the gated
  DeltaNet; a text block viewing its feed-forward into the stream's shape; a
  SAM-style encoder's softmax and windows; timm's rotary attention; a residual gate's scales;
- the kernel call of every other attention class on transformers' shared
  interface (`attention`), and the logits call of every mixture-of-experts
  router (`router`);
- the scatter in a family's host forward (`image_scatter`: the family states
  only what differs, in a `Scatter`).

Each module defines its site labels once, as constants the envoys import.
`rules_for_classes` gives the rules for the classes a model holds, but the
scatter, which needs the family (`envoys.rules` adds it).
"""

from __future__ import annotations

from collections.abc import Iterable

from instrument import Rule
from instrument.calls import defining_class

from . import (
    deepstack,
    deltanet,
    feed_forward,
    qwen_vit_attention,
    qwen_vit_windows,
    radio_attention,
    residual_gate,
    sam_vision,
    timm_attention,
)
from .attention import attention_rules
from .found import Template, found_rules
from .router import router_rules

#: The shapes a forward is given a rule for, by concern, in the order they are tried (the first that fits wins).
FOUND: tuple[Template, ...] = (
    *qwen_vit_attention.TEMPLATES,
    *radio_attention.TEMPLATES,
    *qwen_vit_windows.TEMPLATES,
    *deepstack.TEMPLATES,
    *deltanet.TEMPLATES,
    *feed_forward.TEMPLATES,
    *sam_vision.TEMPLATES,
    *residual_gate.TEMPLATES,
    *timm_attention.TEMPLATES,
)


def target_of(cls: type) -> str:
    """The target a rule would name for ``cls``'s forward: ``module:Class.forward`` of the class defining it."""
    owner = defining_class(cls) or cls
    return f"{owner.__module__}:{owner.__qualname__}.forward"


def of_particular_forwards(rule: Rule) -> bool:
    """Whether ``rule`` is one concern's rule of a particular forward (found from the forward's shape), rather than the
    shared attention, eager-kernel or router rule of a class, or a host's scatter."""
    return rule.name.rpartition(".")[2] in {template.suffix for template in FOUND}


def rules_for_classes(classes: Iterable[type]) -> tuple[Rule, ...]:
    """The rules for module classes a model holds: the rules of the forwards whose shape fits a template (`FOUND`),
    then an attention rule for every other class on the shared attention interface (each after the eager kernel it
    drills into), then a rule for every mixture-of-experts router's logits call."""
    classes = tuple(dict.fromkeys(classes))
    found = found_rules(classes, FOUND)
    claimed = [rule.target for rule in found]
    every = found + attention_rules(classes, claimed=claimed) + router_rules(classes, claimed=claimed)
    return tuple({rule.name: rule for rule in reversed(every)}[name] for name in dict.fromkeys(r.name for r in every))
