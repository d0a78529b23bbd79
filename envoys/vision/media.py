"""The media a host scatters into the text stream (images, videos, audio): what carries each in a trace, where each
one's placeholder tokens are, and the two values each served medium has.

A family says which media it serves (`Family.media`) and its host's `Scatter`
which of its calls carries which (``media``: images, then videos, then audio
on the hosts we serve). For each served medium the wrapper's forward puts
placeholder tokens in the prompt (``input_ids == config.<medium>_token_id``)
and scatters that medium's features there; so, per medium,
``layers[0].input[<medium>_token_mask] == <medium>_features``.

`token_mask` and `scattered_features` make those two values for one medium;
``vision.image_token_mask`` and ``vision.image_features`` are the image's,
``vision.video_token_mask`` and ``vision.video_features`` the video's, and
``audio.audio_token_mask`` and ``audio.audio_features`` the audio's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from nnsight.intervention.interleaver import Mediator
from nnsight.intervention.source import STATE

from rewrites.image_scatter import MEDIA

from ..core.standard import missing_site, op_label
from ..core.values import Argument, EProperty, value
from ..core.wording import a
from .scatter_host import scatter_host

#: What carries each medium in a trace: the processor's keyword, then the forward's arguments (Video-LLaVA's
#: processor names the images ``pixel_values_images``; a family that encodes the image before the forward passes
#: ``mm_encoder_outputs``).
CARRIERS: Mapping[str, tuple[str, ...]] = {
    "image": ("images", "pixel_values", "pixel_values_images", "mm_encoder_outputs"),
    "video": ("videos", "pixel_values_videos"),
    "audio": ("audio", "input_features"),
}

#: What to pass for each medium, in the messages of values a trace without it cannot have.
HOW_TO_PASS = {
    "image": "model.trace(prompt, images=[image]), the prompt from the processor's chat template "
             "(envoys.testing.chat_prompt(model.processor, 1, text))",
    "video": "model.trace(prompt, videos=[frames]), frames a list of images, the prompt holding the video placeholder "
             "(envoys.testing.chat_prompt(model.processor, 0, text, videos=1))",
    "audio": "model.trace(prompt, audio=[clip]), clip a float32 array of samples at the feature extractor's rate, the "
             "prompt holding the audio placeholder (envoys.testing.chat_prompt(model.processor, 0, text, audio=1))",
}

TEXT_ONLY = (
    "this model was loaded without task='image-text-to-text', so it has no processor and no image, video or audio can "
    "reach it; load it with StandardizedTransformer(name, task='image-text-to-text')"
)


def carries(inputs: Mapping[str, Any], media: tuple[str, ...]) -> bool:
    """Whether keyword inputs (the processor's or the forward's) carry any of ``media``."""
    return any(inputs.get(name) is not None for medium in media for name in CARRIERS[medium])


#: What a tower runs on: its images and, where the family has no tower of its own for them, its videos.
TOWER_MEDIA = ("image", "video")

#: Why a tower value is unavailable in a trace whose inputs carry neither an image nor a video.
NO_IMAGE_IN_TRACE = (
    "no image reached this forward: the trace's inputs carry no images (no images=, videos= or pixel_values in "
    "any invoke), so the tower does not run; pass the image with a prompt that holds its placeholder: "
    + HOW_TO_PASS["image"]
)

#: Why a value of the image's pathway is unavailable in an invoke that carries no image, beside invokes that do.
NO_IMAGE_IN_INVOKE = (
    "no image reached this invoke: its inputs carry no images, so no row of the tower's values is its own (the tower "
    "runs on the other invokes' images); read the vision side in an invoke that passes images=, or save it there and "
    "use it here"
)


def not_in_trace(media: tuple[str, ...]) -> str:
    """Why a value of ``media`` is unavailable in a trace whose inputs carry none of them."""
    if media == TOWER_MEDIA:
        return NO_IMAGE_IN_TRACE
    names = " or ".join(f"{medium}s" if medium != "audio" else "audio" for medium in media)
    keys = ", ".join(f"{CARRIERS[medium][0]}=" for medium in media)
    return (
        f"no {' or '.join(media)} reached this forward: the trace's inputs carry no {names} ({keys} in no invoke), so "
        f"nothing of it is computed; pass it with a prompt that holds its placeholder: "
        + "; or ".join(HOW_TO_PASS[medium] for medium in media)
    )


def absent_from_trace(envoy: Any, media: tuple[str, ...]) -> str | None:
    """Inside a trace, why none of ``media`` reaches its forward (none of its inputs carries one), or None: outside a
    trace, or where an input may carry one. Inside one invoke of several that carry images (`envoys.invokes`), its
    own inputs decide."""
    try:
        worker = Mediator.current("a value")
    except ValueError:
        return None
    batcher = getattr(worker.interleaver, "batcher", None)
    invokes = getattr(batcher, "invokes", None)
    if invokes is None:
        return None
    layout = getattr(batcher, "layout", None)
    if layout is not None and worker.batch_group is not None:
        return None if "image" in media and layout.invoke(worker.batch_group).carries_images else NO_IMAGE_IN_INVOKE
    inputs = [batcher.kwargs, *(kwargs for _, kwargs in invokes)]
    inputs += [arg for args, _ in invokes for arg in args if isinstance(arg, Mapping)]  # a processor's output
    return None if any(carries(found, media) for found in inputs) else not_in_trace(media)


def token_id(config: Any, medium: str) -> int:
    """The id of the token the processor puts where ``medium``'s features go: the config's ``<medium>_token_id`` (or
    ``_index``)."""
    for name in (f"{medium}_token_id", f"{medium}_token_index"):
        value = getattr(config, name, None)
        if value is not None:
            return value
    raise AttributeError(f"{type(config).__name__} names no {medium} token id ({medium}_token_id / {medium}_token_index)")


def placeholder_id(root: Any, medium: str) -> int:
    """`token_id` of ``root``'s config."""
    return token_id(root.config, medium)


