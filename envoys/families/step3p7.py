"""Step-3.7 (model_type step3p7): a layer-scaled ViT with two downsampling convolutions, run twice in one forward
(every image's global view, then the local crops), on a mixture-of-experts text model with gated attention.

``Step3p7Model.forward`` scatters the projected image features into the
token embeddings (``inputs_embeds_masked_scatter_0``, argument 1, found).

The processor resizes every image to one square global view (``pixel_values``,
``size``) and cuts an image whose longer side is over that size (or a
narrow one) into square local crops (``pixel_values_local``, ``patch_size``
px, ``num_local_patches`` per image). ``get_image_features`` runs the tower
(``model.vision_model``) and the projector (``model.multi_modal_projector``)
on the global views, then both again on the crops where there are any. So:

- ``model.vision`` is the tower's first run, the global views, one row per
  image, ``[images, patches, vision_hidden_size]``, and ``model.projector``
  the projector's first run;
- ``model.crops`` is the tower's second run, one row per crop, ``[crops,
  patches, vision_hidden_size]``, crops in the processor's order (image after
  image, each image's row after row), every standard value of the tower and
  its blocks served on it (`envoys.vision.crops`), and
  ``model.crops.projector`` the projector's second run. On a forward whose
  images are all too small to crop the tower runs once, and ``model.crops``'s
  values are `Unavailable`, saying so;
- ``vision.image_features`` is what the host scatters: each image's crops'
  rows, then its global view's, image after image.

The tower embeds each patch with a convolution (``embeddings.patch_embedding``,
``vision.patch_embed``, whose output is ``patch_embeddings``), adds learned
positions resampled to the input's grid, LayerNorms the stream
(``pre_layernorm``), and runs its blocks (``layers``): ``layernorm_before``,
``self_attn`` (an axial 2D rotary embedding, one kernel call on the shared
interface, ``out_proj``), ``layernorm_after``, ``mlp`` (``fc1`` / ``fc2``),
each sublayer's output scaled by a learned ``lambda_1`` / ``lambda_2`` before
it joins the stream, InternViT's block (`envoys.towers.internvit`): the
block's ``attention_output`` and ``mlp_output`` are after the scales, so
``layer_input + attention_output + mlp_output == layer_output``. The tower has
no final norm: ``tower_output`` is the last block's stream. Two stride-2
convolutions (``downsampler1``, ``downsampler2``) then fold the patch grid 4x
per side into ``4 * vision_hidden_size`` channels, the tower's
``last_hidden_state`` and ``projector.input``; the projector is one linear
map, and its output, one row per image token in raster order over the folded
grid, is each view's rows of ``image_features``.

The text model (``Step3p7TextModel`` at ``model.language_model``) has
pre-norm blocks returning the stream alone, so the standard block values hold
as they are; its RMSNorms scale by ``1 + weight``. Its attention RMS-norms
queries and keys per head and calls the kernel once on the shared interface
(sliding-window on the blocks ``layer_types`` says), then gates each head's
output by a sigmoid (``g_proj``) before ``o_proj``. Its MLP is dense on the
blocks ``mlp_layer_types`` calls ``dense`` and a mixture of experts on the
``sparse`` ones (``Step3p7SparseMoeBlock``: routed experts weighted by
``gate``'s top-k of its sigmoid scores, plus the shared expert), whose
``mlp.router_logits`` is the output of ``gate``'s ``F.linear``.

Unavailable: ``mlp.router_logits`` on the dense text blocks; every value of
``model.crops`` on a forward with no crops, and in a trace of several invokes
that carry images; ``model.crops.token_grid`` (an image's tokens are its
crops', then its view's: ``model.vision.token_grid`` lays out the view's).

Grids (`envoys.towers.views_and_crops`): ``vision.patch_grid(value, image)``
is the image's global view on its patch grid, ``vision.token_grid(value,
image)`` the view's tokens on its token grid; ``crops.patch_grid(value,
crop)`` crop ``crop`` on its own patch grid.
"""

from __future__ import annotations

from transformers.models.step3p7.modeling_step3p7 import (
    Step3p7VisionAttention,
    Step3p7VisionEncoderLayer,
    Step3p7VisionMLP,
    Step3p7VisionModel,
)

from ..core.layouts import Patches
from ..core.values import value
from ..towers.encoder_names import ENCODER_BLOCK_RENAME
from ..towers.internvit import LayerScaledAttention, LayerScaledLayer, LayerScaledMlp
from ..towers.views_and_crops import GlobalViewGrids
from ..vision.crops import Crops
from ..vision.tower import Vision, no_images
from . import Family


def last_block_output(vision: Vision) -> str:
    """Where ``tower_output`` is: the last block's output (the tower has no final norm, and its own output is after
    the downsampling convolutions)."""
    return f"{vision.layers[-1].path}.output"


class Step3p7Vision(Vision):
    """Step-3.7's ViT at ``model.vision_model``: one row per view, ``[views, patches, vision_hidden_size]``, raster
    order, no CLS, no final norm, two downsampling convolutions after the blocks.

    ``tower_output`` is the last block's output (the stream the convolutions
    fold); the tower's own ``last_hidden_state`` is after them, and is
    ``projector.input``. Sizes, off the vision config: ``vision_hidden_size``
    (``hidden_size``), ``num_heads``, ``intermediate_size`` (``hidden_size *
    mlp_ratio``), ``patch_size``, and ``image_size``, the side of its learned
    position grid in pixels (the global view's side; a crop's grid takes them
    resampled).
    """

    tower_output = value(
        "tower_output", Patches, description="the last block's stream, before the downsampling convolutions",
        key=last_block_output, select=None, unavailable=no_images,
        doc="The last block's stream, ``[views, patches, vision_hidden_size]``: the tower has no final norm, and what "
        "it returns is after its two downsampling convolutions (``projector.input``).",
    )


RENAME = {
    "model.language_model.embed_tokens": "embed_tokens",
    "model.language_model.layers": "layers",
    "model.language_model.norm": "norm",
    "model.vision_model": "vision",
    "model.multi_modal_projector": "projector",
    "embeddings.patch_embedding": "patch_embed",  # the tower's convolution: no other module of the model is named so
    "layernorm_before": "input_layernorm",
    "layernorm_after": "post_attention_layernorm",
    **{key: name for key, name in ENCODER_BLOCK_RENAME.items() if key.startswith(("self_attn.", "mlp."))},
}

ENVOYS = {
    Step3p7VisionModel: Step3p7Vision,
    Step3p7VisionEncoderLayer: LayerScaledLayer,
    Step3p7VisionAttention: LayerScaledAttention,
    Step3p7VisionMLP: LayerScaledMlp,
}

#: The tower's second run: the local crops, where the processor makes any.
CROPS = Crops(
    carrier="pixel_values_local",
    made_when="an image whose longer side is over its global view's size, or a narrow one, into squares of its "
    "patch_size",
)

FAMILY = Family("step3p7", RENAME, ENVOYS, "model.language_model.layers", crops=CROPS, grid_layout=GlobalViewGrids())
