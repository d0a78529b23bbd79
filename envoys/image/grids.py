"""Values on an image's own grid: where each cell's row is, and gathering rows into a grid and back.

A family answers every layout question (CLS first or last, registers, packed
rows, merge-block or window order, padding, tiles) once, as a `Grid` per image:
for each cell of the image's ``[grid_rows, grid_columns]`` grid, the index of
its row along a value's flattened row axis (-1 where no row covers the cell).
Its `GridLayout` builds the `Grid` of image ``i`` from the `ImageInputs` of the
batch, which the model records when it prepares a batch that carries images.
Gathering rows into a grid (`gather`) and writing a grid's cells back
(`place`) are generic and written here once; `rows_of` says which rows of a
value a grid's indices refer to, for the shapes a value may have.

A layout reads only the `ImageInputs`: the processor's image tensors, the
``input_ids``, the image-token mask, the model's config, where a prompt
marks tiles with tokens, the processor's tokenizer, and, where the processor
tiles an image by its size but returns no sizes (Aya Vision, Cohere 2 Vision),
the sizes of the images the trace handed the processor.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from nnsight.intervention.interleaver import Mediator

from ..core.values import Unavailable
from ..core.wording import a

#: The keys of a batch that are the text's, not the image's.
TEXT_KEYS = frozenset({"input_ids", "attention_mask", "token_type_ids", "position_ids", "cache_position"})


class GridError(ValueError):
    """A value or grid whose shape does not fit the image's layout; the message lists the shapes accepted."""


@dataclass(frozen=True)
class Grid:
    """Where one image's rows sit in a value, cell by cell.

    ``rows``: long ``[grid_rows, grid_columns]``, for cell ``(r, c)`` the index
    of its row along the value's flattened row axis, -1 where no row covers the
    cell. ``span``: the rows (same axis) that belong to this image, CLS,
    registers and padding included. ``stream``: how many rows the whole value
    has along that axis (every image's), where the layout knows it, so that a
    value of another layout is refused rather than misread.
    """

    rows: torch.Tensor
    span: slice
    stream: int | None = None

    @property
    def shape(self) -> tuple[int, int]:
        """``(grid_rows, grid_columns)``."""
        return tuple(self.rows.shape)  # type: ignore[return-value]

    @property
    def covered(self) -> torch.Tensor:
        """bool ``[grid_rows, grid_columns]``: the cells a row covers."""
        return self.rows >= 0


def raster(rows: int, columns: int, start: int = 0) -> torch.Tensor:
    """long ``[rows, columns]``: ``start, start + 1, ...`` in raster order (a block of rows laid out row by row)."""
    return torch.arange(start, start + rows * columns, dtype=torch.long).reshape(rows, columns)


def packed_raster(sizes: torch.Tensor, image: int, stream: int | None = None) -> Grid:
    """Image ``image``'s grid where each image's ``height x width`` rows lie in raster order, image after image
    (``sizes``: long ``[images, 2]``), in a value of ``stream`` rows where known."""
    start = int(sizes[:image].prod(dim=1).sum())
    height, width = (int(side) for side in sizes[image])
    return Grid(raster(height, width, start), slice(start, start + height * width), stream)


def stitch(tiles: torch.Tensor, rows: int, columns: int) -> torch.Tensor:
    """``[rows * columns, h, w]`` tiles in raster order placed side by side: ``[rows * h, columns * w]``."""
    _, height, width = tiles.shape
    return tiles.reshape(rows, columns, height, width).permute(0, 2, 1, 3).reshape(rows * height, columns * width)


