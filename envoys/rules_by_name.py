"""The rules one name points at, found from its own modeling module alone: what ``python -m instrument.show NAME``
shows without building every tiny checkpoint.

A class transformers exports (``Qwen3VLModel``), a dotted path into
``transformers.models`` (``transformers.models.llava.modeling_llava.LlavaModel``,
``module:Class.forward``) or a rule's name (``qwen3_vl.deepstack``, named after
its modeling module) points at one modeling module. Its rules are the rules of
that module's classes (`rewrites.rules_for_classes`: the forwards a concern
recognises by their shape, every attention on the shared interface and the
eager kernel it drills into, the routers), and the scatter of each served
family whose host class the module defines. They are the rules every
checkpoint of those classes runs, whichever checkpoint it is, so they are the
catalogue's (`envoys.catalog`) for those forwards, found without importing
every family and building every checkpoint. A model_type (``qwen3_vl``) names a
family's checkpoints, whose rules come from several modules (a LLaVA's tower
and text model): the catalogue's.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from types import ModuleType

import torch
import transformers
from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES, model_type_to_module_name
from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES, MODEL_MAPPING_NAMES

from instrument import Rule
from rewrites import rules_for_classes
from rewrites.image_scatter import scatter_rule

from .families import Family, own_family

#: transformers' package of modeling code
MODELS = "transformers.models."


#: The modules of packages other than transformers whose forwards a rule rewrites, by the name their rules start with
#: (`rewrites.attention.model_type_of`): timm's attention, which PerceptionLM's tower runs.
OTHER_PACKAGES = {"timm": "timm.layers.attention"}


def modeling_module_of(name: str) -> ModuleType | None:
    """The transformers modeling module ``name`` points at (or the module of another package whose forwards a rule
    rewrites, `OTHER_PACKAGES`), imported alone, or None where it points at none."""
    dotted = name.replace(":", ".")
    package = next((package for package in (MODELS, *(f"{other}." for other in OTHER_PACKAGES))
                    if dotted.startswith(package)), None)
    model_type, dot, _ = dotted.partition(".")
    if package is not None:  # a dotted path: its longest importable module
        parts = dotted.split(".")
        shortest = package.count(".") + (1 if package == MODELS else 0)
        found = next(filter(None, (_module(".".join(parts[:end])) for end in range(len(parts), shortest, -1))), None)
        if found is not None or package == MODELS:
            return found
    if dot and model_type in OTHER_PACKAGES:  # a rule's name on another package's module
        return _module(OTHER_PACKAGES[model_type])
    if dot and model_type.isidentifier():  # a rule's name: its modeling module's model_type first
        return _module(f"{MODELS}{model_type}.modeling_{model_type}")
    if name.isidentifier() and name[:1].isupper():  # a class transformers exports
        try:
            found = getattr(transformers, name)
        except (AttributeError, ImportError):
            return None
        return sys.modules.get(found.__module__) if isinstance(found, type) else None
    return None


def _module(name: str) -> ModuleType | None:
    """The module ``name``, imported, or None where there is none."""
    try:
        return importlib.import_module(name) if importlib.util.find_spec(name) is not None else None
    except (ImportError, ValueError):
        return None


def host_of(family: Family, model_type: str) -> type | None:
    """The class whose forward scatters ``family``'s image features, off transformers' auto mappings (no model
    built): the family's `Scatter` host, the image-text-to-text class where the root scatters, else the base model
    (the wrapper's inner model, `Family.host_class`)."""
    if family.scatter.host is not None:
        return family.scatter.host
    names = MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES if family.scatter.in_root else MODEL_MAPPING_NAMES
    class_name = names.get(model_type)
    return getattr(transformers, class_name, None) if class_name else None


def hosts_in(module: ModuleType) -> list[tuple[Family, type]]:
    """Each served family whose scatter host ``module`` defines, with the host: the families of the model_types
    transformers keeps in the module's package (an omni model's thinker beside it), each family's module imported
    alone."""
    package = module.__name__.removeprefix(MODELS).partition(".")[0]
    found = []
    for model_type in CONFIG_MAPPING_NAMES:
        if model_type_to_module_name(model_type) != package:
            continue
        family = own_family(model_type)
        host = host_of(family, model_type) if family is not None and not family.text_only else None
        if host is not None and host.__module__ == module.__name__:
            found.append((family, host))
    return found


def rules_named(name: str) -> tuple[Rule, ...] | None:
    """The rules of the modeling module ``name`` points at (`modeling_module_of`): the scatter of each family whose
    host it defines, then the rules of its classes, each followed by the rules it drills into; None where ``name``
    points at no modeling module (a model_type, an unknown name: the catalogue decides)."""
    module = modeling_module_of(name)
    if module is None:
        return None
    classes = [value for value in vars(module).values()
               if isinstance(value, type) and issubclass(value, torch.nn.Module) and value.__module__ == module.__name__]
    scatters = tuple(scatter_rule(host, family.scatter) for family, host in hosts_in(module))
    found: dict[str, Rule] = {}
    for rule in (*scatters, *rules_for_classes(classes)):
        for each in (rule, *rule.drill.values()):  # and what it drills into (a scatter helper), as the catalogue lists
            found.setdefault(each.name, each)
    return tuple(found.values())
