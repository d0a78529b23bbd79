"""What a rule is: one target function and the calls in it to expose as sites.

A rule is data. The compiler (`instrument.compiler`) resolves the target, finds
the calls and checks that each callee occurs as often as the rule says, so a
transformers release that moved or renamed a call fails at build with a
`DriftError` instead of serving nothing in the middle of a trace.

A rule is written for the newest release it supports. Where an older release
numbers or names the calls differently, the rule holds a `Variant` for that
range of releases (`Rule.at` picks it; the compiler asks for the installed
release's), and the variant's calls are served under the labels the envoys
address (`Variant.serve_as`), so a value has one location on every release.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import ModuleType
from typing import Any

from packaging.version import Version


@dataclass(frozen=True)
class Variant:
    """How a rule reads on a range of releases of its target's library.

    ``versions`` is a PEP 440 specifier set on the library's version
    (``"<5.1"``, ``">=5.0,<5.17"``). Each field left None keeps the rule's own.
    ``sites`` replaces the callees and their labels, as that release's source
    numbers them (``{"attention_interface": ("attention_interface_2",)}``);
    ``serve_as`` maps such a label to the label the rule serves it under
    (``{"attention_interface_2": "attention_interface_1"}``: the same call,
    numbered differently because the release assigns the callee once more).
    ``unavailable`` says why the rule cannot be served on these releases at
    all (its structure differs) and what to read instead; the compiler then
    refuses it with that reason, which the values of its sites report.
    """

    versions: str  #: PEP 440 specifiers on the target library's version
    sites: Mapping[str, tuple[str, ...]] | None = None  #: callee -> labels, as this release numbers them
    serve_as: Mapping[str, str] = field(default_factory=dict)  #: this release's label -> the label served
    drill: Mapping[str, Rule] | None = None  #: served label -> rule for the function it calls
    unavailable: str | None = None  #: why the rule cannot be served on these releases
    note: str = ""  #: one line: what differs on these releases

    def matches(self, version: Version) -> bool:
        from packaging.specifiers import SpecifierSet  # tens of ms to import: only when a variant is chosen

        return SpecifierSet(self.versions).contains(version, prereleases=True)


@dataclass(frozen=True)
class Rule:
    """Expose the calls of ``target`` whose callee is a key of ``sites``.

    ``target`` is ``"package.module:Class.method"`` or ``"package.module:function"``.
    ``sites`` maps each dotted callee as written in the source
    (``"inputs_embeds.masked_scatter"``) to the labels its calls must get there,
    one per call site, as nnsight's ``.source`` names them
    (``("inputs_embeds_masked_scatter_0",)``). Every call of the callee becomes
    a site; the labels pin both how many there are and where they fall in the
    forward's numbering, which the envoys address them by.

    ``drill`` maps a site's label to a rule for the function that site calls
    (``attention_interface_1`` -> the rule for ``eager_attention_forward``):
    when that function is what the call reaches at run time, its rewritten
    form runs instead, its sites nested under the outer one exactly where
    nnsight's ``.source`` drill puts them
    (``{module}.source.attention_interface_1.source.nn_functional_softmax_0``).
    """

    name: str  #: short unique name, e.g. ``"llava-image-scatter"``
    target: str  #: ``"module:Qualified.name"`` of the function to rewrite
    sites: Mapping[str, tuple[str, ...]]  #: dotted callee -> the labels of its call sites
    purpose: str = ""  #: one line: what the sites are for
    drill: Mapping[str, Rule] = field(default_factory=dict)  #: site label -> rule for the function it calls
    variants: tuple[Variant, ...] = ()  #: how older releases differ, first match wins
    #: a label -> the label served: set by `at` from the variant chosen, or given where a rule serves a call under
    #: another label on every release it reads (its form of a forward that an older release shaped differently)
    serve_as: Mapping[str, str] = field(default_factory=dict)
    unavailable: str | None = None  #: set by `at`: why this release cannot be served
    variant: str = ""  #: set by `at`: the versions of the variant chosen, empty for the rule's own form
    variant_note: str = ""  #: set by `at`: what differs on the variant's releases (`Variant.note`)
    #: derived, never written in a rule: the model_types of the tiny checkpoints whose models run this forward
    #: (the rules package's catalogue sets it, for the commands that look rules up by model_type)
    model_types: tuple[str, ...] = ()

    def at(self, version: Version | str) -> Rule:
        """This rule as it reads on ``version`` of its library: the first matching variant applied, or itself."""
        version = Version(str(version))
        for variant in self.variants:
            if variant.matches(version):
                return replace(
                    self,
                    sites=self.sites if variant.sites is None else variant.sites,
                    drill=self.drill if variant.drill is None else variant.drill,
                    serve_as=dict(variant.serve_as),
                    unavailable=variant.unavailable,
                    variant=variant.versions,
                    variant_note=variant.note,
                    variants=(),
                )
        return replace(self, variants=()) if self.variants else self

    @property
    def module_name(self) -> str:
        return self.target.partition(":")[0]

    @property
    def qualname(self) -> str:
        return self.target.partition(":")[2]

    @property
    def owner_name(self) -> str | None:
        """The class holding the target, or None for a module-level function."""
        owner, _, _ = self.qualname.rpartition(".")
        return owner or None

    @property
    def attribute(self) -> str:
        return self.qualname.rpartition(".")[2]

    def resolve(self) -> tuple[ModuleType | type, Any]:
        """Import the target: its owner (class or module) and the attribute as the owner holds it.

        Raises ``LookupError`` naming what is missing.
        """
        module = importlib.import_module(self.module_name)
        owner: Any = module
        for part in self.qualname.split(".")[:-1]:
            owner = getattr(owner, part, None)
            if owner is None:
                raise LookupError(f"{self.module_name} has no {part!r} (looking for {self.qualname})")
        function = owner.__dict__.get(self.attribute) if isinstance(owner, type) else getattr(owner, self.attribute, None)
        if function is None:
            raise LookupError(f"{self.module_name}:{self.owner_name or ''} has no {self.attribute!r}")
        return owner, function