@dataclass(frozen=True)
class TiledImage:
    """An image the processor cut into tiles, as its prompt lays them out: one run of image tokens per tile.

    ``tiles``: ``(row, column, run)`` of each grid tile, in the prompt's order
    (empty when the image was not split); ``whole``: the run of the tile that
    holds the whole image (the global image); ``first``: the tile index, among
    the batch's tiles, of the image's first tile (each run is one tile, in order);
    ``whole_first``: the whole image's tile comes before the grid tiles (Ovis2's
    thumbnail), not after them.
    """

    tiles: tuple[tuple[int, int, TokenRun], ...]
    whole: TokenRun
    first: int
    whole_first: bool = False

    @property
    def count(self) -> int:
        """How many tiles: the grid's and the whole image's."""
        return len(self.tiles) + 1

    @property
    def shape(self) -> tuple[int, int]:
        """``(rows, columns)`` of the tile grid; ``(0, 0)`` when the image was not split."""
        if not self.tiles:
            return 0, 0
        return max(r for r, _, _ in self.tiles) + 1, max(c for _, c, _ in self.tiles) + 1

    def placed(self, cells: Any) -> torch.Tensor:
        """The image's tiles placed where they came from, ``cells(tile_index, run)`` giving each tile's
        ``[h, w]``: the grid tiles stitched by their row and column, or the whole image's tile when it was
        not split."""
        if not self.tiles:
            return cells(self.first, self.whole)
        rows, columns = self.shape
        order = sorted(range(len(self.tiles)), key=lambda k: self.tiles[k][:2])
        if [self.tiles[k][:2] for k in order] != [(r, c) for r in range(rows) for c in range(columns)]:
            raise GridError(f"the prompt's tiles {[t[:2] for t in self.tiles]} do not fill {a(f'{rows}x{columns}')} grid")
        grid_first = self.first + int(self.whole_first)
        return stitch(torch.stack([cells(grid_first + k, self.tiles[k][2]) for k in order]), rows, columns)

    @property
    def token_span(self) -> slice:
        """The image's rows of ``out[mask]``: from its first tile's first image token to its last tile's last."""
        runs = [self.whole, *(run for _, _, run in self.tiles)]
        return slice(min(run.first for run in runs), max(run.first + run.length for run in runs))


class TiledLayout:
    """The grids of a tower that sees each image as tiles its prompt places (Idefics 3, SmolVLM, Llama 4).

    The tower's stream is ``[tiles, rows_per_tile, ...]``: each tile's patches
    in raster order, after ``rows_before_patches`` rows (a CLS first) or before
    any CLS row; the image tokens are one run per
    tile, ``token_side`` x ``token_side`` in raster order. Each image's grid
    tiles are placed by the tokens its prompt puts before them (`tiled_images`,
    the family's reading of its processor's prompt); its whole-image tile is in
    the image's rows, off the grid. A family gives the three sizes and
    `tiled_images`.
    """

    stream_dims = 2

    def tiled_images(self, inputs: ImageInputs) -> list[TiledImage]:
        """The batch's images, as their prompts lay out their tiles."""
        raise NotImplementedError

    def patch_side(self, config: Any) -> int:
        """Patches along a tile's side: the tower's image size over its patch size."""
        return config.vision_config.image_size // config.vision_config.patch_size

    def rows_per_tile(self, config: Any) -> int:
        """Rows a tile holds in the tower's stream: its patches (and any CLS row after them)."""
        return self.patch_side(config) ** 2

    def rows_before_patches(self, config: Any) -> int:
        """Rows a tile holds before its patches in the tower's stream (a CLS first); 0 where its patches come first."""
        return 0

    def token_side(self, config: Any) -> int:
        """Image tokens along a tile's side."""
        raise NotImplementedError

    def batch_token_side(self, inputs: ImageInputs) -> int:
        """Image tokens along a tile's side in this batch: `token_side`, unless the batch's inputs choose
        another (Granite-Docling's fine route)."""
        return self.token_side(inputs.config)

    def _image(self, inputs: ImageInputs, image: int) -> TiledImage:
        images = self.tiled_images(inputs)
        check_image(image, len(images))
        return images[image]

    def patch_grid(self, inputs: ImageInputs, image: int) -> Grid:
        images = self.tiled_images(inputs)
        check_image(image, len(images))
        tiled, side, rows = images[image], self.patch_side(inputs.config), self.rows_per_tile(inputs.config)
        before = self.rows_before_patches(inputs.config)
        cells = tiled.placed(lambda tile, run: raster(side, side, tile * rows + before))
        tiles = sum(each.count for each in images)
        return Grid(cells, slice(tiled.first * rows, (tiled.first + tiled.count) * rows), tiles * rows)

    def token_grid(self, inputs: ImageInputs, image: int) -> Grid:
        tiled, side = self._image(inputs, image), self.batch_token_side(inputs)
        cells = tiled.placed(lambda tile, run: raster(side, side, run.first))
        return Grid(cells, tiled.token_span)


