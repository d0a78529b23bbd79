"""MiniCPM-V 4.6, MiniCPM-V 4.7 and MiniCPM-OCR: a packed SigLIP-NaViT tower that merges its stream inside, per-image
attention, a merger outside the tower, on a Qwen3.5 text model.

The three share one layout (transformers builds 4.7's and MiniCPM-OCR's
classes as copies of 4.6's). The processor turns each image into units: the
image resized to about ``scale_resolution`` squared pixels and, for an image
larger than that (``slice_mode``), a grid of slices of the image, each unit
one row of ``target_sizes`` (its ``[h, w]`` in patches). The prompt holds each
unit's image tokens in that order (the source image between ``<image>`` and
``</image>``, each slice between ``<slice>`` and ``</slice>``).

The tower (``model.vision_tower``, standard ``model.vision``) embeds every
unit's patches with one convolution over the processor's NaViT-packed pixels
(``embeddings.patch_embedding``, ``patch_embed``), each unit's in raster
order, units one after another, and adds learned positions bucketed from each
unit's grid; its stream is packed, ``[1, patches, vision_hidden_size]``. Its
blocks (``encoder.layers``, SigLIP's names) split queries, keys and values at
``cu_seqlens`` and call the kernel once per unit under every implementation
but flash, as the Qwen ViT does, so the interior is served whole
(`MiniCPMVisionAttention`), the pattern under eager as one tensor with each
unit's call's on the diagonal, and each call alone at ``kernel_calls[k]``
(`envoys.towers.per_image`).

Where a model downsamples 16x (MiniCPM-V 4.6's and 4.7's default
``downsample_mode``), the tower's forward runs its window-attention merger
(``vit_merger``, native name) after block ``insert_layer_id``: it attends
within each 2x2 window of a unit's grid and folds the window into one row, so
the blocks after it run on a quarter of the rows, each unit's on its
half-side grid in raster order, and ``layers[k + 1].layer_input`` is
``vit_merger``'s output, not ``layers[k].layer_output``
(``vision.merged_after`` says which k). Downsampling 4x (MiniCPM-OCR's
default) skips it: every block runs on every patch. Then the final LayerNorm
(``post_layernorm``, ``vision.norm``): ``tower_output`` is its output, the
tower's ``last_hidden_state``, read before the projector. On a model that
downsamples 4x the ``vit_merger``'s envoys are not served
(`vit_merger_skipped`: its values are Unavailable, saying why).

The projector is the merger (``model.merger``, outside the tower): for each
unit it folds 2x2 blocks of ``tower_output``'s grid into one row and maps it
to the text width, returning a list of one ``[tokens, hidden_size]`` tensor
per unit, which the host (``*Model.forward``) concatenates and scatters
(``inputs_embeds_masked_scatter_0``, argument 1; ``_1`` is video). So
``projector.input`` is ``tower_output`` and ``projector.output`` is that
list; ``torch.cat(projector.output)`` is ``image_features``.

Grids (`MiniCPMGrids`): an image's grid is its slices stitched by row and
column, or its source unit where it was not sliced (a sliced image's source
unit is in its rows, off the grid), over the stream before the ``vit_merger``
(``of="stream"``) or after it (``of="merged"``, 16x) and over its image tokens.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5DecoderLayer, Qwen3_5GatedDeltaNet

from ..blocks.deltanet import DeltaNetHybridLayer, GatedDeltaNet
from ..core.wording import a
from ..families import Batching
from ..image.grids import Grid, GridError, ImageInputs, check_image, raster, stitch, value_named
from ..vision.tower import PackedVision, variable_resolution
from .encoder_names import ENCODER_RENAME
from .qwen import QwenVisionAttention


class MiniCPMVisionAttention(QwenVisionAttention):
    """MiniCPM-V's tower attention: the Qwen ViT's layout (`QwenVisionAttention`), one kernel call per unit.

    ``attention_queries``, ``attention_keys`` and ``attention_values`` are the
    whole ``[1, heads, patches, head_dim]`` tensors (no rotary embedding)
    before the split at ``cu_seqlens``; ``attention_head_outputs`` the
    per-unit outputs joined back, ``[1, patches, heads, head_dim]``;
    ``attention_scores`` and ``attention_probabilities`` are ``[1, heads,
    patches, patches]`` under eager, each unit's kernel call's pattern a
    diagonal block (`envoys.towers.per_image.BlockDiagonal`);
    ``kernel_calls[k]`` is call ``k`` alone (unit ``k``). The ``vit_merger``'s
    own attention is of this class too and splits per 2x2 window.
    """


class MiniCPMVision(PackedVision):
    """MiniCPM-V's tower: packed, ``[1, patches, vision_hidden_size]``, its stream merged 2x2 after one block under 16x.

    Every unit's patches (source images and slices, the processor's
    ``target_sizes`` order), each unit's in raster order. ``patch_embeddings``
    is the convolution's output as one packed row, before the learned
    positions; ``tower_output`` is after ``post_layernorm``, what the merger
    (``model.projector``) receives. Under 16x the ``vit_merger`` folds each
    2x2 window after block ``merged_after``: the later blocks and
    ``tower_output`` hold a quarter of the rows, each unit's half-side grid in
    raster order. ``image_size`` is Unavailable: the config's is the side of
    the learned position table, and each unit keeps its own size.
    """

    image_sizes_are = (
        "each unit's size (the source image and each slice) is the processor's target_sizes, [h, w] in patches of "
        "patch_size pixels; the config's image_size is the side of the learned position table"
    )

    image_size = property(variable_resolution, doc="Unavailable: each unit keeps its own size (variable_resolution).")

    @property
    def merged_after(self) -> int | None:
        """The block after which ``vit_merger`` folds the stream 2x2 (``insert_layer_id``), where the model downsamples
        16x; None where it downsamples 4x (the ``vit_merger`` does not run)."""
        config: Any = self.root.config
        if config.downsample_mode == "4x" or config.insert_layer_id < 0:
            return None
        return config.insert_layer_id


def vit_merger_skipped(envoy: Any) -> str | None:
    """Why ``envoy`` is not served: it is in the tower's ``vit_merger`` (its attention, keyed by class, is the blocks'
    kind) on a model that downsamples 4x, whose tower's forward skips the ``vit_merger``; None elsewhere (`Family`'s
    ``not_served``)."""
    if "vit_merger" not in envoy.path.split(".") or envoy.root.config.downsample_mode != "4x":
        return None
    return ("this is the tower's vit_merger, which the tower's forward skips on a model that downsamples 4x "
            "(config.downsample_mode '4x'): every block runs on every patch, and the merger folds 2x2 patches")


#: Which rows a MiniCPM-V patch grid is over (``of=``): the tower's rows before the ``vit_merger`` (the patch
#: embeddings, the blocks up to ``merged_after``; every block under 4x) or after it (16x: the later blocks and
#: ``tower_output``).
PATCH_VALUES = ("stream", "merged")


class MiniCPMGrids:
    """Where each image's rows are on MiniCPM-V's tower and image tokens.

    An image is units, one run of image tokens each, in the order of the
    processor's ``target_sizes``: its source image (the run after
    ``<image>``), then, where it was sliced, its slices (each run after
    ``<slice>``), row by row, a row ending where the next ``<slice>`` does not
    follow a ``</slice>`` (the processor puts a newline there). An image's grid
    is its slices stitched by row and column, or its source unit where it was
    not sliced; a sliced image's source unit is in its rows, off the grid. A
    unit's rows are its ``[h, w]`` grid in raster order, units one after another:
    ``h x w`` patches (``of="stream"``, the rows before the ``vit_merger``),
    ``h / 2 x w / 2`` after it (``of="merged"``, 16x), and ``h / m x w / m``
    image tokens (``m`` 4 under 16x, 2 under 4x).
    """

    stream_dims = 2  # [1, patches, ...]

    def patch_grid(self, inputs: ImageInputs, image: int, of: str = "stream") -> Grid:
        """Image ``image``'s patch grid over the tower's packed rows: ``of`` "stream" (before the ``vit_merger``) or
        "merged" (after it, 16x: the later blocks and ``tower_output``)."""
        side = 1
        if value_named(of, PATCH_VALUES, "MiniCPM-V per-patch") == "merged":
            if inputs.config.downsample_mode == "4x":
                raise GridError("of='merged': this model downsamples 4x, so no vit_merger runs: every block and "
                                "tower_output are over the stream's rows (of='stream')")
            side = 2
        sizes = inputs["target_sizes"].cpu().long() // side
        starts = [0, *sizes.prod(dim=1).cumsum(0).tolist()]
        return self._grid(inputs, image, sizes, starts, int(starts[-1]))

    def token_grid(self, inputs: ImageInputs, image: int) -> Grid:
        """Image ``image``'s grid over the image tokens, one token per ``m x m`` block of a unit's patches."""
        merge = 2 if inputs.config.downsample_mode == "4x" else 4
        sizes = inputs["target_sizes"].cpu().long() // merge
        starts = [run.first for run in inputs.token_runs()]
        return self._grid(inputs, image, sizes, [*starts, inputs.image_tokens], None)

    @staticmethod
    def _images(inputs: ImageInputs) -> list[list[tuple[int, int]]]:
        """Each image's units as ``(unit, row)``: its source unit (row -1), then its slices with their slice row."""
        tokenizer = getattr(inputs.processor, "tokenizer", inputs.processor)
        slice_start, slice_end = (tokenizer.convert_tokens_to_ids(getattr(tokenizer, name))
                                  for name in ("slice_start_token", "slice_end_token"))
        images: list[list[tuple[int, int]]] = []
        for unit, run in enumerate(inputs.token_runs()):
            before = int(inputs.input_ids[run.batch, run.position - 1]) if run.position else None
            if before != slice_start:
                images.append([(unit, -1)])
                continue
            if not images:
                raise GridError("the prompt's first image tokens follow a <slice> token: the prompt is not one the "
                                "processor wrote, so its units cannot be placed")
            after_slice = run.position > 1 and int(inputs.input_ids[run.batch, run.position - 2]) == slice_end
            rows = images[-1][-1][1]
            images[-1].append((unit, rows if after_slice else rows + 1))
        return images

    def _grid(self, inputs: ImageInputs, image: int, sizes: torch.Tensor, starts: list[int], stream: int | None) -> Grid:
        images = self._images(inputs)
        check_image(image, len(images))
        units = images[image]
        if len(units) > sizes.shape[0] or units[-1][0] >= sizes.shape[0]:
            raise GridError(f"the prompt holds more image units than target_sizes' {sizes.shape[0]}")

        def cells(unit: int) -> torch.Tensor:
            height, width = (int(side) for side in sizes[unit])
            return raster(height, width, int(starts[unit]))

        span = slice(int(starts[units[0][0]]), int(starts[units[-1][0] + 1]))
        slices = units[1:]
        if not slices:
            return Grid(cells(units[0][0]), span, stream)
        rows = slices[-1][1] + 1
        columns = len(slices) // rows
        if [row for _, row in slices] != [row for row in range(rows) for _ in range(columns)]:
            raise GridError(f"image {image}'s slices do not fill {a(f'{rows}x{columns}')} grid")
        tiles = [cells(unit) for unit, _ in slices]
        if len({tuple(tile.shape) for tile in tiles}) != 1:
            raise GridError(f"image {image}'s slices are of different sizes "
                            f"({sorted({tuple(tile.shape) for tile in tiles})}), so they stitch into no one grid")
        return Grid(stitch(torch.stack(tiles), rows, columns), span, stream)


