"""Several invokes that carry images, in one trace: nnsight's patching idiom on a vision-language model.

::

    with model.trace() as tracer:
        with tracer.invoke(clean_prompt, images=[clean_image]):
            clean = model.vision.image_features.save()
        tracer.barrier(2)
        with tracer.invoke(corrupted_prompt, images=[corrupted_image]):
            tracer.barrier(2)
            model.vision.image_features[:] = clean
            patched = model.logits.save()

Each invoke is encoded as it is alone and the encodings are joined into one
batch (`envoys.invokes.inputs`); `batch_image_invokes` records where each
invoke's rows, images, tiles, patches and image tokens lie in it
(`envoys.invokes.layout`), and the model's batcher serves each invoke its part
of every value and widens its writes back (`envoys.invokes.batcher`).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from ..blocks.deepstack import DeepstackLayer, deepstack_location
from ..core.layouts import PackedPatches
from ..core.values import Unavailable, standard_values
from ..core.wording import a
from ..image.grids import GridError, ImageInputs, given_sizes, image_inputs_of
from ..towers.per_image import per_call_locations
from ..vision.media import CARRIERS, carries, scatter_location
from ..vision.scatter_host import scatter_host
from ..vision.tower import IMAGE_INPUTS, Vision, image_token_id
from .batcher import InvokeBatcher, LocatingInterleaver
from .inputs import InvokeInputError, JoinedInputs, Span, encode_invoke, join, positions_supplied
from .layout import InvokeLayout, InvokeParts

__all__ = ["InvokeBatcher", "InvokeInputError", "InvokeLayout", "LocatingInterleaver", "batch_image_invokes"]


def packed_tower(vision: Any) -> bool:
    """Whether the tower's stream is packed (its ``tower_output`` is `PackedPatches`)."""
    value = standard_values(type(vision)).get("tower_output")
    hint = getattr(getattr(value, "_preprocess", None), "__annotations__", {}).get("return")
    return (hint if isinstance(hint, str) else getattr(hint, "__name__", "")) == PackedPatches.__name__


def tower_rows(grids: Any, inputs: ImageInputs) -> int:
    """How many rows of the tower's leading axis one invoke's images make: the family's grid layout says where it
    knows (``tiles``: an image cut in tiles some of which the host drops), else the image input's first axis."""
    tiles = getattr(grids, "tiles", None)
    if tiles is not None:
        return tiles(inputs)
    for key in IMAGE_INPUTS:
        pixels = inputs.tensors.get(key)
        if pixels is None:
            continue
        if pixels.dim() == 5:  # [prompts, tiles, channels, height, width]: the host drops the all-zero padding tiles
            return int((pixels.flatten(2) != 0).any(-1).sum())
        return int(pixels.shape[0])
    return 0


#: The values a packed tower's grid layout may place besides its stream (``patch_grid(..., of=...)``), whose rows can
#: be as many as the stream's (Qwen's merge-block order) or fewer (MiniCPM-V's stream after its ``vit_merger``, RADIO's
#: patch embeddings without the prefix rows).
STREAM_KINDS = ("stream", "merged", "patch_embeddings")


def stream_rows(grids: Any, inputs: ImageInputs, images: int) -> tuple[int, ...]:
    """How many rows of a packed tower's stream one invoke's images make (their patches, CLS and registers), under
    each kind of stream value its grid layout places (`STREAM_KINDS`), the stream first."""
    if images == 0:
        return ()
    if grids is None:  # a Qwen-style tower without grids: one pixel row a patch
        return (tower_rows(grids, inputs),)
    options = inspect.signature(grids.patch_grid).parameters
    counts = []
    for kind in STREAM_KINDS if "of" in options else STREAM_KINDS[:1]:
        try:
            last = grids.patch_grid(inputs, images - 1, **({"of": kind} if "of" in options else {}))
        except (GridError, Unavailable):
            continue
        counts.append(last.stream if last.stream is not None else last.span.stop)
    return tuple(counts)


def per_call_sites(model: Any) -> dict[str, tuple[str, ...]]:
    """For each tower attention that calls its kernel once per image (or window), its input's location -> the
    locations of that per-call site, which each invoke numbers from its own first image (`LocatingInterleaver`)."""
    vision = model.__dict__.get("vision")
    sites = {}
    for block in (vision.layers if isinstance(vision, Vision) else ()):
        attention = block.__dict__.get("self_attn")
        located = per_call_locations(attention) if attention is not None else ()
        if located:
            sites[f"{attention.path}.input"] = located
    return sites


def locations(model: Any) -> tuple[frozenset[str], tuple[str, ...], frozenset[str]]:
    """The model's input locations, the vision side's module paths, and the scatter's (and DeepStack's) arguments."""
    host = scatter_host(model)
    inputs = {f"{model.path}.input"} | ({f"{host[0].path}.input"} if host is not None else set())
    vision = tuple(envoy.path for envoy in (model.__dict__.get("vision"), model.__dict__.get("projector"))
                   if isinstance(getattr(envoy, "path", None), str))
    scatters = {scatter_location(model.vision, "image")} if host is not None else set()
    layers = list(model.layers)
    if layers and isinstance(layers[0], DeepstackLayer):
        scatters.add(deepstack_location(layers[0]))
    return frozenset(inputs), vision, frozenset(scatters)