@dataclass(frozen=True)
class ImageInputs:
    """What the processor gave the last batch that carried images, as the model recorded it.

    ``tensors``: every tensor of the batch's inputs but the text's (``pixel_values``,
    ``image_sizes``, ``image_grid_thw``, ``pixel_attention_mask``, ...), by key.
    ``input_ids``: ``[batch, seq]``. ``image_token_mask``: bool ``[batch, seq]``,
    where the image tokens are (``out[mask]`` are the image tokens' rows, over
    the batch in order). ``config``: the model's config. ``processor``: the
    model's processor (its tokenizer names the tokens a prompt marks tiles with).
    ``given_sizes``: ``(height, width)`` of each image the invokes handed the
    processor (``images=``), in order, or None where they handed it pixels.
    """

    tensors: Mapping[str, torch.Tensor]
    input_ids: torch.Tensor
    image_token_mask: torch.Tensor
    config: Any = field(repr=False, default=None)
    processor: Any = field(repr=False, default=None)
    given_sizes: tuple[tuple[int, int], ...] | None = field(repr=False, default=None)

    def __getitem__(self, key: str) -> torch.Tensor:
        try:
            return self.tensors[key]
        except KeyError:
            raise KeyError(
                f"the batch's image inputs hold no {key!r}; they hold {', '.join(sorted(self.tensors)) or 'nothing'}"
            ) from None

    def get(self, key: str, default: Any = None) -> Any:
        return self.tensors.get(key, default)

    def __repr__(self) -> str:
        shapes = ", ".join(f"{key}: {list(value.shape)}" for key, value in self.tensors.items())
        return f"ImageInputs({shapes}; input_ids: {list(self.input_ids.shape)}; image tokens: {self.image_tokens})"

    @property
    def image_tokens(self) -> int:
        """How many image tokens the batch holds (rows of ``out[mask]``)."""
        return int(self.image_token_mask.sum())

    def token_runs(self) -> list[TokenRun]:
        """The runs of consecutive image tokens, in the batch's order (row by row, left to right)."""
        runs: list[TokenRun] = []
        first = 0
        for batch, row in enumerate(self.image_token_mask.tolist()):
            position = 0
            while position < len(row):
                if not row[position]:
                    position += 1
                    continue
                end = position
                while end < len(row) and row[end]:
                    end += 1
                runs.append(TokenRun(batch, position, first, end - position))
                first += end - position
                position = end
        return runs

    def token_before(self, run: TokenRun) -> str | None:
        """The token (as the tokenizer spells it) just before ``run`` in the prompt, None at a row's start."""
        if run.position == 0:
            return None
        token_id = int(self.input_ids[run.batch, run.position - 1])
        if self.processor is None:
            raise Unavailable("this model has no processor, and its tiles are placed by the tokens its processor's "
                              "prompt puts before them; load it with its processor")
        tokenizer = getattr(self.processor, "tokenizer", self.processor)
        return tokenizer.convert_ids_to_tokens(token_id)


@dataclass(frozen=True)
class TokenRun:
    """Consecutive image tokens: at ``[batch, position:position + length]``, rows ``first:first + length`` of ``out[mask]``."""

    batch: int
    position: int
    first: int
    length: int


def image_inputs_of(kwargs: Mapping[str, Any], mask: torch.Tensor, config: Any, processor: Any,
                    given_sizes: tuple[tuple[int, int], ...] | None = None) -> ImageInputs:
    """The `ImageInputs` of a batch's keyword inputs, detached: every tensor but the text's, and, as tensors, the
    lists of numbers the processor leaves unconverted (its ``skip_tensor_conversion``: Unlimited-OCR's crops per
    image, ``num_local_patches``, and crop grids, ``patches_grid``)."""
    tensors = {key: value.detach() for key, value in kwargs.items()
               if isinstance(value, torch.Tensor) and key not in TEXT_KEYS}
    for key in getattr(processor, "skip_tensor_conversion", None) or ():
        listed = kwargs.get(key)
        if isinstance(listed, list) and listed and key not in tensors:
            try:
                tensors[key] = torch.tensor(listed, dtype=torch.long)
            except (TypeError, ValueError, RuntimeError):  # not numbers (video metadata): not an image input
                continue
    return ImageInputs(tensors, kwargs["input_ids"].detach(), mask.detach(), config, processor, given_sizes)


def image_size(image: Any) -> tuple[int, int]:
    """``(height, width)`` of an image as a processor takes it: a PIL image, or an array or tensor (channels
    first or last, as transformers infers them)."""
    if hasattr(image, "size") and hasattr(image, "mode"):  # PIL: size is (width, height)
        width, height = image.size
        return int(height), int(width)
    from transformers.image_utils import get_image_size, to_numpy_array

    height, width = get_image_size(to_numpy_array(image))
    return int(height), int(width)