MINICPM_GRIDS = MiniCPMGrids()
#: The processor packs several prompts' slices along the last axis of one ``pixel_values`` row, ``[1, 3, patch,
#: patches * patch]``; several invokes are joined so too.
MINICPM_BATCHING = Batching(input_axes={"pixel_values": -1})


#: The native names of MiniCPM-V's tower, merger and Qwen3.5 text model under the standard ones.
MINICPM_RENAME = {
    "model.language_model.embed_tokens": "embed_tokens",
    "model.language_model.layers": "layers",
    "model.language_model.norm": "norm",
    "model.vision_tower": "vision",
    "model.merger": "projector",
    **ENCODER_RENAME,
    "post_layernorm": "norm",
}

#: Where the text blocks are.
TEXT_LAYERS = "model.language_model.layers"

#: The kin's text model is Qwen3.5's: its hybrid blocks and their gated DeltaNet mixers.
MINICPM_TEXT_ENVOYS = {Qwen3_5DecoderLayer: DeltaNetHybridLayer, Qwen3_5GatedDeltaNet: GatedDeltaNet}

__all__ = [
    "MINICPM_BATCHING", "MINICPM_GRIDS", "MINICPM_RENAME", "MINICPM_TEXT_ENVOYS", "TEXT_LAYERS", "MiniCPMVision",
    "MiniCPMVisionAttention", "vit_merger_skipped",
]
