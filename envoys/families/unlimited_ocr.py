"""Unlimited-OCR (model_type unlimited_ocr): a tower of two stacks in sequence (a SAM encoder with its neck, then a
CLIP-style encoder over the SAM grid), run twice in one forward (every image's global view, then the local crops),
on a mixture-of-experts text model.

``UnlimitedOcrModel.forward`` scatters the image features into the token
embeddings (``inputs_embeds_masked_scatter_0``, argument 1, found).

The processor resizes every image, padded to a square, to one global view
(``pixel_values``, the image processor's ``size``) and cuts an image whose
longer side is over its ``tile_size`` into square local crops of that side
(``pixel_values_local``; ``num_local_patches`` per image, ``patches_grid``
each image's ``(columns, rows)`` of crops). ``get_image_features`` runs the
tower (``model.vision_tower``) and the projector (``model.multi_modal_projector``)
on the global views, then both again on the crops where there are any. So
``model.vision`` is the tower's first run, the global views, and
``model.projector`` the projector's; ``model.crops`` is the tower's second run,
one row per crop in the processor's order (image after image, each image's
crops row after row), and ``model.crops.projector`` the projector's second run
(`envoys.vision.crops`). On a forward whose images are all too small to crop,
``model.crops``'s values are `Unavailable`, saying so.

The tower (``UnlimitedOcrVisionModel``) is two stacks:

- the SAM encoder (``sam_encoder``): its patch convolution
  (``vision.patch_embed``; its output, channels-last and flattened, is
  ``patch_embeddings``, ``[views, sam_patches, sam_hidden_size]``), an
  absolute position embedding, its blocks at ``vision.sam_layers[i]``
  (windowed and global SAM blocks on the spatial grid, served as GOT-OCR 2.0's
  are, `envoys.towers.sam`: every stream value ``[views, sam_patches,
  sam_hidden_size]``, raster order), then its neck (two convolutions with
  channels-first norms) and two stride-2 convolutions (``sam_encoder.proj``)
  that fold the grid 4x per side;
- the CLIP-style encoder (``vision_encoder``), which takes that folded grid as
  its patch embeddings (``vision.sam_features``, ``[views, patches,
  vision_hidden_size]``, one row per folded cell), puts a learned CLS first,
  adds positions, LayerNorms the stream (``pre_layrnorm``) and runs its blocks
  at ``vision.layers[i]`` (``vision_encoder.encoder.layers``): pre-norm CLIP
  blocks (``layer_norm1``, ``self_attn`` on the shared attention interface,
  ``layer_norm2``, ``mlp``) on ``[views, 1 + patches, vision_hidden_size]``,
  CLS first. It has no final norm: ``tower_output`` is the last block's stream.

``vision.layers`` is the CLIP stack because its rows are the image's tokens:
each row leaving the tower is one of its patch rows, CLS dropped, with the SAM
grid's folded cell beside it on the last axis, ``[views, patches,
vision_hidden_size + sam_channels]`` (the tower's ``last_hidden_state``,
``projector.input``); the projector is one linear map to the text width, one
row per token of the view's ``side x side`` token grid (``side`` = the view's
pixels over ``4 * patch_size``).

The host then lays each image out for the text model: its crops' tokens (the
crops stitched into one grid of ``rows * side`` token rows, a learned
``image_newline`` after each), then its global view's ``side`` token rows,
each followed by ``image_newline``, then one learned ``view_separator``.
``vision.image_features`` is all of it, image after image, as scattered. The
``image_newline`` and ``view_separator`` rows are parameters of the host, not
tower values: no grid cell covers them (``vision.token_grid`` lays out the
global view's tokens, skipping them).

The text model (``UnlimitedOcrTextModel``) has pre-norm blocks returning the
stream alone; its attention calls the kernel once on the shared interface
(a reference sliding window the cache keeps), its MLP is dense on the blocks
``mlp_layer_types`` calls ``dense`` and a DeepSeek-style mixture of experts
on the ``sparse`` ones (``UnlimitedOcrTextMoe``: a top-k router ``gate``,
routed experts, shared experts), whose ``mlp.router_logits`` is the router's
``F.linear`` output.

Unavailable: ``mlp.router_logits`` on the dense text blocks; every value of
``model.crops`` on a forward with no crops, and in a trace of several invokes
that carry images; ``model.crops.token_grid`` (an image's tokens are its
crops', then its view's).

Grids (`UnlimitedOcrGrids`): ``vision.patch_grid(value, image, of=...)`` lays
out image ``image``'s global view, ``of="stream"`` (default) a CLIP block's
value (CLS dropped), ``"sam"`` a SAM value (``patch_embeddings``,
``sam_layers``' values) on the finer SAM grid, ``"output"`` a value without CLS
(``sam_features``, ``projector.input`` and ``projector.output``);
``vision.token_grid(value, image)`` the view's tokens on its token grid;
``crops.patch_grid(value, crop, of=...)`` crop ``crop`` on its own grids.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.models.unlimited_ocr.modeling_unlimited_ocr import (
    UnlimitedOcrAttention,
    UnlimitedOcrEncoderLayer,
    UnlimitedOcrMLP,
    UnlimitedOcrSamMLPBlock,
    UnlimitedOcrSamVisionAttention,
    UnlimitedOcrSamVisionLayer,
    UnlimitedOcrVisionModel,
)

from ..core.layouts import Patches
from ..core.standard import child
from ..core.values import Argument, value
from ..image.grids import Grid, ImageInputs, check_image, raster, value_named
from ..towers.encoder_names import ENCODER_BLOCK_RENAME
from ..towers.sam import SAM_BLOCK_RENAME, SamVisionAttention, SamVisionLayer, SamVisionMlp
from ..towers.sam_stacks import SamStackedVision, folded_side
from ..vision.crops import Crops
from ..vision.tower import Vision, VisionAttention, VisionLayer, VisionMlp, no_images, onto_patch_grid, patch_rows
from . import Batching, Family

#: The per-patch values a grid reads (``of=``): a CLIP block's (CLS first), a SAM block's, or a value without CLS.
PATCH_VALUES = ("stream", "sam", "output")


def last_block_output(vision: Vision) -> str:
    """Where ``tower_output`` is: the last CLIP block's output (no final norm; the tower's own output drops the CLS
    and joins the SAM grid to it)."""
    return f"{vision.layers[-1].path}.output"


def clip_embeddings_input(vision: Vision) -> str:
    """Where ``sam_features`` is: the CLIP embeddings' input, the SAM encoder's folded grid."""
    return f"{child(child(vision, 'vision_encoder'), 'embeddings').path}.input"


class UnlimitedOcrVision(SamStackedVision):
    """Unlimited-OCR's tower at ``model.vision_tower``: the SAM stack (``sam_layers``), its neck and folding
    convolutions, then the CLIP stack (``layers``), one row per view.

    Sizes: ``vision_hidden_size``, ``num_heads``, ``head_dim`` and
    ``intermediate_size`` are the CLIP stack's (``encoder_config``);
    ``patch_size`` and ``image_size`` the SAM stack's (``sam_config``: the
    patch convolution's side and the global view's side in pixels), so a CLIP
    row covers ``4 * patch_size`` pixels a side; ``sam_hidden_size``,
    ``sam_num_heads``, ``sam_intermediate_size``, ``window_size`` and
    ``global_attn_indexes`` are the SAM stack's.
    """

    sam_features = value(
        "sam_features", Patches, description="the SAM stack's folded grid, the CLIP stack's patch embeddings",
        key=clip_embeddings_input, select=Argument(0, "patch_embeds"), unavailable=no_images, view=patch_rows,
        inverse=onto_patch_grid,
        doc="The SAM encoder's output (neck and two stride-2 convolutions), one row per folded cell in raster order, "
        "``[views, patches, vision_hidden_size]``, as the CLIP embeddings take it (before its CLS and positions): "
        "also the second part of each row the tower returns. Assign or edit in place.",
    )

    tower_output = value(
        "tower_output", Patches, description="the last CLIP block's stream (no final norm)",
        key=last_block_output, select=None, unavailable=no_images,
        doc="The last CLIP block's stream, ``[views, 1 + patches, vision_hidden_size]``, CLS first: the stack has no "
        "final norm. The tower's own ``last_hidden_state`` drops the CLS and joins ``sam_features`` on the last axis "
        "(``projector.input``).",
    )


class UnlimitedOcrGrids:
    """Each image's global view as one row of the views' run (``of=`` says which value's rows: the CLIP stream, CLS
    first; the SAM grid; a value without CLS); its tokens after its crops', each token row followed by
    ``image_newline``, one ``view_separator`` after the view."""

    stream_dims = 2  # [views, rows, ...]

    def patch_grid(self, inputs: ImageInputs, image: int, of: str = "stream") -> Grid:
        value_named(of, PATCH_VALUES, "Unlimited-OCR per-patch")
        pixels = inputs["pixel_values"]
        check_image(image, pixels.shape[0])
        return view_grid(pixels.shape[0], pixels.shape[-1], inputs.config.vision_config.sam_config.patch_size,
                         image, of)

    def crop_grid(self, pixels: torch.Tensor, crop: int, config: Any, of: str = "stream") -> Grid:
        """Crop ``crop``'s grid over the crops' run's rows (``of=`` as `patch_grid`)."""
        value_named(of, PATCH_VALUES, "Unlimited-OCR per-patch")
        return view_grid(pixels.shape[0], pixels.shape[-1], config.vision_config.sam_config.patch_size, crop, of)

    def token_grid(self, inputs: ImageInputs, image: int) -> Grid:
        crops = [int(count) for count in inputs["num_local_patches"]]
        check_image(image, len(crops))
        processor = inputs.processor
        ratio = processor.patch_size * processor.downsample_ratio
        view = max(processor.image_processor.size["height"], processor.image_processor.size["width"]) // ratio
        crop = processor.image_processor.tile_size // ratio
        counts = []
        for count, (columns, rows) in zip(crops, inputs["patches_grid"].tolist()):
            local = (rows * crop) * (columns * crop + 1) if count else 0
            counts.append(local + view * (view + 1) + 1)
        start = sum(counts[:image]) + counts[image] - view * (view + 1) - 1
        cells = raster(view, view + 1, start)[:, :view]  # each token row's image_newline left out
        return Grid(cells, slice(sum(counts[:image]), sum(counts[: image + 1])))