def given_sizes(invokes: Any) -> tuple[tuple[int, int], ...] | None:
    """``(height, width)`` of every image the invokes hand the processor (their ``images=``, nested lists
    flattened), in order; None where an invoke carries none that way (it passes pixels)."""
    sizes: list[tuple[int, int]] = []

    def walk(images: Any) -> None:
        if isinstance(images, (list, tuple)):
            for each in images:
                walk(each)
        else:
            sizes.append(image_size(images))

    for _, kwargs in invokes:
        images = kwargs.get("images")
        if images is None:
            return None
        walk(images)
    return tuple(sizes)


class GridLayout(Protocol):
    """A family's answer to where each image's rows are.

    ``stream_dims``: how many leading axes of the tower's stream value hold
    rows (2 for ``[images_or_tiles, patches, ...]``, 1 for a packed
    ``[all_patches, ...]``, 2 for ``[1, all_patches, ...]``).
    """

    stream_dims: int

    def patch_grid(self, inputs: ImageInputs, image: int) -> Grid:
        """Image ``image``'s grid over the tower stream's rows, flattened over the first ``stream_dims`` axes."""
        ...

    def token_grid(self, inputs: ImageInputs, image: int) -> Grid:
        """Image ``image``'s grid over the image tokens' rows (``out[mask]``, flattened over the batch in order)."""
        ...


@dataclass(frozen=True)
class RasterGrids:
    """Where each image's rows are on a packed tower whose patches are in raster order (MoonViT, HunYuanVL's tower).

    The stream is ``[1, patches, ...]``: every image's ``h x w`` patches (the
    processor's ``image_grid_thw``, ``[t, h, w]``, ``t`` = 1), raster order,
    image after image. The image tokens are one per ``merge x merge`` block
    (``merge_of(config)``), raster order over the merged grid, image after
    image; where the host adds learned rows among them (HunYuanVL's merger:
    ``newline`` after each merged row, ``around`` before and after each
    image's), they are image tokens no cell covers.
    """

    merge_of: Callable[[Any], int]
    newline: int = 0
    around: int = 0
    stream_dims: int = 2  # [1, patches, ...]

    def patch_grid(self, inputs: ImageInputs, image: int) -> Grid:
        sizes = self._sizes(inputs, image)
        return packed_raster(sizes, image, stream=int(sizes.prod(dim=1).sum()))

    def token_grid(self, inputs: ImageInputs, image: int) -> Grid:
        merged = self._sizes(inputs, image) // self.merge_of(inputs.config)
        counts = merged[:, 0] * (merged[:, 1] + self.newline) + 2 * self.around
        start = int(counts[:image].sum())
        height, width = (int(side) for side in merged[image])
        rows = torch.arange(height).unsqueeze(1) * (width + self.newline) + torch.arange(width).unsqueeze(0)
        return Grid(start + self.around + rows, slice(start, start + int(counts[image])))

    @staticmethod
    def _sizes(inputs: ImageInputs, image: int) -> torch.Tensor:
        """long ``[images, 2]``: each image's patch grid, off ``image_grid_thw``."""
        sizes = inputs["image_grid_thw"].cpu().long()
        check_image(image, sizes.shape[0])
        return sizes[:, 1:]


def value_named(of: str, allowed: tuple[str, ...], what: str) -> str:
    """``of``, the value a grid is over, if it is one of ``allowed`` (``what`` says of which kind); else `GridError`."""
    if of not in allowed:
        raise GridError(f"of={of!r} is not {a(what)} value; say which value the rows are of: "
                        f"{' or '.join(repr(name) for name in allowed)}")
    return of


# -- which rows of a value a grid points at ---------------------------------------------------


