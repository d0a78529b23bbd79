"""Gemma 3 (model_type gemma3): a SigLIP tower, an average-pooling projector, a Gemma 3 text model.

The tower (``model.vision_tower``, SigLIP: no CLS, one row per image) ends in
``post_layernorm`` over the patches, the tower's ``norm``, so
``tower_output`` is after it. The projector (``multi_modal_projector``)
reads ``tower_output`` whole, average-pools each image's patch grid to
``mm_tokens_per_image`` tokens (a square grid, raster order), RMS-norms them
(``mm_soft_emb_norm``) and multiplies by ``mm_input_projection_weight``:
``[images, mm_tokens_per_image, hidden_size]``. ``Gemma3Model.forward``
scatters that into the token embeddings, already scaled by
``sqrt(hidden_size)`` (``inputs_embeds_masked_scatter_0``, argument 1, still
``[images, tokens, hidden]``), so ``image_features`` is that tensor flat,
``[image_tokens, hidden_size]``, image after image, in the order the image
tokens are filled.

The text blocks are sandwich-norm blocks (`SandwichLayer`), their layers
sliding-window or global (``layer_types``). The processor marks each image's
soft tokens in ``token_type_ids``, and under that mask an image's tokens
attend to each other in both directions (within the sliding window on
sliding layers): the text attention is causal at text rows only
(`GemmaAttention`).
"""

from __future__ import annotations

import math

from transformers.models.gemma3.modeling_gemma3 import Gemma3Attention, Gemma3DecoderLayer, Gemma3MLP
from transformers.models.siglip.modeling_siglip import (
    SiglipAttention,
    SiglipEncoderLayer,
    SiglipMLP,
    SiglipVisionModel,
)

from rewrites.image_scatter import Scatter

from ..blocks.sandwich import SandwichAttention, SandwichLayer, SandwichMlp
from ..core.values import Unavailable
from ..image.grids import Grid, ImageInputs, check_image, raster
from ..towers.encoder_names import SIGLIP_WRAPPER_RENAME
from ..vision.tower import Vision, VisionAttention, VisionLayer, VisionMlp
from . import Family

RENAME = dict(SIGLIP_WRAPPER_RENAME)


class GemmaAttention(SandwichAttention):
    """A Gemma 3 text block's attention: the interior at the kernel call, sliding-window or global.

    Causal at text rows; an image's soft tokens (the processor's
    ``token_type_ids``) attend to every token of their own image too, later
    ones included, on the prompt pass. On a sliding layer no query sees a key
    ``sliding_window`` or more positions away.
    """


ENVOYS = {
    Gemma3DecoderLayer: SandwichLayer,
    Gemma3Attention: GemmaAttention,
    Gemma3MLP: SandwichMlp,
    SiglipVisionModel: Vision,
    SiglipEncoderLayer: VisionLayer,
    SiglipAttention: VisionAttention,
    SiglipMLP: VisionMlp,
}

#: What Gemma 3's processor writes between an image and the pan-and-scan crops it adds for it.
PAN_AND_SCAN = "here are some crops to help you see better"


def without_crops(inputs: ImageInputs) -> ImageInputs:
    """``inputs``, when no image of the batch has pan-and-scan crops; `Unavailable` saying why otherwise."""
    tokenizer = getattr(inputs.processor, "tokenizer", inputs.processor)
    if tokenizer is not None and any(PAN_AND_SCAN in tokenizer.decode(row) for row in inputs.input_ids.tolist()):
        raise Unavailable(
            "the grids are unavailable on a Gemma 3 batch with pan-and-scan crops: the processor adds each crop as a "
            "tower row of its own, resized to the whole square, so its patches have no place on the image's grid; "
            "run the images without pan-and-scan (do_pan_and_scan=False, the processor's default) to read grids"
        )
    return inputs


class Gemma3Grids:
    """Gemma 3's grids: one tower row per image (SigLIP, no CLS), a square patch grid in raster order; on the image
    tokens, the projector's pooled cells (``mm_tokens_per_image``, a square grid in raster order), image after image.
    A batch with pan-and-scan crops has none (`without_crops`)."""

    stream_dims = 2

    def patch_grid(self, inputs: ImageInputs, image: int) -> Grid:
        check_image(image, without_crops(inputs)["pixel_values"].shape[0])
        vision = inputs.config.vision_config
        side = vision.image_size // vision.patch_size
        rows = side * side
        stream = inputs["pixel_values"].shape[0] * rows
        return Grid(raster(side, side, image * rows), slice(image * rows, (image + 1) * rows), stream)

    def token_grid(self, inputs: ImageInputs, image: int) -> Grid:
        check_image(image, without_crops(inputs)["pixel_values"].shape[0])
        tokens = inputs.config.mm_tokens_per_image
        side = math.isqrt(tokens)
        return Grid(raster(side, side, image * tokens), slice(image * tokens, (image + 1) * tokens))


SCATTER = Scatter(purpose="pooled image features, [images, tokens, hidden], scattered into the scaled embeddings")

FAMILY = Family("gemma3", RENAME, ENVOYS, "model.language_model.layers", scatter=SCATTER, text_model_types=("gemma3_text",),
                grid_layout=Gemma3Grids())
