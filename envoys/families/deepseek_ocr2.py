"""DeepSeek-OCR 2 (model_type deepseek_ocr2): a tower of two stacks in sequence (a SAM encoder with its neck, then a
Qwen2-style decoder over the SAM grid and learned queries, of which only the query rows leave it), run twice in one
forward (every image's global view, then the local crops), on a mixture-of-experts text model.

``DeepseekOcr2Model.forward`` scatters the image features into the token
embeddings (``inputs_embeds_masked_scatter_0``, argument 1, found).

The processor resizes every image, padded to a square, to one global view
(``pixel_values``, the image processor's ``size``) and cuts an image whose
longer side is over its ``tile_size`` into square local crops of that side
(``pixel_values_local``; ``num_local_patches`` per image).
``get_image_features`` runs the tower (``model.vision_tower``) and the
projector (``model.multi_modal_projector``) on the global views, then both
again on the crops where there are any. So ``model.vision`` is the tower's
first run, the global views, and ``model.projector`` the projector's;
``model.crops`` is the tower's second run, one row per crop in the processor's
order, and ``model.crops.projector`` the projector's second run
(`envoys.vision.crops`). On a forward whose images are all too small to crop,
``model.crops``'s values are `Unavailable`, saying so.

The tower (``DeepseekOcr2VisionModel``) is two stacks:

- the SAM encoder (``sam_encoder``): its patch convolution
  (``vision.patch_embed``; its output, channels-last and flattened, is
  ``patch_embeddings``, ``[views, sam_patches, sam_hidden_size]``), an
  absolute position embedding, its blocks at ``vision.sam_layers[i]``
  (windowed and global SAM blocks, served as GOT-OCR 2.0's are,
  `envoys.towers.sam`), then its neck and two stride-2 convolutions
  (``sam_encoder.proj``) that fold the grid 4x per side: ``vision.sam_features``,
  ``[views, patches, vision_hidden_size]``, one row per folded cell in raster
  order;
- the decoder (``vision_encoder``), a Qwen2-style stack: its input is
  ``sam_features`` followed by learned queries (``query_1024_resolution``'s
  256 rows on a view of more than 144 folded cells, ``query_768_resolution``'s
  144 otherwise), ``[views, patches + queries, vision_hidden_size]``; its
  blocks at ``vision.layers[i]`` (``input_layernorm``, ``self_attn`` with a
  rotary embedding, on the shared attention interface, ``post_attention_layernorm``,
  ``mlp``) attend under one mask, bidirectional over the patch rows and causal
  over the queries (a query sees every patch and the queries before it); its
  final RMSNorm is ``vision.norm``, whose output is ``tower_output``.

``vision.layers`` is the decoder because its query rows are the image's
tokens: the tower returns the normed query rows alone, ``[views, queries,
vision_hidden_size]`` (``projector.input``), and the projector, one linear
map, gives one image token each. The host lays each image out as its crops'
query rows, crop after crop, then its view's, then one learned
``view_separator``: ``vision.image_features`` is all of it, image after image.

The text model (``DeepseekOcr2TextModel``) has pre-norm blocks returning the
stream alone; its MLP is dense on the blocks ``mlp_layer_types`` calls
``dense`` and a DeepSeek-style mixture of experts on the ``sparse`` ones (a
top-k router ``gate``, routed experts, shared experts), whose
``mlp.router_logits`` is the router's ``F.linear`` output.

Unavailable: ``mlp.router_logits`` on the dense text blocks; every value of
``model.crops`` on a forward with no crops, and in a trace of several invokes
that carry images; ``vision.token_grid`` and ``crops.token_grid`` (the image
tokens are the learned queries' outputs, which have no cell of the image).

Grids (`DeepseekOcr2Grids`): ``vision.patch_grid(value, image, of=...)`` lays
out image ``image``'s global view, ``of="stream"`` (default) a decoder
block's value (its patch rows; the query rows are on no cell), ``"sam"`` a SAM
value (``patch_embeddings``, ``sam_layers``' values) on the finer SAM grid;
``crops.patch_grid(value, crop, of=...)`` crop ``crop`` on its own grids.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.models.deepseek_ocr2.modeling_deepseek_ocr2 import (
    DeepseekOcr2SamMLPBlock,
    DeepseekOcr2SamVisionAttention,
    DeepseekOcr2SamVisionLayer,
    DeepseekOcr2VisionAttention,
    DeepseekOcr2VisionEncoderLayer,
    DeepseekOcr2VisionMLP,
    DeepseekOcr2VisionModel,
)

from ..core.layouts import Patches
from ..core.standard import child
from ..core.values import Field, Unavailable, value
from ..image.grids import Grid, ImageInputs, check_image, raster, value_named
from ..towers.sam import SAM_BLOCK_RENAME, SamVisionAttention, SamVisionLayer, SamVisionMlp
from ..towers.sam_stacks import SamStackedVision, folded_side
from ..vision.crops import Crops
from ..vision.tower import (
    Vision,
    VisionAttention,
    VisionLayer,
    VisionMlp,
    no_images,
    norm_output,
    onto_patch_grid,
    patch_rows,
)
from . import Family

#: The per-patch values a grid reads (``of=``): a decoder block's (patch rows first, then the queries), a SAM block's.
PATCH_VALUES = ("stream", "sam")


def sam_output(vision: Vision) -> str:
    """Where ``sam_features`` is: the SAM encoder's output."""
    return f"{child(vision, 'sam_encoder').path}.output"


