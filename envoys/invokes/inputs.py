"""Several invokes' inputs as the one batch the model runs: each invoke encoded as it is alone, then joined key by key.

Each invoke goes through nnsight's own preprocessing (`preprocess_invoke`): an
invoke with ``images=`` through the family's processor, a text-only one through
the pipeline, exactly as the invoke traced alone, so an invoke's prompt, tiles
and crops are never re-read in another invoke's company. The encodings are then
joined as the processor joins several prompts:

- the text rows (``input_ids``, the masks, ``token_type_ids``, ``mm_token_type_ids``,
  a Q-Former's own ``qformer_input_ids``) are padded to the longest, on the
  side the model's tokenizer pads (left, for a causal decoder), with the
  tokenizer's pad id, 0, or ``labels``' -100;
- every other tensor (``pixel_values``, ``image_grid_thw``, ``image_sizes``,
  ``pixel_attention_mask``, ...) is concatenated on its first axis, invoke after
  invoke, its other axes zero-padded to the largest (as processors pad tiles and
  images of several sizes), and each invoke's span of that axis is kept;
- an input whose entries index another input's rows (the family's
  ``Batching.indexes``: Molmo 2's ``image_token_pooling`` names rows of its
  ``pixel_values``' crops x patches) has each invoke's entries moved past the
  earlier invokes' rows, -1 (a padding slot) kept, as the processor numbers
  several images' rows;
- keywords that are not tensors go to the forward, and must agree, but for a
  family's lists of one entry per image (``Batching.per_image_lists``:
  Unlimited-OCR's ``num_local_patches``), joined in invoke order.

Where left padding moves a short prompt's tokens, ``position_ids`` counted from
each row's first token are supplied (`positions_supplied`), unless the model
computes its positions from the mask itself (the M-RoPE hosts).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from nnsight.modeling.processing import ROW_FIELDS, collate, positions, preprocess_invoke

#: The keys that are text rows (one row per prompt, one column per token), with what pads them (``None``: the pad
#: id of the tokenizer that wrote them): nnsight's `ROW_FIELDS`, and a Q-Former's own prompt (InstructBLIP's).
ROW_PADDING = {**ROW_FIELDS, "qformer_input_ids": None, "qformer_attention_mask": 0}
#: The ending of the other keys that are text rows: which tokens are text, image or video (``mm_token_type_ids``,
#: ERNIE's ``moe_mm_token_type_ids``).
ROW_ENDING = "token_type_ids"
#: Methods of a host that computes its own positions from the attention mask and the image grids (M-RoPE): supplying
#: one-dimensional ``position_ids`` there would replace its three-dimensional ones.
OWN_POSITIONS = ("get_rope_index", "compute_3d_position_ids")


class InvokeInputError(ValueError):
    """Several invokes' inputs that cannot be joined into one batch; the message says what to change."""


@dataclass(frozen=True)
class Span:
    """One invoke's part of an axis: ``start`` and ``size`` (0 where it has none)."""

    start: int
    size: int

    @property
    def stop(self) -> int:
        return self.start + self.size


@dataclass(frozen=True)
class JoinedInputs:
    """Every invoke's encoding joined: ``kwargs`` for the forward, and, per invoke, its own encoding and its span of
    each joined non-text tensor's first axis (``spans[key][invoke]``)."""

    kwargs: dict[str, Any]
    encodings: tuple[dict[str, torch.Tensor], ...]
    spans: Mapping[str, tuple[Span, ...]]
    axes: Mapping[str, int]  #: the axis each joined non-text tensor holds the invokes along (its spans')


def encode_invoke(model: Any, inputs: tuple, kwargs: dict) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """One invoke's ``(tensors, forward keywords)``, as nnsight encodes the invoke traced alone."""
    rows, forward = preprocess_invoke(model, inputs[0] if inputs else None, kwargs)
    if rows is None:
        args, encoding = forward
        if args:
            raise InvokeInputError(
                "several invokes are batched from their prompts and images (tracer.invoke(prompt, images=[...])) or "
                "their encodings; one invoke passed a raw tensor positionally, which cannot be joined with the others"
            )
    else:
        encoding = {**collate(model, rows), **forward}
    tensors = {key: value for key, value in encoding.items() if isinstance(value, torch.Tensor)}
    keywords = {key: value for key, value in encoding.items() if not isinstance(value, torch.Tensor)}
    return tensors, keywords


def is_row_key(key: str) -> bool:
    """Whether ``key`` holds text rows: one row per prompt, one column per token."""
    return key in ROW_PADDING or key.endswith(ROW_ENDING)


def pad_id(processor: Any, tokenizer: Any, key: str) -> int:
    """What pads ``key``'s rows: its table entry, else the pad id of the tokenizer that wrote it (a Q-Former's own)."""
    value = ROW_PADDING.get(key, 0)
    if value is not None:
        return value
    writer = getattr(processor, "qformer_tokenizer", None) if key.startswith("qformer_") else None
    writer = writer if writer is not None else tokenizer
    padding = getattr(writer, "pad_token_id", None)
    return padding if padding is not None else 0


def pad_rows(rows: list[torch.Tensor], value: int | float, left: bool) -> torch.Tensor:
    """Text rows of several invokes, ``[rows_i, length_i, ...]``, padded to the longest and stacked."""
    width = max(row.shape[1] for row in rows)
    padded = []
    for row in rows:
        missing = width - row.shape[1]
        fill = row.new_full((row.shape[0], missing, *row.shape[2:]), value)
        padded.append(torch.cat([fill, row] if left else [row, fill], dim=1))
    return torch.cat(padded)