def not_served(root: Any, medium: str) -> str | None:
    """Why ``medium``'s values are not served on ``root``'s model, whatever the forward; None where they are."""

    family = getattr(root, "family", None)
    if getattr(root, "processor", None) is None:
        return TEXT_ONLY
    if family is None or scatter_host(root) is None:
        return "this model's family names no module that scatters features into the text stream"
    if medium in family.media:
        return None
    if medium in family.media.not_served:
        return f"{family.model_type}'s {medium} is not served: {family.media.not_served[medium]}"
    host, scatter = scatter_host(root)[0], family.scatter
    if medium in scatter.media and missing_site(host, scatter.site_of(medium)) is None:
        return (
            f"{family.model_type}'s {medium} is not served yet: its host scatters it at "
            f"{scatter.site_of(medium)}, which no standard name binds (nnsight's own "
            f"{host.path}.source.{scatter.site_of(medium)} reads it)"
        )
    return f"{family.model_type} takes no {medium}: its forward scatters only {', '.join(family.media)}"


def generated_apart(envoy: Any) -> str | None:
    """Why a value read at the root's forward (a mask, a scatter) is not served in the running ``generate``, or None:
    the family's class generates in its own way, without running the root's forward (its ``generate_note``)."""
    root = envoy.root
    family = getattr(root, "family", None)
    note = family.quirks.generate_note if family is not None else None
    return note if note is not None and root.__dict__.get("_generating", False) else None


def forward_mask(root: Any, medium: str, inputs: Any) -> torch.Tensor:
    """Which positions hold ``medium``'s placeholder in the forward given ``inputs`` (the root's ``(args,
    kwargs)``), ``[batch, seq]`` bool; all false where the forward carries none of it."""
    args, kwargs = inputs
    input_ids = kwargs.get("input_ids", args[0] if args else None)
    if input_ids is None:
        raise ValueError(f"{medium}_token_mask reads input_ids, and this forward was given none")
    if not carries(kwargs, (medium,)):
        return torch.zeros_like(input_ids, dtype=torch.bool)
    return input_ids == placeholder_id(root, medium)


