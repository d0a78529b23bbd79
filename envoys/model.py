"""`StandardizedTransformer`: load an image-text-to-text checkpoint under the standard names.

Loading, in order: the config names the family (an unsupported model_type is
refused, listing the supported ones, and a checkpoint its family cannot serve,
such as BLIP-2 on Flan-T5, is refused saying why: `Quirks.unservable`); the model is built
on the meta device from its config, as nnsight builds by default (``dispatch=False``: no weight is read, and the
first local trace loads them), or loaded with its weights (``dispatch=True``) (a hub id and a local
``save_pretrained`` directory alike; a checkpoint of a family's text model saved alone, such as
``qwen3_5_text``, loads as the causal LM it is, with the text names, and ``model.vision`` says why it has
none); the family's
rewrite rules are compiled and installed on the modules whose forwards they
rewrite, the skeleton's and, at dispatch, the loaded ones (a rule that does not match the installed
transformers is recorded as the reason its values are unavailable, not raised); the processor is
loaded from the same path (``task="image-text-to-text"``) or only the
tokenizer (no task: no image can reach the model); then nnsight wraps the
model with the envoys found for it, and the family's names are bound as
nnsight's ``rename=`` binds them (`aliases`, in one pass). Everything that
can fail happens before the model is changed.

Under ``generate`` the image is encoded inside the first step's forward, as
transformers did before 5.24 (this instance, not the class, answers that it
takes no pre-computed encoder outputs), so reads follow the forward's order
on every step: ``image_token_mask``, the tower, the projector,
``image_features``, the text model. The tower runs once, on step 0.

On a server that holds the stock model (``remote=True``: NDIF), the envoys travel with the request and the
modules are the server's; each value is read there through nnsight's own ``.source`` (`envoys.core.backends`).
"""

from __future__ import annotations

import copy
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from nnsight import TransformersModel
from nnsight.intervention.interleaver import OutOfOrderError
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForImageTextToText,
    AutoProcessor,
    AutoTokenizer,
    PretrainedConfig,  # transformers 5 keeps this spelling as an alias of PreTrainedConfig
)

import instrument
from instrument import adopt, install_all

from .audio import Audio
from .core.aliases import bind_rename
from .core.backends import SitePlan
from .core.bugs import BrokenLoad
from .core.not_saved import bind_not_saved
from .core.standard import rows_over
from .core.values import standard_values
from .core.wording import a
from .families import Family, families_with, family_for
from .image.grids import ImageInputs, given_sizes, image_inputs_of
from .invokes import InvokeBatcher, LocatingInterleaver, batch_image_invokes
from .rules import rules_for_model
from .text.root import TextRoot
from .towers.timm_eager import run_eager_where_asked
from .tree import standard_tree
from .vision.crops import crops_of
from .vision.media import MEDIA, NO_IMAGE_IN_TRACE, carries, not_served
from .vision.tower import NoTower, Vision, carries_images, image_token_id, no_images
from .vision.video import VideoRun

IMAGE_TEXT_TO_TEXT = "image-text-to-text"
TEXT_GENERATION = "text-generation"

#: Keyword arguments that pick the checkpoint rather than configure the model.
HUB_KEYWORDS = ("revision", "token", "trust_remote_code", "cache_dir", "local_files_only")


def looks_like_path(name_or_path: str) -> bool:
    """Whether ``name_or_path`` is meant as a local folder rather than a hub id ``org/name`` (or ``name``).

    It starts with ``.``, ``/`` or ``~``, holds a separator other than the one slash of ``org/name``, or a
    leading part of it is a folder here.
    """
    if name_or_path.startswith((".", "/", "~")) or os.path.isabs(name_or_path):
        return True
    parts = name_or_path.replace(os.sep, "/").split("/")
    if len(parts) > 2 or (os.sep != "/" and os.sep in name_or_path):
        return True
    return len(parts) == 2 and os.path.isdir(parts[0])