def stack_padded(parts: list[torch.Tensor], along: int = 0) -> torch.Tensor:
    """Tensors concatenated on axis ``along``, their other axes zero-padded (at the end) to the largest."""
    dims = {part.dim() for part in parts}
    if len(dims) > 1:
        raise InvokeInputError(f"tensors of {sorted(dims)} dimensions cannot be joined")
    along = along % parts[0].dim()
    others = [axis for axis in range(parts[0].dim()) if axis != along]
    largest = {axis: max(part.shape[axis] for part in parts) for axis in others}
    grown = []
    for part in parts:
        padding = []
        for axis in reversed(range(part.dim())):
            padding += [0, largest[axis] - part.shape[axis] if axis in largest else 0]
        grown.append(torch.nn.functional.pad(part, padding) if any(padding) else part)
    return torch.cat(grown, dim=along)


def moved_past_earlier_rows(parts: list[torch.Tensor | None], rows: list[torch.Tensor | None]) -> list[torch.Tensor | None]:
    """Each invoke's index input (``parts``) moved past the rows the earlier invokes' indexed input (``rows``) holds,
    its first two axes flattened; -1 entries (padding slots) kept."""
    moved, start = [], 0
    for part, indexed in zip(parts, rows):
        moved.append(part if part is None or not start else torch.where(part >= 0, part + start, part))
        start += 0 if indexed is None else indexed.shape[0] * indexed.shape[1]
    return moved


def join(model: Any, encoded: list[tuple[dict[str, torch.Tensor], dict[str, Any]]],
         axes: Mapping[str, int] | None = None, indexes: Mapping[str, str] | None = None,
         per_image_lists: tuple[str, ...] = ()) -> JoinedInputs:
    """The invokes' encodings (`encode_invoke`) as one batch, in invoke order (see the module's docstring); ``axes``:
    the axis an image input joins the invokes along where not the first (the family's ``input_axes``); ``indexes``:
    an input whose entries index another's rows -> that input (the family's ``indexes``); ``per_image_lists``:
    keywords holding a list of one entry per image, joined in invoke order (the family's ``per_image_lists``)."""
    axes, indexes = dict(axes or {}), dict(indexes or {})
    tokenizer = model.tokenizer
    left = getattr(tokenizer, "padding_side", "right") == "left"
    keys = list(dict.fromkeys(key for tensors, _ in encoded for key in tensors))
    if any("input_ids" not in tensors for tensors, _ in encoded):
        raise InvokeInputError("every invoke of a batch with images needs a prompt: one invoke has no input_ids")
    shapes = [tuple(tensors["input_ids"].shape[:2]) for tensors, _ in encoded]
    kwargs: dict[str, Any] = {}
    spans: dict[str, tuple[Span, ...]] = {}
    for key in keys:
        present = [tensors.get(key) for tensors, _ in encoded]
        if is_row_key(key):
            value = pad_id(model.processor, tokenizer, key)
            dtype = next(part for part in present if part is not None).dtype
            # an invoke whose encoding lacks the key (a text-only prompt's mm_token_type_ids): the key's pad value (0: text)
            filled = [part if part is not None else torch.full(shape, value, dtype=dtype)
                      for part, shape in zip(present, shapes)]
            kwargs[key] = pad_rows(filled, value, left)
            continue
        if key in indexes:
            present = moved_past_earlier_rows(present, [tensors.get(indexes[key]) for tensors, _ in encoded])
        parts = [part for part in present if part is not None]
        along = axes.setdefault(key, 0) % parts[0].dim()
        axes[key] = along
        kwargs[key] = stack_padded(parts, along) if len(parts) > 1 else parts[0]
        start, own = 0, []
        for part in present:
            size = 0 if part is None else part.shape[along]
            own.append(Span(start, size))
            start += size
        spans[key] = tuple(own)
    for _, keywords in encoded:
        for key, value in keywords.items():
            if key in per_image_lists and isinstance(value, list):
                kwargs[key] = [*kwargs.get(key, []), *value]
                continue
            if key in kwargs and kwargs[key] != value:
                raise InvokeInputError(f"the invokes pass {key}= differently ({kwargs[key]!r} and {value!r}); a "
                                       f"keyword of the forward is one for the whole batch: pass it to model.trace()")
            kwargs[key] = value
    return JoinedInputs(kwargs, tuple(tensors for tensors, _ in encoded), spans,
                        {key: along for key, along in axes.items() if key in spans})


def positions_supplied(model: Any, kwargs: dict[str, Any], first_position: int) -> None:
    """Add ``position_ids`` counted from each row's first token (plus ``first_position``) where left padding shifts a
    row, unless the forward is given them or its host computes its own from the mask (`OWN_POSITIONS`)."""
    mask = kwargs.get("attention_mask")
    if "position_ids" in kwargs or mask is None or mask.dim() != 2 or bool(mask.all()):
        return
    if getattr(model.tokenizer, "padding_side", None) != "left":
        return
    if computes_own_positions(model._module):
        return
    kwargs["position_ids"] = positions(mask) + first_position


@functools.cache
def own_positions(module_class: type) -> bool:
    """Whether a module class computes its own positions from the mask and the grids (`OWN_POSITIONS`)."""
    return any(hasattr(module_class, name) for name in OWN_POSITIONS)


def computes_own_positions(model: torch.nn.Module) -> bool:
    """Whether any module of ``model`` computes its own positions (an M-RoPE host)."""
    return any(own_positions(type(module)) for module in model.modules())
