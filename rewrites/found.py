"""Rules found from a forward's shape: which callees it calls, and how many times.

A `Template` is a rule without a target: the name's suffix, the sites (the
dotted callees and their labels), the purpose, the release variants, and the
shape a forward must have to get it. A class whose own forward (its innermost
function, read with `instrument.calls.callees`, on the class defining it) fits
a template gets the template's rule, named ``{model_type}.{suffix}`` after the
modeling module that defines the class (`rewrites.attention.model_type_of`)
and targeting that class's forward (`found_rules`).

A forward fits a template when it calls every callee of the template's sites
exactly as many times as the sites have labels, in the form the installed
release reads (the rule's own, or the variant `instrument.versions.for_installed`
picks), calls each callee of the template's ``shape`` (calls that are part of
the shape without being sites) as many times as it says (0: never), and, where
the template names a word (``named``), belongs to a class whose name holds it.
So a fitting forward is one the compiler finds every site in; a forward whose
calls differ in number is not guessed at, and is left to the other finders.

The templates are tried in order and the first that fits wins; a forward
another rule claims (``claimed``) is left out. A second class of one modeling
module with the same shape (Qwen3-Omni-MoE's talker beside its thinker's text
model) gets its rule too, named by its class (``{model_type}.{Class}.{suffix}``):
no class that fits is left without one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from instrument import Rule, Variant
from instrument.calls import bound_default, callees, defining_class, innermost
from instrument.versions import for_installed

from .attention import INTERFACE, eager_rule, model_type_of


@dataclass(frozen=True)
class Template:
    """The rule a forward of one shape gets, whichever class holds it."""

    suffix: str  #: the rule's name after the model_type: ``vision-attention``
    sites: Mapping[str, tuple[str, ...]]  #: dotted callee -> the labels of its call sites, as in `Rule.sites`
    purpose: str  #: one line: what the sites are for
    #: calls that belong to the shape without being sites: dotted callee -> how many times the forward makes it (0: none)
    shape: Mapping[str, int] = field(default_factory=dict)
    variants: tuple[Variant, ...] = ()  #: how older releases number or name the sites, as in `Rule.variants`
    #: a call served under another label on every release where the shape reads so, as `Variant.serve_as` does
    serve_as: Mapping[str, str] = field(default_factory=dict)
    named: str = ""  #: a word the class's name must hold (``Audio``), where two templates share a shape
    #: the served labels of calls of transformers' shared attention interface that drill into the eager kernel the
    #: forward binds by default (its softmax: the pattern of each call), where it binds one
    drill_kernel: tuple[str, ...] = ()

    def rule(self, owner: type) -> Rule:
        """The rule of ``owner``'s forward (``owner`` being the class that defines it)."""
        kernel = bound_default(innermost(owner.__dict__["forward"]), INTERFACE) if self.drill_kernel else None
        return Rule(
            f"{model_type_of(owner.__module__)}.{self.suffix}",
            f"{owner.__module__}:{owner.__qualname__}.forward",
            self.sites,
            self.purpose,
            variants=self.variants,
            serve_as=dict(self.serve_as),
            drill={label: eager_rule(kernel) for label in self.drill_kernel} if kernel is not None else {},
        )

    def fits(self, owner: type) -> bool:
        """Whether the forward ``owner`` defines has this template's shape (see the module docstring)."""
        if self.named not in owner.__qualname__:
            return False
        forward = innermost(owner.__dict__.get("forward"))
        if forward is None:
            return False
        made = callees(forward)
        if any(made[callee] != count for callee, count in self.shape.items()):
            return False
        installed = for_installed(self.rule(owner))
        return all(made[callee] == len(labels) for callee, labels in installed.sites.items())


def found_rules(classes: Iterable[type], templates: Iterable[Template], claimed: Iterable[str] = ()) -> tuple[Rule, ...]:
    """The rule of the first template each class's forward fits (once per defining class, in the classes' order),
    each after the eager kernel it drills into (once per kernel); forwards whose target is in ``claimed`` (another
    rule's) are left out."""
    templates = tuple(templates)
    taken = set(claimed)
    rules: dict[str, Rule] = {}
    for owner in dict.fromkeys(filter(None, map(defining_class, classes))):
        if f"{owner.__module__}:{owner.__qualname__}.forward" in taken:
            continue
        template = next((template for template in templates if template.fits(owner)), None)
        if template is not None:
            rule = template.rule(owner)
            if rule.name in rules:  # a second class of the module with the shape: named by its class, not dropped
                rule = replace(rule, name=f"{model_type_of(owner.__module__)}.{owner.__qualname__}.{template.suffix}")
            for eager in rule.drill.values():
                rules.setdefault(eager.name, eager)
            rules[rule.name] = rule
    return tuple(rules.values())