def token_mask(medium: str, layout: type, reason: Callable[[Any], str | None] | None = None) -> EProperty:
    """``<medium>_token_mask``: which positions of the text batch hold ``medium``'s placeholder, ``[batch, seq]``
    bool, off the root's ``input_ids``; all false on a forward that carries none of it (a decode step under
    generate). ``reason`` adds a family's own (the image's, on every family)."""

    def unavailable(envoy: Any) -> str | None:
        return (reason(envoy) if reason is not None else None) or not_served(envoy.root, medium) or generated_apart(envoy)

    return value(
        f"{medium}_token_mask", layout, description=f"which positions hold {a(medium)} token",
        key=lambda envoy: f"{envoy.root.path}.input", unavailable=unavailable,
        read_only=f"it is where the prompt has {medium} tokens; change the prompt instead", every_step=True,
        view=lambda envoy, inputs: forward_mask(envoy.root, medium, inputs), needs_envoy=True,
        doc=f"Which positions of the text batch hold {a(medium)} token, ``[batch, seq]`` bool, off the root's "
        f"``input_ids``. All false on a forward that carries no {medium} (a decode step under generate), even "
        f"where a generated token happens to be the {medium} token.",
    )


def scatter_site(root: Any, medium: str) -> tuple[Any, str, Argument]:
    """``(host envoy, site, argument)`` of ``medium``'s scatter call: the image's as its host says (a release whose
    forward scatters through a helper, SmolVLM's before 5.21), another medium's as the family's `Scatter` says."""

    host, operation, argument = scatter_host(root)
    return (host, operation, argument) if medium == "image" else (host, root.family.scatter.site_of(medium), argument)


def scatter_location(envoy: Any, medium: str) -> str:
    """The location of the arguments of ``medium``'s scatter call (``model.model.source.inputs_embeds_masked_scatter_1.input``)."""
    host, site, _ = scatter_site(envoy.root, medium)
    return f"{host.path}.source.{site}.input"


def drill_if_sourced(envoy: Any, medium: str) -> None:
    """Ask nnsight to drill into the host's helper that scatters (`Scatter.helper`) when its own ``.source`` body runs
    the host: that body serves the same site names, but the scatter inside the helper only once the helper's call is
    opened (``host.source.self__merge_visual_features_0.source``); the rewritten forward drills by itself."""
    host, site, _ = scatter_site(envoy.root, medium)
    outer, _, inner = site.partition(".source.")
    state = host._module.__dict__.get(STATE)
    if inner and state is not None and state.sourced:
        _ = getattr(host.source, op_label(host, outer)).source


def rows_of_hidden(envoy: Any, scattered: torch.Tensor) -> torch.Tensor:
    """What a host scatters, as ``[tokens, hidden_size]``: LLaVA-NeXT-Video hands its scatter the frames' features flat,
    ``[video_tokens * hidden_size]``."""
    return scattered.reshape(-1, envoy.root.hidden_size)


def scattered_features(medium: str, layout: type, reason: Callable[[Any], str | None] | None = None,
                       doc: str | None = None, flat: bool = True) -> EProperty:
    """``<medium>_features``: what the host scatters into the token embeddings at ``medium``'s tokens,
    ``[<medium>_tokens, hidden_size]``, row-major over the tokens; writable. ``doc`` says what they are on a family
    where the default line says too little; ``flat=False`` serves the host's argument in its own shape (Mllama's
    ``cross_attention_states``, which no token holds).

    Unavailable where the medium is not served (`not_served`), in a trace whose inputs carry none of it, under a
    family's own generate, and where the host's call is not rewritten. ``reason`` is checked first.
    """

    def unavailable(envoy: Any) -> str | None:
        found = (reason(envoy) if reason is not None else None) or not_served(envoy.root, medium)
        found = found or absent_from_trace(envoy, (medium,)) or generated_apart(envoy)
        if found is not None:
            return found
        host, site, _ = scatter_site(envoy.root, medium)
        return missing_site(host, site)

    return value(
        f"{medium}_features", layout, description="what the wrapper scatters into the embeddings",
        key=lambda envoy: scatter_location(envoy, medium),
        select=lambda envoy: scatter_site(envoy.root, medium)[2], unavailable=unavailable,
        prepare=lambda envoy: drill_if_sourced(envoy, medium), view=rows_of_hidden if flat else None,
        inverse=(lambda envoy, written, current: written.reshape(current.shape)) if flat else None,
        needs_envoy=flat,
        doc=doc or f"What the wrapper scatters into the token embeddings at the {medium} tokens, ``[{medium}_tokens, "
        "hidden_size]``, row-major over the tokens.",
    )


__all__ = ["CARRIERS", "MEDIA", "absent_from_trace", "carries", "placeholder_id", "scattered_features", "token_mask"]
