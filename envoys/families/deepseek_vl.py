"""DeepSeek-VL (model_type deepseek_vl): a SigLIP tower, a two-layer aligner, a Llama text model.

``DeepseekVLModel.get_image_features`` runs the tower (``model.vision_model``,
a ``SiglipVisionModel``: no CLS, one row per image, ``[images, patches,
vision_hidden_size]``) and hands the projector (``model.aligner``:
``linear1``, GELU, ``linear2``, patch by patch) the tower's
``last_hidden_state``, after ``post_layernorm`` (the tower's ``norm``): so
``projector.input`` is ``tower_output``, and every block feeds the logits.
The projector's output replaces the tower's ``pooler_output`` (a pooling
head, where a checkpoint's tower has one, runs on ``tower_output`` and feeds
nothing). ``DeepseekVLModel.forward`` reshapes it to ``[image_tokens,
hidden_size]`` and scatters it into the token embeddings
(``inputs_embeds_masked_scatter_0``, argument 1), so ``image_features`` is
``projector.output`` flattened, image after image, one image token a patch in
raster order. The image processor resizes each image so its longer side is
the tower's ``image_size`` and pads it to a square with the mean colour, so
every image is one tile; the processor writes ``num_image_tokens`` image
tokens (``<image_placeholder>``) for each placeholder. The grids
(`DeepseekGrids`) place each image's patches, and its image tokens, on that
padded square.
"""

from __future__ import annotations

from ..image.grids import ImageInputs, check_image
from ..towers.encoder_names import ENCODER_BLOCK_RENAME, ENCODER_TOWER_RENAME
from ..towers.fixed_tower import TileRows
from . import Family
from .llava import SIGLIP_ENVOYS, LlavaGrids

#: The inner model's text model, tower and aligner, and the SigLIP tower's own names. Not `encoder_names.tower_rooted`:
#: the inner model's ``vision_model`` is the tower itself, so its keys would bind the tower's blocks on the inner model.
RENAME = {
    "model.language_model.embed_tokens": "embed_tokens",
    "model.language_model.layers": "layers",
    "model.language_model.norm": "norm",
    "model.vision_model": "vision",
    "model.aligner": "projector",
    **ENCODER_TOWER_RENAME,
    "post_layernorm": "norm",
    **ENCODER_BLOCK_RENAME,
}

ENVOYS = dict(SIGLIP_ENVOYS)


class DeepseekGrids(LlavaGrids):
    """DeepSeek-VL's grids: LLaVA's, each image one SigLIP row whose every patch is an image token (no CLS, none
    dropped). The grid is the padded square the tower sees: the padding's patches are cells too."""

    @staticmethod
    def _tiles(inputs: ImageInputs, image: int) -> TileRows:
        check_image(image, inputs["pixel_values"].shape[0])
        vision = inputs.config.vision_config
        return TileRows(vision.image_size // vision.patch_size, cls=0, dropped=0)


FAMILY = Family("deepseek_vl", RENAME, ENVOYS, "model.language_model.layers", grid_layout=DeepseekGrids())