class DeepseekOcr2Vision(SamStackedVision):
    """DeepSeek-OCR 2's tower at ``model.vision_tower``: the SAM stack (``sam_layers``), its neck and folding
    convolutions, then the decoder over the SAM grid and the learned queries (``layers``, final norm ``norm``), one row
    per view.

    Sizes: ``vision_hidden_size``, ``num_heads``, ``head_dim`` and
    ``intermediate_size`` are the decoder's (``encoder_config``);
    ``patch_size`` and ``image_size`` the SAM stack's (``sam_config``: the
    patch convolution's side and the global view's side in pixels);
    ``sam_hidden_size``, ``sam_num_heads``, ``sam_intermediate_size``,
    ``window_size`` and ``global_attn_indexes`` the SAM stack's.
    """

    sam_features = value(
        "sam_features", Patches, description="the SAM stack's folded grid, the decoder's patch rows",
        key=sam_output, select=Field("last_hidden_state"), unavailable=no_images, view=patch_rows,
        inverse=onto_patch_grid,
        doc="The SAM encoder's output (neck and two stride-2 convolutions), one row per folded cell in raster order, "
        "``[views, patches, vision_hidden_size]``: the decoder's first rows, before the learned queries. Assign or "
        "edit in place.",
    )

    tower_output = value(
        "tower_output", Patches, description="the decoder's stream after its final norm, patch rows and queries",
        key=norm_output, select=None, unavailable=no_images,
        doc="The decoder's final norm's output, ``[views, patches + queries, vision_hidden_size]``: the tower returns "
        "its query rows alone (``projector.input``).",
    )


def queries(patches: int) -> int:
    """How many learned queries follow ``patches`` patch rows: the 1024 px table's 256 beyond 144 patches, else the
    768 px table's 144 (``DeepseekOcr2VisionModel.forward``)."""
    return 144 if patches <= 144 else 256


def view_grid(views: int, pixels: int, sam_patch: int, view: int, of: str) -> Grid:
    """View (or crop) ``view``'s grid over a value of one row per view: a decoder block's (the patch rows, the queries
    after them on no cell) or the SAM grid."""
    if of == "sam":
        side = pixels // sam_patch
        per_view = side * side
    else:
        side = folded_side(pixels, sam_patch)
        per_view = side * side + queries(side * side)
    start = view * per_view
    return Grid(raster(side, side, start), slice(start, start + per_view), views * per_view)


class DeepseekOcr2Grids:
    """Each image's global view as one row of the views' run (``of=`` says which value's rows: the decoder's stream,
    patch rows then queries; the SAM grid). The image tokens are the queries' outputs: no token grid."""

    stream_dims = 2  # [views, rows, ...]

    def patch_grid(self, inputs: ImageInputs, image: int, of: str = "stream") -> Grid:
        value_named(of, PATCH_VALUES, "DeepSeek-OCR 2 per-patch")
        pixels = inputs["pixel_values"]
        check_image(image, pixels.shape[0])
        return view_grid(pixels.shape[0], pixels.shape[-1], inputs.config.vision_config.sam_config.patch_size,
                         image, of)

    def crop_grid(self, pixels: torch.Tensor, crop: int, config: Any, of: str = "stream") -> Grid:
        """Crop ``crop``'s grid over the crops' run's rows (``of=`` as `patch_grid`)."""
        value_named(of, PATCH_VALUES, "DeepSeek-OCR 2 per-patch")
        return view_grid(pixels.shape[0], pixels.shape[-1], config.vision_config.sam_config.patch_size, crop, of)

    def token_grid(self, inputs: ImageInputs, image: int) -> Grid:
        raise Unavailable(
            "DeepSeek-OCR 2's image tokens are its decoder's learned queries' outputs (each attends to every patch), "
            "which have no cell of the image: there is no token grid; lay out the patch rows of a tower value with "
            "vision.patch_grid(value, of='stream')"
        )


RENAME = {
    "model.language_model.embed_tokens": "embed_tokens",
    "model.language_model.layers": "layers",
    "model.language_model.norm": "norm",
    "model.vision_tower": "vision",
    "model.multi_modal_projector": "projector",
    "vision_encoder.layers": "layers",
    "vision_encoder.norm": "norm",
    "sam_encoder.layers": "sam_layers",
    "sam_encoder.patch_embed": "patch_embed",
    **SAM_BLOCK_RENAME,
}

ENVOYS = {
    DeepseekOcr2VisionModel: DeepseekOcr2Vision,
    DeepseekOcr2VisionEncoderLayer: VisionLayer,
    DeepseekOcr2VisionAttention: VisionAttention,
    DeepseekOcr2VisionMLP: VisionMlp,
    DeepseekOcr2SamVisionLayer: SamVisionLayer,
    DeepseekOcr2SamVisionAttention: SamVisionAttention,
    DeepseekOcr2SamMLPBlock: SamVisionMlp,
}

#: The tower's second run: the local crops, where the processor makes any.
CROPS = Crops(carrier="pixel_values_local",
              made_when="an image whose longer side is over its tile_size, into squares of that side")

FAMILY = Family("deepseek_ocr2", RENAME, ENVOYS, "model.language_model.layers", crops=CROPS,
                grid_layout=DeepseekOcr2Grids())