@dataclass(frozen=True)
class Rows:
    """A value's rows as a grid's indices count them: ``index(flat)`` is the tuple that indexes ``value``."""

    value: torch.Tensor
    row_shape: tuple[int, ...]  # the value's leading axes that hold the rows
    offset: int  # what to subtract from a grid's index to get the row along those axes

    def index(self, flat: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.unravel_index(flat - self.offset, self.row_shape)


def tower_rows(value: torch.Tensor, grid: Grid, stream_dims: int) -> Rows:
    """The rows of a tower value: the stream's (first ``stream_dims`` axes flattened) or image's rows only.

    A value whose first axis is the image's span (one head's attention from one
    patch over that image's keys) is the image's rows; one whose first axis
    alone holds the rows up to the span's end is the stream already flat
    (``[all_patches, ...]``); one whose first ``stream_dims`` axes hold them is
    the stream. Anything else: `GridError`, with the shapes accepted.
    """
    length = grid.span.stop - grid.span.start

    def whole(rows: int) -> bool:
        return rows == grid.stream if grid.stream is not None else rows >= grid.span.stop

    if value.dim() >= 1 and value.shape[0] == length:
        return Rows(value, (length,), grid.span.start)
    if stream_dims > 1 and value.dim() >= 1 and whole(value.shape[0]):
        # the stream's rows already flat (a packed tower's value without its leading 1): read along the first axis
        return Rows(value, (value.shape[0],), 0)
    if value.dim() >= stream_dims and whole(math.prod(value.shape[:stream_dims])):
        return Rows(value, tuple(value.shape[:stream_dims]), 0)
    if grid.stream is not None:  # a value holding the stream's rows on more leading axes (Mllama's [1, images, tiles, ...])
        axes = next((k for k in range(1, value.dim() + 1) if math.prod(value.shape[:k]) == grid.stream), None)
        if axes is not None:
            return Rows(value, tuple(value.shape[:axes]), 0)
    stream = "[images_or_tiles, patches, ...]" if stream_dims == 2 else "[all_patches, ...]"
    rows = f"exactly {grid.stream}" if grid.stream is not None else f"at least {grid.span.stop}"
    raise GridError(
        f"a value of shape {tuple(value.shape)} is neither the tower's stream ({stream}, the first {stream_dims} "
        f"axes holding {rows} rows) nor this image's rows only ([{length}, ...], rows "
        f"{grid.span.start}..{grid.span.stop - 1} of the stream); pass one of those"
    )


def token_rows(value: torch.Tensor, grid: Grid, inputs: ImageInputs, medium: str = "image",
               mask: torch.Tensor | None = None) -> Rows:
    """The rows of a value over the image tokens (``medium``'s, at ``mask``: a video's): ``[batch, seq, ...]``
    (masked), ``[image_tokens, ...]``, or the image's.

    A text-stream value ``[batch, seq, ...]`` is read at the image-token mask
    (its rows are ``value[mask]``); ``[image_tokens, ...]`` (like
    ``image_features``) is every image token of the batch; ``[span, ...]`` is
    this image's tokens only. Anything else: `GridError`.
    """
    mask = inputs.image_token_mask if mask is None else mask
    tokens = int(mask.sum())
    if value.dim() >= 2 and tuple(value.shape[:2]) == tuple(mask.shape):
        positions = mask.reshape(-1).nonzero().squeeze(1).to(value.device)
        return MaskedRows(value, tuple(mask.shape), 0, positions)
    if value.dim() >= 1 and value.shape[0] == tokens:
        return Rows(value, (tokens,), 0)
    length = grid.span.stop - grid.span.start
    if value.dim() >= 1 and value.shape[0] == length:
        return Rows(value, (length,), grid.span.start)
    raise GridError(
        f"a value of shape {tuple(value.shape)} is not over the {medium} tokens: pass the text stream "
        f"[batch, seq, ...] = {list(mask.shape)} + [...], the {medium} tokens' rows [{tokens}, ...] "
        f"(like {medium}_features, out[{medium}_token_mask]), or this {medium}'s tokens only [{length}, ...]"
    )


@dataclass(frozen=True)
class MaskedRows(Rows):
    """A text-stream value's image-token rows: the grid's index ``k`` is the ``k``-th masked position."""

    positions: torch.Tensor = field(default=None)  # type: ignore[assignment]

    def index(self, flat: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.unravel_index(self.positions[flat - self.offset], self.row_shape)


# -- gathering and placing ---------------------------------------------------------------------


def gather(rows: Rows, grid: Grid) -> torch.Tensor:
    """The grid of ``rows.value``: ``[grid_rows, grid_columns, ...]``, the value's trailing axes kept.

    Uncovered cells (-1) are NaN on a floating-point value, 0 otherwise.
    """
    covered = grid.covered.reshape(-1).to(rows.value.device)
    flat = grid.rows.reshape(-1).to(rows.value.device)
    trailing = tuple(rows.value.shape[len(rows.row_shape):])
    if bool(covered.all()):
        cells = rows.value[rows.index(flat)]
    else:
        fill = float("nan") if rows.value.is_floating_point() else 0
        cells = rows.value.new_full((flat.numel(), *trailing), fill)
        cells[covered] = rows.value[rows.index(flat[covered])]
    return cells.reshape(*grid.shape, *trailing)


def place(cells: torch.Tensor, rows: Rows, grid: Grid) -> torch.Tensor:
    """Write ``cells`` (``[grid_rows, grid_columns, ...]``) into ``rows.value`` in place, uncovered cells skipped.

    Refused, with nothing written, where ``cells`` has another shape than the
    grid gathered from the value. Returns the value.
    """
    trailing = tuple(rows.value.shape[len(rows.row_shape):])
    expected = (*grid.shape, *trailing)
    if tuple(cells.shape) != expected:
        raise GridError(f"a grid of shape {tuple(cells.shape)} cannot be placed here: this image's grid over the "
                        f"value is {list(expected)}")
    covered = grid.covered.reshape(-1).to(rows.value.device)
    flat = grid.rows.reshape(-1).to(rows.value.device)
    source = cells.reshape(-1, *trailing)[covered]
    rows.value[rows.index(flat[covered])] = source.to(rows.value.dtype)
    return rows.value


def check_image(image: int, images: int) -> None:
    """`GridError` unless ``image`` indexes one of the batch's ``images`` images."""
    if not isinstance(image, int) or isinstance(image, bool) or not 0 <= image < images:
        raise GridError(f"image={image!r} is not an image of this batch: it holds {images} image(s), 0..{images - 1}")


# -- the model's side: its layout and the last batch's inputs ----------------------------------

NO_BATCH = (
    "no batch with images has run on this model yet: the grids read the processor's outputs of the last traced "
    "or generated batch that carried images; call them inside or after model.trace(prompt, images=...)"
)


def layout_and_inputs(root: Any) -> tuple[GridLayout, ImageInputs]:
    """The family's `GridLayout` and the `ImageInputs` the grids read: inside an invoke of several that carry images,
    the invoke's own (its images numbered from 0, as its values are its own); else the model's last batch's.
    `Unavailable` saying which is missing."""
    family = root.family
    if family.grid_layout is None:
        raise Unavailable(f"the grids are unavailable: the {family.model_type} family has no grid layout yet")
    parts = invoke_parts()
    if parts is not None and parts.inputs is None:
        raise Unavailable("the grids are unavailable: no image reached this invoke (its inputs carry no images); "
                          "read them in an invoke that passes images=")
    inputs = parts.inputs if parts is not None else root.__dict__.get("last_image_inputs")
    if inputs is None:
        raise Unavailable(f"the grids are unavailable: {NO_BATCH}")
    return family.grid_layout, inputs


def invoke_parts() -> Any:
    """Inside an invoke of a trace whose several invokes carry images (`envoys.invokes`), that invoke's parts of the
    batch (its own `ImageInputs` among them, None where it carries no image); None elsewhere (outside a trace, a
    trace of one invoke)."""
    try:
        worker = Mediator.current("the grids")
    except ValueError:
        return None
    layout = getattr(getattr(worker.interleaver, "batcher", None), "layout", None)
    if layout is None or worker.batch_group is None:
        return None
    return layout.invoke(worker.batch_group)


def image_grid(root: Any, kind: str, image: int, options: Mapping[str, Any]) -> tuple[GridLayout, ImageInputs, Grid]:
    """The family's layout, the recorded batch, and image ``image``'s grid of ``kind`` ("patch_grid" or
    "token_grid") with the layout's own ``options`` (``of=``); TypeError naming the options it takes otherwise."""
    layout, inputs = layout_and_inputs(root)
    method = getattr(layout, kind)
    accepted = tuple(inspect.signature(method).parameters)[2:]  # after (inputs, image)
    unknown = [name for name in options if name not in accepted]
    if unknown:
        takes = ", ".join(f"{name}=" for name in accepted) or "no options (its values are all in one row order)"
        raise TypeError(f"{', '.join(f'{name}=' for name in unknown)}: {kind} on the {root.family.model_type} "
                        f"family takes {takes}")
    return layout, inputs, method(inputs, image, **options)