def missing_folder(name_or_path: str) -> str | None:
    """Why ``name_or_path``, meant as a local folder (`looks_like_path`), cannot be loaded: it does not exist; or
    None (it exists, or it is a hub id, which ``from_pretrained`` fetches)."""
    if not looks_like_path(name_or_path):
        return None
    where = os.path.abspath(os.path.expanduser(name_or_path))
    if os.path.isdir(where):
        return None
    if os.path.exists(where):
        kind = "it is a file, not a folder"
    else:
        found = os.path.dirname(where)
        while not os.path.isdir(found):
            found = os.path.dirname(found)
        rest = os.path.relpath(where, found)
        kind = "no such folder" + (f" ({found} exists but holds no {rest!r})" if found != os.path.dirname(found) else "")
    return (
        f"no folder {name_or_path!r} ({where}): {kind}; a local checkpoint is a folder saved with "
        f"save_pretrained (the model and its processor), for example one envoys.testing.build_checkpoint writes; "
        f"a hub id such as 'org/name' is downloaded from the hub, which needs network access (or the hub's "
        f"local cache)"
    )


def neither_folder_nor_hub(name_or_path: str, error: Exception) -> str:
    """Why ``name_or_path`` loads neither as a folder here nor from the hub, saying both."""
    where = os.path.abspath(os.path.expanduser(name_or_path))
    return (
        f"{name_or_path!r} is not a folder here ({where} does not exist) and the hub did not give a checkpoint of "
        f"that id ({type(error).__name__}: {str(error).splitlines()[0] if str(error) else 'no detail'}); a local "
        f"checkpoint is a folder saved with save_pretrained (its config, processor and tokenizer files are enough "
        f"for a weightless client), and a hub id such as 'org/name' needs network access or the hub's local cache"
    )


