"""LightOnOCR (model_type lighton_ocr): Mistral 3's Pixtral tower and projector under other names, a Qwen3 text model.

``LightOnOcrModel`` is Mistral 3's host with its children renamed: the tower
is ``model.vision_encoder`` (a ``PixtralVisionModel``, the same `PixtralVision`
as Mistral 3's: packed, ``[1, all patches, vision_hidden_size]``, one
attention call under a block-diagonal mask, no final norm), the projector
``model.vision_projection`` (Mistral 3's: RMSNorm, the
``spatial_merge_size`` x ``spatial_merge_size`` ``patch_merger``, then
``linear_1``, GELU, ``linear_2``, both without biases) and the text model a
Qwen3 at ``model.language_model``. What differs is what the projector reads:
``get_image_features`` takes the tower's ``last_hidden_state`` (there is no
``vision_feature_layer``) without its leading 1, ``[all patches,
vision_hidden_size]``, with the processor's ``image_sizes``. So
``projector.input`` is ``vision.tower_output`` without the leading 1, and an
assignment to ``tower_output`` reaches the projector (on Mistral 3 the
projector reads the tower's hidden states, which an assignment to the output
does not replace). ``LightOnOcrModel.forward`` splits the projector's output
per image, concatenates it back and scatters it into the token embeddings
(``inputs_embeds_masked_scatter_0``, argument 1, found), so
``image_features`` is ``projector.output`` itself: ``(h // (patch_size *
spatial_merge_size)) * (w // (patch_size * spatial_merge_size))`` tokens an
image, raster order over the merged grid, as Mistral 3's grids place them.
The processor writes only ``image_token`` per image token (no row-break or end
tokens between them).
"""

from __future__ import annotations

from ..towers.pixtral import MERGED_PIXTRAL_GRIDS, PIXTRAL_ENVOYS, PIXTRAL_RENAME
from . import Family

RENAME = {
    "model.language_model.embed_tokens": "embed_tokens",
    "model.language_model.layers": "layers",
    "model.language_model.norm": "norm",
    "model.vision_encoder": "vision",
    "model.vision_projection": "projector",
    **PIXTRAL_RENAME,
}

FAMILY = Family("lighton_ocr", RENAME, dict(PIXTRAL_ENVOYS), "model.language_model.layers", grid_layout=MERGED_PIXTRAL_GRIDS)