def view_grid(views: int, pixels: int, sam_patch: int, view: int, of: str) -> Grid:
    """View (or crop) ``view``'s grid over a value of one row per view: the CLIP stream (CLS first), the SAM grid, or
    the folded grid without CLS."""
    side = pixels // sam_patch if of == "sam" else folded_side(pixels, sam_patch)
    before = 1 if of == "stream" else 0
    per_view = before + side * side
    start = view * per_view
    return Grid(raster(side, side, start + before), slice(start, start + per_view), views * per_view)


RENAME = {
    "model.language_model.embed_tokens": "embed_tokens",
    "model.language_model.layers": "layers",
    "model.language_model.norm": "norm",
    "model.vision_tower": "vision",
    "model.multi_modal_projector": "projector",
    "vision_encoder.encoder.layers": "layers",
    "sam_encoder.layers": "sam_layers",
    "sam_encoder.patch_embed": "patch_embed",
    **ENCODER_BLOCK_RENAME,
    **SAM_BLOCK_RENAME,
}

ENVOYS = {
    UnlimitedOcrVisionModel: UnlimitedOcrVision,
    UnlimitedOcrEncoderLayer: VisionLayer,
    UnlimitedOcrAttention: VisionAttention,
    UnlimitedOcrMLP: VisionMlp,
    UnlimitedOcrSamVisionLayer: SamVisionLayer,
    UnlimitedOcrSamVisionAttention: SamVisionAttention,
    UnlimitedOcrSamMLPBlock: SamVisionMlp,
}

#: The tower's second run: the local crops, where the processor makes any.
CROPS = Crops(carrier="pixel_values_local",
              made_when="an image whose longer side is over its tile_size, into squares of that side")

#: Several invokes' crop counts and crop grids, lists of one entry per image, joined in invoke order.
BATCHING = Batching(per_image_lists=("num_local_patches", "patches_grid"))

FAMILY = Family("unlimited_ocr", RENAME, ENVOYS, "model.language_model.layers", crops=CROPS,
                grid_layout=UnlimitedOcrGrids(), batching=BATCHING)