def checkpoint_model_type(name_or_path: str, hub: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The checkpoint's ``model_type`` and its config as saved (a dict), read from its config file before anything
    is loaded.

    The config object itself is built once, by ``from_pretrained`` with the
    model (building it costs tens of milliseconds). A config that defers to
    remote code, or names no ``model_type``, is built here as `AutoConfig` builds it.
    """
    config_dict, _ = PretrainedConfig.get_config_dict(name_or_path, **hub)
    model_type = config_dict.get("model_type")
    if isinstance(model_type, str) and "AutoConfig" not in config_dict.get("auto_map", {}):
        return model_type, config_dict
    return AutoConfig.from_pretrained(name_or_path, **hub).model_type, config_dict


def install_rules(model: torch.nn.Module, family: Family) -> dict[str, str]:
    """Install every rule ``model`` runs (`envoys.rules`) that builds and may serve on the installed release
    (`instrument.checked`); the others, as reasons keyed ``module:Class``."""
    usable, failures = [], {}
    for rule in rules_for_model(model, family):
        try:  # the compiler and the release check load with the first model (instrument's lazy names), not on import
            instrument.check(instrument.compile_rule(rule))
        except (instrument.DriftError, instrument.Unchecked) as error:
            failures[f"{rule.module_name}:{rule.owner_name}"] = str(error)
            continue
        usable.append(rule)
    install_all(model, usable)
    return failures


#: The keyword arguments the model's skeleton takes as ``from_config`` does (the rest place or load weights).
SKELETON_KEYWORDS = ("attn_implementation", "dtype", "torch_dtype", "trust_remote_code")


def model_loader(family: Family) -> Any:
    """The transformers auto class a family's checkpoints load with: the causal LM for a text model saved alone."""
    return AutoModelForCausalLM if family.text_only else AutoModelForImageTextToText


def skeleton(name_or_path: str, family: Family, hub: dict[str, Any], load_kwargs: dict[str, Any]
             ) -> tuple[torch.nn.Module, frozenset[str]]:
    """The checkpoint's model on the meta device, built from its config alone (no weight is read): what a client of a
    remote model holds, and what nnsight builds by default (``dispatch=False``) until a local trace loads the weights;
    and the keyword arguments its config took.

    The config takes the keyword arguments that configure the model (``attn_implementation``, a config field's
    override, or ``config=`` itself), as ``from_pretrained`` would give them to it; placement and weight arguments
    wait for the load, which loads the weights into this config (`loaded`), edits made to it since included.
    """
    configuring = {key: value for key, value in load_kwargs.items()
                   if key not in ("config", "device_map", "max_memory", "offload_folder", "quantization_config",
                                  *HUB_KEYWORDS)
                   and not (key in ("dtype", "torch_dtype") and value == "auto")}
    if "config" in load_kwargs:
        config, unused = copy.deepcopy(load_kwargs["config"]), configuring
    else:
        config, unused = AutoConfig.from_pretrained(name_or_path, return_unused_kwargs=True, **hub, **configuring)
    building = {key: value for key, value in {**configuring, **hub}.items() if key in SKELETON_KEYWORDS}
    with torch.device("meta"):
        model = model_loader(family).from_config(config, **building)
    run_eager_where_asked(model)
    taken = frozenset(configuring) - frozenset(unused) - frozenset(SKELETON_KEYWORDS)
    return model.eval(), taken | {"config"}


def loaded(name_or_path: str, family: Family, device: Any, load_kwargs: dict[str, Any]) -> torch.nn.Module:
    """The checkpoint's model with its weights, on ``device`` where one is named, in eval mode; a load that hits the
    family's known transformers bug is refused (`BrokenLoad`)."""
    model = model_loader(family).from_pretrained(name_or_path, **load_kwargs)
    broken = family.quirks.load_bug(model)
    if broken is not None:
        raise BrokenLoad(broken)
    if device is not None:
        model = model.to(device)
    model.eval()
    run_eager_where_asked(model)
    _real_device_first(model)
    # generate would otherwise run the tower before step 0's forward (transformers 5.24);
    # an instance attribute, so only this model answers differently.
    model._supports_mm_encoder_outputs = encode_images_in_the_forward
    return model


def text_model_alone(model_class: str, model_type: str, family: str) -> str:
    """Why a checkpoint of a family's text model alone has no vision side."""
    return (
        f"this checkpoint is {model_class} ({model_type}), the text model of {family} saved alone: it has no "
        f"vision tower, projector or image scatter; load the {family} checkpoint with "
        f"task={IMAGE_TEXT_TO_TEXT!r} for the vision side"
    )


def encode_images_in_the_forward() -> bool:
    """``generate`` asks the model whether it takes pre-computed encoder outputs; this model says no.

    Set on the instance (a plain function, so the model still pickles), so
    that generate hands the pixels to step 0's forward, which runs the tower
    in its place in the forward's order.
    """
    return False


@contextmanager
def _unsupported_model_notice_muted() -> Iterator[None]:
    """Mute, while nnsight builds its pipeline, transformers' notice that a wrapper is "not supported for text-generation".

    A text-only load hands the multimodal wrapper to the text-generation
    pipeline, which works but logs a page-long error listing every causal LM;
    the filter drops that one record and is removed on the way out.
    """

    def keep(record: logging.LogRecord) -> bool:
        return "is not supported for" not in record.getMessage()

    logger = logging.getLogger("transformers.pipelines.base")
    logger.addFilter(keep)
    try:
        yield
    finally:
        logger.removeFilter(keep)


#: Why several invokes carrying images are refused on a server's model (NDIF): each invoke's part of a vision value is
#: found by the library's interleaver, and the server runs its own.
SEVERAL_IMAGE_INVOKES_REMOTE = (
    "several invokes carry images, and this model runs on a server (remote=True) whose interleaver cannot tell the "
    "library where each invoke's part of a vision value lies, so every invoke would read every image's rows; give "
    "the trace one invoke that carries every image (model.trace([prompt_a, prompt_b], images=[[image_a], "
    "[image_b]])), or run a trace per invoke"
)

#: Why ``model.pipe`` with several invokes carrying images is refused: nnsight batches text prompts for the pipeline,
#: and would merge the invokes' ``images=`` into one.
SEVERAL_IMAGE_INVOKES = (
    "model.pipe() batches text prompts only; run several invokes that carry images in model.trace() or "
    "model.generate(), where each invoke sees its own part of every value (envoys.invokes)."
)


def in_dtype(value: Any, dtype: torch.dtype) -> Any:
    """A floating-point tensor in ``dtype``; anything else as it is."""
    if isinstance(value, torch.Tensor) and value.is_floating_point() and value.dtype != dtype:
        return value.to(dtype)
    return value


def _real_device_first(model: torch.nn.Module) -> None:
    """Order an accelerate-dispatched model's ``hf_device_map`` with a device that runs code first (same entries).

    transformers' pipeline, which nnsight builds around the model, takes the
    first entry's device as the pipeline's device, and ``"disk"`` is no torch
    device: a ``device_map`` whose first entry is offloaded to disk would fail
    there. Only the order changes, on this instance.
    """
    device_map = getattr(model, "hf_device_map", None)
    if not isinstance(device_map, dict) or not device_map or next(iter(device_map.values())) != "disk":
        return
    placed = {name: device for name, device in device_map.items() if device != "disk"}
    if placed:
        model.hf_device_map = {**placed, **{name: device for name, device in device_map.items() if device == "disk"}}


class StandardizedTransformer(TextRoot, TransformersModel):
    """An image-text-to-text checkpoint under standard names, with its vision side readable and writable.

    ``StandardizedTransformer(name_or_path, task="image-text-to-text",
    device="cpu", attn_implementation="eager")``. Built without its weights,
    as nnsight builds by default; the first local trace loads them, or
    ``dispatch=True`` at once. Other keyword arguments go
    to ``from_pretrained``. ``model.processor``, ``model.tokenizer`` and
    ``model.config`` are there; ``model.layers[i]``, ``embed_tokens``,
    ``norm``, ``lm_head``, ``logits`` and the rest of the text surface
    (`TextRoot`: sizes, inputs, accessors, skip and steer) name the text
    model, ``model.vision`` and ``model.projector`` the vision side.
    Traces of one model from several threads run one at a time (`envoys.core.turns`).
    """

    _batcher_class = InvokeBatcher

    def __init__(
        self,
        name_or_path: str | os.PathLike[str],
        task: str | None = None,
        device: str | torch.device | None = None,
        processor: Any = None,
        tokenizer: Any = None,
        dispatch: bool = False,
        **load_kwargs: Any,
    ) -> None:
        if task not in (None, IMAGE_TEXT_TO_TEXT, TEXT_GENERATION):
            raise ValueError(f"task must be {IMAGE_TEXT_TO_TEXT!r} (or None for text only); got {task!r}")
        name_or_path = str(name_or_path)
        absent = missing_folder(name_or_path)
        if absent is not None:
            raise FileNotFoundError(absent)
        hub = {k: v for k, v in load_kwargs.items() if k in HUB_KEYWORDS}
        try:
            model_type, saved_config = checkpoint_model_type(name_or_path, hub)
        except OSError as error:  # not a folder here, and the hub did not give it
            raise OSError(neither_folder_nor_hub(name_or_path, error)) from error
        family = family_for(model_type)
        refused = family.quirks.unservable(saved_config)
        if refused is not None:
            raise ValueError(f"{name_or_path} is {a(model_type)} checkpoint that cannot be served: {refused}")
        if family.text_only and task == IMAGE_TEXT_TO_TEXT:
            raise ValueError(
                f"{name_or_path} is {a(model_type)} checkpoint, {family.model_type}'s text model saved alone: "
                f"it has no vision tower, so no image can reach it; load it without task= (text only), or load "
                f"the {family.model_type} checkpoint with task={IMAGE_TEXT_TO_TEXT!r}"
            )
        weightless = not dispatch
        if weightless:
            model, configured = skeleton(name_or_path, family, hub, load_kwargs)
        else:
            model, configured = loaded(name_or_path, family, device, load_kwargs), frozenset()
        if task == IMAGE_TEXT_TO_TEXT:
            processor = processor if processor is not None else AutoProcessor.from_pretrained(name_or_path, **hub)
            tokenizer = getattr(processor, "tokenizer", tokenizer)
        else:
            processor = None
            tokenizer = tokenizer if tokenizer is not None else AutoTokenizer.from_pretrained(name_or_path, **hub)
        # On a skeleton too: support() and every name read the rules the real modules will get at dispatch.
        failures = install_rules(model, family)
        self.family: Family = family
        self.rewrite_failures: dict[str, str] = failures
        with _unsupported_model_notice_muted():
            super().__init__(
                model,
                task=IMAGE_TEXT_TO_TEXT if processor is not None else TEXT_GENERATION,
                processor=processor,
                tokenizer=tokenizer,
                envoys=family.envoys_for(model),
                interleaver=LocatingInterleaver(),
                **({"device": "meta"} if weightless else {}),  # the pipeline's: a skeleton stays where it is
            )
        bind_rename(self, family.rename_for(model.config))  # nnsight's rename=, without its failed lookups
        adopt(model)  # modules accelerate hooks (device_map=) run the rewritten forward inside the hook
        # nnsight's Meta: a skeleton loads its weights on the first trace (`dispatch`), from these arguments.
        self.dispatched = not weightless
        self.args, self.kwargs = (name_or_path,), dict(load_kwargs)
        self.repo_id, self.revision = name_or_path, load_kwargs.get("revision")
        self.__dict__["_device"] = device
        self.__dict__["_configured"] = configured  # what the skeleton's config took: its config carries them
        #: the sites the installed rules serve, per module, as the forwards they were built from label them (`backends`)
        self.site_plan: SitePlan = SitePlan.of(self._module, self)
        #: what the processor gave the last batch that carried images (`envoys.image.grids`); None before one runs
        self.last_image_inputs: ImageInputs | None = None
        if family.text_only:
            absent = text_model_alone(type(model).__name__, model_type, family.model_type)
            self.vision = NoTower("vision", absent)
            self.projector = NoTower("projector", absent)
            self.video = NoTower("video", absent)
            self.audio = NoTower("audio", absent)
        self._bind_video_and_audio()
        self.crops = crops_of(self)  # the tower's second run, on the local crops, where the family has one

    def _load(self, name_or_path: str, **load_kwargs: Any) -> torch.nn.Module:
        """The model with its weights, loaded into the skeleton's config (with any edit made to it since), the family's
        rules installed on it: what `dispatch` swaps in for the skeleton."""
        configured = self.__dict__.get("_configured", frozenset())
        loading = {key: value for key, value in load_kwargs.items() if key not in configured}
        model = loaded(name_or_path, self.family, self.__dict__.get("_device"), {**loading, "config": self.config})
        install_rules(model, self.family)
        return model

    def dispatch(self) -> None:
        """Load the weights (nnsight's ``dispatch``): the envoys, names and aliases move onto the loaded modules,
        which run the rewritten forwards; a no-op once loaded."""
        if self.dispatched:
            return
        super().dispatch()
        adopt(self._module)
        self.pipeline.model = self._module
        self.pipeline.device = self._module.device

    def _remoteable_class(self) -> type:
        """The class NDIF knows the deployment by: nnsight's `TransformersModel`, as its `VisionLanguageModel` keys
        itself, so that ``remote=True`` names the deployment of the same checkpoint and task."""
        return TransformersModel

    def _bind_video_and_audio(self) -> None:
        """``model.video`` and ``model.audio``, where no rename bound them (Video-LLaVA's video tower, an audio tower):
        the tower's run on the videos (`VideoRun`), or what says why the model has none."""
        if "video" not in self.__dict__:
            reason = not_served(self, "video")
            vision = self.__dict__.get("vision")
            self.video = VideoRun(vision, vision) if reason is None and isinstance(vision, Vision) else NoTower(
                "video", reason or "this model has no vision tower")
        if "audio" not in self.__dict__:
            reason = not_served(self, "audio") or (
                f"this {self.family.model_type} checkpoint has no audio tower (its config's audio_config is None)")
            self.audio = NoTower("audio", reason)

    def batch_with_layout(self, invokes: list, fn: Any) -> tuple[tuple, dict, Any]:
        """The batch's ``(args, kwargs)`` and, where several invokes carry images, where each invoke's part of every
        value lies (`envoys.invokes`); else None, and nnsight's rows apply. What the model's batcher assembles."""
        several = len(invokes) > 1 and any(carries(kwargs, MEDIA) for _, kwargs in invokes)
        if not several:
            return (*self._batch(invokes, fn), None)
        if getattr(fn, "__name__", None) == "pipe":  # nnsight would hand the pipeline one invoke's images for all
            raise NotImplementedError(SEVERAL_IMAGE_INVOKES)
        if not isinstance(self.interleaver, LocatingInterleaver):  # a server's: it would serve every invoke all rows
            raise NotImplementedError(SEVERAL_IMAGE_INVOKES_REMOTE)
        kwargs, layout = batch_image_invokes(self, invokes)
        return (), self._prepared(kwargs, invokes), layout

    def _batch(self, invokes: list, fn: Any) -> tuple:
        """nnsight's batched inputs, their floating-point tensors in the model's dtype (`_prepared`)."""
        args, kwargs = super()._batch(invokes, fn)
        return args, self._prepared(kwargs, invokes)

    def _prepared(self, kwargs: dict[str, Any], invokes: list) -> dict[str, Any]:
        """A batch's keyword inputs, floating-point tensors in the model's dtype, checked and recorded.

        As transformers' image-text-to-text pipeline casts the processor's
        output (``BatchFeature.to(dtype)``): an image processor that returns
        pixels in another dtype (Llama 4's computes them in bfloat16) then
        reaches a float32 model as it reaches a bfloat16 one. A batch that
        carries images is recorded as ``last_image_inputs``, for the grids.
        """
        kwargs = {key: in_dtype(value, self._module.dtype) for key, value in kwargs.items()}
        self.__dict__["_image_in_batch"] = carries_images(kwargs) or any(carries_images(kw) for _, kw in invokes)
        self._refuse_more_images_than_prompts(kwargs)
        self._record_image_inputs(kwargs, invokes)
        return kwargs

    def _refuse_more_images_than_prompts(self, kwargs: dict[str, Any]) -> None:
        """Refuse, before the model runs, a batch with more images than its prompts take, on a family whose
        processor writes a fixed run of image tokens per prompt (``images_per_prompt``): the host would scatter as
        many rows as the prompts have image tokens and drop the rest, or fail."""
        most = self.family.batching.images_per_prompt
        pixels, ids = kwargs.get("pixel_values"), kwargs.get("input_ids")
        if most is None or not isinstance(pixels, torch.Tensor) or not isinstance(ids, torch.Tensor):
            return
        images, prompts = pixels.shape[0], ids.shape[0]
        if images > most * prompts:
            raise ValueError(
                f"{images} images for {prompts} prompt(s): {a(self.family.model_type)} prompt takes {most} image(s), "
                f"its processor writing one run of image tokens at the start of each prompt, and the model would "
                f"scatter only as many images as the prompts have runs; give each image its own prompt "
                f"(model.trace([prompt] * {images}, images=images))"
            )

    def _record_image_inputs(self, kwargs: dict[str, Any], invokes: list) -> None:
        """Keep a batch's image inputs as ``last_image_inputs`` when it carries images and its input_ids, with the
        sizes of the images the invokes handed the processor."""
        if self.family.text_only or not carries_images(kwargs) or not isinstance(kwargs.get("input_ids"), torch.Tensor):
            return
        mask = kwargs["input_ids"] == image_token_id(self.config)
        self.last_image_inputs = image_inputs_of(kwargs, mask, self.config, self.processor, given_sizes(invokes))

    def interleave(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """nnsight's run of the model; an error that is the family's known transformers bug comes out explained.

        A variable of the trace left bound to a standard value it did not save is bound to a `NotSaved` that
        says so (`envoys.core.not_saved`). An out-of-order read in a trace whose inputs carry no image (nnsight's own
        ``projector.output``, say) adds that no image reached the forward. Whether the run is a ``generate`` is kept while it lasts, for the values a
        family's own generate does not compute in a forward (`envoys.vision.tower.generated_apart`).

        Only while the bug's condition holds (`envoys.core.bugs`), and only for an
        error of that bug: it is re-raised as a `TransformersBug` naming it and
        the workaround, the original chained as its cause.
        """
        mediators = list(self.interleaver.mediators)
        self.__dict__["_served"] = {}
        self.__dict__["_generating"] = generating = getattr(fn, "__name__", None) == "generate"  # `generated_apart`
        encoding_set = False
        if self.site_plan.on_stock_model(self):
            # A server's stock model (the envoys came with a request): its sites through nnsight's .source, and its
            # images encoded in step 0's forward, as locally, for this request only.
            self.__dict__["_stock_sites"] = self.site_plan.resolve(self)
            if generating and "_supports_mm_encoder_outputs" not in self._module.__dict__:
                self._module._supports_mm_encoder_outputs = encode_images_in_the_forward
                encoding_set = True
        try:
            result = super().interleave(fn, *args, **kwargs)
            bind_not_saved(mediators, self.__dict__["_served"])
            return result
        except OutOfOrderError as error:
            if not self.__dict__.get("_image_in_batch", True):  # nnsight's own value of a module no image ran
                error.args = (f"{error.args[0] if error.args else error}; {NO_IMAGE_IN_TRACE}", *error.args[1:])
            raise
        except Exception as error:
            bug = self.family.quirks.forward_bug
            explained = bug.translate(error) if bug is not None else None
            if explained is None:
                raise
            raise explained from error
        finally:
            self.__dict__["_served"] = {}
            self.__dict__["_generating"] = False
            self.__dict__.pop("_image_in_batch", None)
            self.__dict__.pop("_stock_sites", None)
            if encoding_set:
                del self._module.__dict__["_supports_mm_encoder_outputs"]

    def record_served(self, label: str, value: Any) -> None:
        """Note a standard value handed out in the running trace, so that a variable left holding it unsaved
        says so after the trace (`envoys.core.not_saved`)."""
        served = self.__dict__.get("_served")
        if served is not None:
            served[id(value)] = (label, value)

    def __deepcopy__(self, memo: dict) -> StandardizedTransformer:
        """A copy with its own model, rewrites and routes: a trace of the copy reads and writes the copy only.

        The model's modules copy with their rewrites reinstalled (`instrument.install`); nnsight's envoys
        copy without their routes (a module's `State` drops them), so each copied envoy is routed through
        the copy's interleaver again, under the same path.
        """
        clone = type(self).__new__(type(self))
        memo[id(self)] = clone
        clone.__setstate__(copy.deepcopy(self.__getstate__(), memo))
        interleaver = clone.interleaver
        interleaver.envoys.clear()
        for envoy in clone.modules():
            interleaver.envoys[id(envoy._module)] = envoy
            interleaver.instrument(envoy)
        return clone

    @property
    def config(self) -> Any:
        return self._module.config

    @property
    def device(self) -> torch.device | None:
        """Where inputs go: accelerate's execution device on a dispatched model, else the first parameter's.

        With parts offloaded (``device_map=`` with ``"disk"`` or ``"cpu"``
        offload), the first parameter may be a meta placeholder; the root's
        hook runs the model on its execution device, which is where nnsight
        has to put the inputs.
        """
        hook = self._module.__dict__.get("_hf_hook")
        execution = getattr(hook, "execution_device", None)
        if execution is not None:
            return torch.device(execution if not isinstance(execution, int) else f"cuda:{execution}")
        return super().device

    @staticmethod
    def families_with(value: str) -> dict[str, list[str]]:
        """Which supported families have the standard value ``value``: place -> model_types (`envoys.families`)."""
        return families_with(value)

    def support(self) -> dict[str, Any]:
        """Every standard value of this checkpoint: None when available (on every block), else why not.

        The root's values, every text block value over ``layers``
        (``{layer: reason}`` where some blocks lack it), the tower's values
        under ``vision.`` (none on a load no image reaches; ``vision.video_*``
        the video's), ``video`` (None where the tower's run on the videos is
        served, as ``model.video``, else why not; a video tower of its own
        under ``video.``) and the audio tower's values under ``audio.`` (or
        ``audio``: why the model has none). While the family's
        known transformers bug breaks the root's forward (`envoys.core.bugs`),
        ``output`` and ``generate`` are listed too, with its explanation.
        """
        rows: dict[str, Any] = {name: value.reason(self) for name, value in standard_values(type(self)).items()}
        bug = self.family.quirks.forward_bug.reason() if self.family.quirks.forward_bug is not None else None
        if bug is not None:  # the root's own return, and generate, which runs it
            rows.update({"output": bug, "generate": bug})
        rows.update(rows_over(list(self.layers)))
        vision = self.__dict__.get("vision")
        if isinstance(vision, Vision) and no_images(vision) is None:
            rows.update({f"vision.{name}": reason for name, reason in vision.support().items()})
        video = self.__dict__.get("video")
        if isinstance(video, Vision):  # a tower of its own for videos (Video-LLaVA's)
            rows.update({f"video.{name}": reason for name, reason in video.support().items()})
        else:
            rows["video"] = video.reason if isinstance(video, NoTower) else None
        if self.family.crops is not None:  # the tower's run on the local crops (model.crops)
            crops = self.__dict__.get("crops")
            rows["crops"] = crops.reason if isinstance(crops, NoTower) else None
        audio = self.__dict__.get("audio")
        if isinstance(audio, Audio):
            rows.update({f"audio.{name}": reason for name, reason in audio.support().items()})
        elif isinstance(audio, NoTower):
            rows["audio"] = audio.reason
        return rows

    def __repr__(self) -> str:
        vision = self.__dict__.get("vision")
        towers = (
            f"; vision: {vision.num_layers} blocks of width {vision.vision_hidden_size}"
            if isinstance(vision, Vision) else "; no vision tower"
        )
        title = (
            f"StandardizedTransformer({self.config.model_type}: {type(self._module).__name__}; "
            f"text: {self.num_layers} blocks of width {self.hidden_size}{towers})"
        )
        return standard_tree(self, title)
