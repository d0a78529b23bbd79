"""The supported families: one module per model_type, each with its RENAME and ENVOYS.

A family module defines ``FAMILY``; every module of this package that does is
a supported model_type (nothing else to register). A family says only what is
particular to it: the native names of its modules
under the standard ones (``RENAME``), the envoy classes of its tower
(``ENVOYS``), where its text blocks are (``TEXT_LAYERS``), and how its host
scatters the image features where that differs from the wrapper's inner
model calling ``inputs_embeds.masked_scatter`` (a `Scatter`: a wrapper that
scatters in its own forward, a helper); where the
root's own output cannot be had, which module's output carries the logits
and the transformers bug that breaks the root (its `Quirks`); and where
each image's rows are in its values (``grid_layout``, `envoys.image.grids`). The text
model's envoys (`Layer`, `Attention`, `Mlp`) are found from the blocks
themselves, whatever text model the checkpoint pairs the tower with, and so
are the rules to install (`envoys.rules`): the scatter in the host's forward
and the attention kernel of every attention class the model holds.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from nnsight import Envoy
from transformers import MODEL_MAPPING

from rewrites.image_scatter import Scatter

from ..blocks.moe import RoutedMlp, routes
from ..core.bugs import KnownBug
from ..core.standard import Blocks
from ..core.values import standard_values
from ..image.grids import GridLayout
from ..text.blocks import Attention, Layer, Mlp, TextModel
from ..vision.crops import Crops
from ..vision.scatter_host import ImageScatter
from ..vision.tower import Vision, VisionAttention, VisionLayer, VisionMlp
from ..vision.visual_tokens import VisualTokenizerProjector


def inner_model_class(model: torch.nn.Module) -> type | None:
    """The class of the wrapper's inner model (``LlavaModel`` in a ``LlavaForConditionalGeneration``), or None.

    Its ``base_model``; where the wrapper names none (before transformers 5.0
    the wrappers' ``base_model_prefix`` is empty), its child of the class
    transformers maps the config to as its base model (``MODEL_MAPPING``).
    """
    inner = getattr(model, "base_model", model)
    if inner is not model:
        return type(inner)
    try:
        base = MODEL_MAPPING[type(model.config)]
    except (KeyError, ValueError):
        return None
    return base if any(type(child) is base for child in model.children()) else None


@dataclass(frozen=True)
class Media:
    """What a family serves beside the images, and how (`envoys.vision.media`).

    ``served``: "image" always; "video" for ``vision.video_token_mask``,
    ``vision.video_features`` and the tower's values on the videos
    (``model.video``); "audio" for ``model.audio``. Each is scattered at the
    host's call its `Scatter` names for it (``Scatter.media``). ``medium in
    media`` asks whether it is served.
    """

    served: tuple[str, ...] = ("image",)
    #: why a medium the host scatters is not served on this family, where that is not just "not yet": medium -> why
    not_served: Mapping[str, str] = field(default_factory=dict)
    #: the path from the root of a tower that runs on the videos alone (Video-LLaVA's ``model.video_tower``), or None:
    #: the image tower runs on the videos too, once for the images and once for the videos
    video_tower: str | None = None

    def __contains__(self, medium: object) -> bool:
        return medium in self.served

    def __iter__(self) -> Iterator[str]:
        return iter(self.served)


#: A family whose host scatters a prompt's videos after its images, on the image tower.
IMAGE_AND_VIDEO = Media(("image", "video"))


@dataclass(frozen=True)
class Batching:
    """How a family's invokes share one batch (`envoys.invokes`), where that differs from the common case."""

    #: the most images one prompt takes, where the processor writes a fixed run of image tokens per prompt (BLIP-2's:
    #: 1); None for any number
    images_per_prompt: int | None = None
    #: why an invoke without images cannot share a batch with invokes that carry images (InstructBLIP's Q-Former reads
    #: one instruction per image, from every prompt of the batch), or None
    text_invokes: str | None = None
    #: why invokes cannot share one batch where any of them carries images (Mllama pads every prompt's images to the
    #: batch's most, so an invoke's rows of the tower hold padding images of the batch's making), or None
    image_invokes: str | None = None
    #: why an invoke's text values differ from its prompt traced alone when several invokes share a batch, beyond float
    #: reassociation, as the family's own forward makes them, or None
    invokes_differ: str | None = None
    #: the position the text model gives a prompt's first token when it is given none (PaliGemma counts from 1): where
    #: several invokes are left-padded into one batch, each row's positions are counted from its first token from here
    first_position: int = 0
    #: the axis along which the processor joins several prompts' image inputs, where it is not the first (MiniCPM-V
    #: packs every image's patches along the last axis of one row): input key -> axis
    input_axes: Mapping[str, int] = field(default_factory=dict)
    #: an input whose entries index the rows of another input, its first two axes flattened, -1 a padding slot (Molmo
    #: 2's image_token_pooling, rows of its pixel_values' crops x patches): input key -> the key it indexes; several
    #: invokes' entries are moved past the earlier invokes' rows, as the processor numbers several images'
    indexes: Mapping[str, str] = field(default_factory=dict)
    #: forward keywords holding one entry per image as a list, not a tensor (Unlimited-OCR's num_local_patches and
    #: patches_grid, which its processor leaves unconverted): several invokes' lists are joined in invoke order
    per_image_lists: tuple[str, ...] = ()


@dataclass(frozen=True)
class Quirks:
    """What is particular to a family's root: how it loads, runs and generates, where that is not the common case."""

    logits_at: str = ""  #: the module whose output's ``logits`` are the logits, from the root ("" the root itself)
    forward_bug: KnownBug | None = None  #: a transformers bug that makes the root's forward fail, if any
    #: why transformers' loading left this model unable to run (a bug of the installed release), or None
    load_bug: Callable[[torch.nn.Module], str | None] = field(default=lambda model: None)
    #: why a checkpoint of this model_type cannot be served, read off its config as saved (a dict) before anything is
    #: loaded, or None (BLIP-2 on an encoder-decoder text model)
    unservable: Callable[[dict[str, Any]], str | None] = field(default=lambda config: None)
    #: what generate serves and does not, where the class generates in its own way (not through the root's forward)
    generate_note: str | None = None


#: Where a causal LM (a checkpoint of a text model alone) holds its text model.
CAUSAL_LM_BASE = "model"


@dataclass(frozen=True)
class Family:
    """What is particular to one model_type."""

    model_type: str
    #: native path -> standard name (nnsight's ``rename=``); a module class as a key names a block's child by what
    #: it is, for a hybrid that holds different sublayers under one native name
    rename: Mapping[str | type, str]
    envoys: Mapping[type, type]  #: module type -> envoy class, for the tower (and a scatter host of its own kind)
    text_layers: str  #: the text blocks' path from the root
    scatter: Scatter = Scatter()  #: how the host writes the image features in, where it differs from the default
    extra_rename: Callable[[Any], Mapping[str | type, str]] = field(default=lambda config: {})  #: per-checkpoint names
    text_model_types: tuple[str, ...] = ()  #: model_types of this family's text model saved alone
    text_only: bool = False  #: this is the family of such a checkpoint: no tower, no scatter
    grid_layout: GridLayout | None = None  #: where each image's rows are, for ``vision.patch_grid`` / ``token_grid``
    #: why an envoy of the tower's classes is not served, or None: a module of a served class that no image runs
    #: through (Video-LLaVA's video tower, a second CLIP tower), whose values are then all `Unavailable`
    not_served: Callable[[Any], str | None] = field(default=lambda envoy: None)
    media: Media = Media()  #: what it serves beside the images
    batching: Batching = Batching()  #: how its invokes share a batch
    quirks: Quirks = Quirks()  #: how its root loads, runs and generates
    #: where its host runs the tower a second time in one forward, on the local crops (``model.crops``), or None
    crops: Crops | None = None

    @property
    def root_scatter(self) -> str | None:
        """The image scatter's site in the root's own forward, where the root scatters (the spec's ROOT_SCATTER)."""
        return self.scatter.site if self.scatter.in_root and not self.text_only else None

    def for_text_model(self) -> Family:
        """This family for a checkpoint of its text model alone (a causal LM): its text names moved to the top.

        The wrapper's keys under the text model's path (``model.language_model.layers``)
        are moved to the causal LM's (``model.layers``); the keys relative to a
        block (a family's spelling of a norm or an MLP) apply as they are.
        """
        prefix = self.text_layers.rpartition(".")[0] + "."
        moved = {f"{CAUSAL_LM_BASE}.{key[len(prefix):]}": name for key, name in self.rename.items()
                 if isinstance(key, str) and key.startswith(prefix)}
        return replace(self, rename={**self.rename, **moved}, text_layers=f"{CAUSAL_LM_BASE}.layers",
                       quirks=replace(self.quirks, logits_at="", forward_bug=None), text_only=True)

    def host_class(self, model: torch.nn.Module) -> type | None:
        """The class whose forward scatters the image features, or None on a text-only family.

        The family's `Scatter` names it where it is not the default (the root in
        ``in_root``, another class in ``host``); by default it is the wrapper's
        inner model (`inner_model_class`). None too where the model has no inner
        model and the family names no host.
        """
        if self.text_only:
            return None
        if self.scatter.in_root:
            return type(model)
        if self.scatter.host is not None:
            return self.scatter.host
        return inner_model_class(model)

    def rename_for(self, config: Any) -> dict[str | type, str]:
        """The ``rename=`` for one checkpoint of this family."""
        return {**self.rename, **self.extra_rename(config)}

    def envoys_for(self, model: torch.nn.Module) -> dict[type, type]:
        """The ``envoys=`` for one loaded model: the text model's, found from its blocks, and the scatter host's
        (`ImageScatter`, unless the family keys an envoy of its own to the host class), then the family's.

        Where some block's MLP is a mixture of experts with a router (`envoys.blocks.moe`), every block's MLP is a
        `RoutedMlp`: ``router_logits`` on the sparse ones, and on the dense ones the reason they have none.

        Every ``ModuleList`` (the blocks, text and tower) is a `Blocks`, whose index past the end says how many
        there are. Every other module gets nnsight's plain `Envoy`, by the ``torch.nn.Module`` key that every module's
        class lookup ends on: the map is by class only, and without that key nnsight would spell each
        module's path under every ``rename`` alias to look for path keys there are none of.
        """
        blocks = model.get_submodule(self.text_layers)
        found: dict[type, type] = {type(model.get_submodule(self.text_layers.rpartition(".")[0])): TextModel}
        host = self.host_class(model)
        if host is not None and host is not type(model):
            found[host] = ImageScatter
        mlps = [getattr(block, "mlp", None) for block in blocks]
        sparse = any(isinstance(mlp, torch.nn.Module) and routes(mlp) for mlp in mlps)
        for block in blocks:
            found[type(block)] = Layer
            for name, envoy in (("self_attn", Attention), ("mlp", RoutedMlp if sparse else Mlp)):
                part = getattr(block, name, None)
                if isinstance(part, torch.nn.Module):
                    found[type(part)] = envoy
        return {torch.nn.ModuleList: Blocks, **found, **self.envoys, torch.nn.Module: Envoy}


def families() -> tuple[Family, ...]:
    """Every supported family."""
    return tuple(_registry().values())


def served_model_types() -> list[str]:
    """Every supported family's model_type, sorted (what `maintain.hf_tests` runs transformers' tests of)."""
    return sorted(family.model_type for family in families())


def place_of(envoy_class: type) -> str:
    """Where an envoy of ``envoy_class`` is, spelled from the root: ``model.vision.layers[i].self_attn``."""
    places = (
        (VisionAttention, "model.vision.layers[i].self_attn"), (VisionMlp, "model.vision.layers[i].mlp"),
        (VisionLayer, "model.vision.layers[i]"), (Vision, "model.vision"), (ImageScatter, "the image scatter's host"),
        (VisualTokenizerProjector, "model.projector"),
        (Attention, "model.layers[i].self_attn"), (Mlp, "model.layers[i].mlp"), (Layer, "model.layers[i]"),
        (TextModel, "the text model"),
    )
    return next((place for cls, place in places if issubclass(envoy_class, cls)), envoy_class.__name__)


def families_with(value: str) -> dict[str, list[str]]:
    """Which families have the standard value ``value``, read off their envoys: place (`place_of`) -> model_types.

    A value of the envoys every family's text model gets (`Family.envoys_for`) is under ``"every family"``; a
    router's (`RoutedMlp`) under the text models with a mixture of experts; a value most families have, under
    ``"every family but ..."``.
    """
    found: dict[str, list[str]] = {}
    shared = {TextModel: "every family", Layer: "every family", Attention: "every family", Mlp: "every family",
              RoutedMlp: "text models with a mixture of experts"}
    for cls, who in shared.items():
        if value in standard_values(cls):
            found.setdefault(place_of(cls), []).append(who)
    for family in families():
        for cls in dict.fromkeys(family.envoys.values()):
            if value in standard_values(cls):
                where = found.setdefault(place_of(cls), [])
                if family.model_type not in where and "every family" not in where:
                    where.append(family.model_type)
    every = {family.model_type for family in families()}
    for place, who in found.items():
        if len(set(who) & every) > len(every) / 2:  # most families: name the ones without it
            without = sorted(every - set(who))
            found[place] = [f"every family but {', '.join(without)}" if without else "every family"]
    return found


#: Packages a family's tower needs besides transformers (none of the library's own dependencies): package -> why.
OPTIONAL_PACKAGES = {"timm": "its tower is a timm model in transformers' TimmWrapper; pip install timm"}


def absent_from_release(module_name: str, error: ImportError) -> str | None:
    """Why ``module_name`` (a family's module, named after its model_type) cannot load on the installed
    transformers, when the reason is that this release lacks the model ("target absent") or that a package its
    tower needs is not installed (`OPTIONAL_PACKAGES`); else None."""
    model_type = module_name.rpartition(".")[2]
    if isinstance(error, ModuleNotFoundError) and error.name in OPTIONAL_PACKAGES:
        return f"needs the {error.name} package, which is not installed: {OPTIONAL_PACKAGES[error.name]}"
    if importlib.util.find_spec(f"transformers.models.{model_type}") is not None:
        return None
    import transformers

    return (
        f"target absent: transformers {transformers.__version__} has no transformers.models.{model_type} "
        f"(the model came in a later release): {error}"
    )


#: Families whose model the installed transformers lacks: model_type -> why.
ABSENT: dict[str, str] = {}


def _registry() -> dict[str, Family]:
    """Every family: the ``FAMILY`` of each module in this package (a module without one is a shared helper).

    A family whose model the installed transformers lacks is left out, its
    reason kept in `ABSENT`.
    """
    found: dict[str, Family] = {}
    for info in pkgutil.iter_modules(__path__):
        try:
            module = importlib.import_module(f"{__name__}.{info.name}")
        except ImportError as error:
            reason = absent_from_release(info.name, error)
            if reason is None:
                raise
            ABSENT[info.name] = reason
            continue
        family = getattr(module, "FAMILY", None)
        if isinstance(family, Family):
            found[family.model_type] = family
    return found


def own_family(model_type: str) -> Family | None:
    """The family of the module named ``model_type``, importing that module alone; None when there is none
    (or it cannot load here: `_registry` then says why). Every family's module is named after its model_type (a
    hyphen an underscore)."""
    module = model_type.replace("-", "_")  # a hyphen in a model_type is an underscore in its module's name
    name = f"{__name__}.{module}"
    if not module.isidentifier() or importlib.util.find_spec(name) is None:
        return None
    try:
        family = getattr(importlib.import_module(name), "FAMILY", None)
    except ImportError:
        return None
    return family if isinstance(family, Family) and family.model_type == model_type else None


def family_for(model_type: str) -> Family:
    """The family of ``model_type`` (its text-only form for a text model's model_type); ValueError listing the
    supported ones otherwise.

    A family's module is named after its model_type, so only that module is
    imported (each imports its transformers models); the others are imported
    only for a model_type no module is named after.
    """
    own = own_family(model_type)
    if own is not None:
        return own
    registry = _registry()
    if model_type in registry:
        return registry[model_type]
    for family in registry.values():
        if model_type in family.text_model_types:
            return family.for_text_model()
    if model_type in ABSENT:
        raise ValueError(f"model_type {model_type!r} is not supported on this release: {ABSENT[model_type]}")
    text = sorted(t for family in registry.values() for t in family.text_model_types)
    raise ValueError(
        f"model_type {model_type!r} is not supported; supported model_types: {', '.join(sorted(registry))}"
        + (f" (and their text models saved alone: {', '.join(text)})" if text else "")
    )