def invoke_parts(model: Any, invokes: list, joined: JoinedInputs, packed: bool) -> tuple[InvokeParts, ...]:
    """Each invoke's span of the batch's rows, images, tiles, patches (``packed``: the tower's stream is) and image
    tokens."""
    grids, token_id = model.family.grid_layout, image_token_id(model.config)
    counted, own_inputs = [], []
    for invoke, tensors in zip(invokes, joined.encodings):
        ids = tensors["input_ids"]
        mask = ids == token_id
        inputs = image_inputs_of(tensors, mask, model.config, model.processor, given_sizes([invoke]))
        images = len(inputs.given_sizes or ())
        own_inputs.append(inputs if images else None)
        counted.append({
            "rows": ids.shape[0],
            "images": images,
            "tiles": tower_rows(grids, inputs) if images else 0,
            "streams": stream_rows(grids, inputs, images) if packed else (),
            "tokens": int(mask.sum()),
        })
    kinds = max(len(counts["streams"]) for counts in counted)
    start = {"rows": 0, "images": 0, "tiles": 0, "tokens": 0, **{kind: 0 for kind in range(kinds)}}
    parts = []
    for index, counts in enumerate(counted):
        streams = counts.pop("streams") or (0,) * kinds
        counts.update(enumerate(streams))
        spans = {axis: Span(start[axis], count) for axis, count in counts.items()}
        for axis, count in counts.items():
            start[axis] += count
        keys = {key: (joined.axes[key], own[index]) for key, own in joined.spans.items()}
        parts.append(InvokeParts(spans["rows"], spans["images"], spans["tiles"],
                                 tuple(spans[kind] for kind in range(kinds)), spans["tokens"], keys, own_inputs[index]))
    return tuple(parts)


#: What an invoke of several may carry its media as: the processor's images.
MEDIA = "images="


def refuse_unsplittable(inputs: tuple, kwargs: dict) -> None:
    """Refuse an invoke whose images cannot be counted and placed per invoke: pixels or an encoding given to the model
    directly, or videos or audio (`InvokeInputError`, saying what to pass instead)."""
    encodings = [each for each in inputs if isinstance(each, Mapping)]
    pixels = [key for key in IMAGE_INPUTS if kwargs.get(key) is not None or any(key in each for each in encodings)]
    if pixels:
        raise InvokeInputError(
            f"an invoke beside others passes {pixels[0]} to the model itself; with several invokes, pass each invoke's "
            f"images as {MEDIA} (tracer.invoke(prompt, images=[image])), so that each invoke's images are encoded as "
            f"they are alone and its part of every value can be found; or trace that encoding in an invoke of its own"
        )
    others = [medium for medium in ("video", "audio") if carries(kwargs, (medium,)) or kwargs.get(medium) is not None]
    if others:
        raise InvokeInputError(
            f"an invoke beside others passes {' and '.join(f'{CARRIERS[medium][0]}=' for medium in others)}; several "
            f"invokes in one trace carry images only (each invoke's part of a video's or a clip's values is not laid "
            f"out): trace a prompt with a video or audio in a trace of its own"
        )


def batch_image_invokes(model: Any, invokes: list) -> tuple[dict[str, Any], InvokeLayout]:
    """The one batch of several invokes, one or more of which carry images, and where each invoke's part of it lies.

    Refused, before anything runs, where an invoke without images cannot share the batch (``Batching.text_invokes``
    says why), or where no invokes can beside one with images (``Batching.image_invokes``).
    """
    family, batching = model.family, model.family.batching
    for inputs, kwargs in invokes:
        refuse_unsplittable(inputs, kwargs)
    if batching.image_invokes is not None:
        raise NotImplementedError(
            f"invokes cannot share a trace when one carries images on {a(family.model_type)} checkpoint: "
            f"{batching.image_invokes}; trace each prompt with images in a trace of its own"
        )
    if batching.text_invokes is not None and not all(kwargs.get("images") is not None for _, kwargs in invokes):
        raise NotImplementedError(
            f"an invoke without images cannot share a trace with invokes that carry images on {a(family.model_type)} "
            f"checkpoint: {batching.text_invokes}; trace the text-only prompt in a trace of its own"
        )
    joined = join(model, [encode_invoke(model, inputs, kwargs) for inputs, kwargs in invokes], batching.input_axes,
                  batching.indexes, batching.per_image_lists)
    positions_supplied(model, joined.kwargs, batching.first_position)
    packed = isinstance(model.__dict__.get("vision"), Vision) and packed_tower(model.vision)
    parts = invoke_parts(model, invokes, joined, packed)
    inputs, vision, scatters = locations(model)
    layout = InvokeLayout(parts, inputs, vision, scatters, packed, int(joined.kwargs["input_ids"].shape[1]),
                          per_call_sites(model))
    return joined.kwargs, layout
