"""Ovis2 (model_type ovis2): an AIMv2-style tower on tiles, a visual tokenizer (a softmax over a visual vocabulary,
then an embedding table), a Qwen2 text model.

The image processor (``Ovis2ImageProcessor``, ``crop_to_patches``) cuts an
image into the fewest tiles of the tower's ``image_size`` that cover 90% of
it and puts the whole image, resized to one tile (the thumbnail), before
them; an image that fits one tile is that tile alone. The tower
(``model.vision_tower``, `Ovis2Vision`) runs once over every tile, one row a
tile, ``[tiles, patches, vision_hidden_size]``, no CLS, patches in raster
order: a convolutional patch embedding (``patch_embed``, whose output is
``patch_embeddings``), an RMS norm and learned positions, pre-norm blocks
(``layers``: RMS norms, the attention, a SwiGLU MLP), a final RMS norm
(``vision.norm``, whose output is ``tower_output``).

The tower's forward then tokenizes: it folds each ``hidden_stride`` x
``hidden_stride`` block of a tile's patches into one row (the block's
patches joined on the feature axis, row by row; blocks in raster order),
maps it to logits over the visual vocabulary (``head_linear``, then the
LayerNorm ``head_norm``, at their native paths in the tower) and takes their
softmax, the tower's ``pooler_output``. ``Ovis2Model.get_image_features``
pads each row with zeros for the 5 indicator words and hands it to the
visual embedding table (``model.visual_embeddings_table``, the projector),
which multiplies it by its weight: ``projector.input`` is ``[tiles,
image_tokens, visual_vocab]``, ``projector.visual_tokens`` the same without
the indicator columns (`envoys.vision.visual_tokens`), ``projector.output``
``[tiles, image_tokens, hidden_size]``, each token's expected embedding
under its probabilities. ``Ovis2Model.forward`` scatters that at the image
tokens (``inputs_embeds_masked_scatter_0``, argument 1), so
``image_features`` is ``projector.output`` flattened. The projector runs a
second time in ``get_image_features`` on the indicator words' ids (a lookup
of its last 5 rows), and the forward then writes those rows at the
indicator tokens the processor puts around each image's tiles
(``<IMG_START>``, ``<IMG_GRID>``, ``<IMG_COL>``, ``<IMG_ROW>``,
``<IMG_END>``): ``projector.output`` is the first call's, and only the image
tokens hold ``image_features`` (``layers[0].input[image_token_mask] ==
image_features``).

The prompt holds one run of image tokens per tile, image after image: the
first tile's after ``<IMG_START>``, then after ``<IMG_GRID>`` the grid
tiles', row by row (`OvisGrids` places them: a tile after ``<IMG_COL>`` is
the next column, after ``<IMG_ROW>`` the next row); the thumbnail's tile is
in the image's rows, off the grid.
"""

from __future__ import annotations

from typing import Any

from transformers.models.ovis2.modeling_ovis2 import (
    Ovis2MLP,
    Ovis2VisionAttention,
    Ovis2VisionEncoderLayer,
    Ovis2VisionModel,
    Ovis2VisualEmbeddingTable,
)

from ..core.layouts import Patches
from ..core.values import Argument, value
from ..image.grids import GridError, ImageInputs, TiledImage, TiledLayout
from ..vision.tower import Vision, VisionAttention, VisionLayer, VisionMlp, no_images, norm_output
from ..vision.visual_tokens import VisualTokenizerProjector, VisualTokens, visual_tokens_value
from . import Family

RENAME = {
    "model.language_model.embed_tokens": "embed_tokens",
    "model.language_model.layers": "layers",
    "model.language_model.norm": "norm",
    "model.vision_tower": "vision",
    "model.visual_embeddings_table": "projector",
    "transformer.encoder.layers": "layers",
    "transformer.embeddings.patch_embedding": "patch_embed",
    "transformer.rms_norm": "norm",
    "rms_norm1": "input_layernorm",
    "rms_norm2": "post_attention_layernorm",
    "attention": "self_attn",
    "attention.out_proj": "attention.o_proj",
    "ffn": "mlp",
}


class Ovis2Vision(Vision):
    """Ovis2's tower: each tile a row, ``[tiles, patches, vision_hidden_size]``, then the visual tokenizer's head.

    Rows are the tiles the image processor made, image after image: each
    image's thumbnail first, then its grid tiles in raster order (an image
    that fits one tile has that tile alone); each row holds a tile's
    ``(image_size // patch_size) ** 2`` patches in raster order, no CLS.
    ``tower_output`` is the final RMS norm's output (``vision.norm``), the
    tower's stream before it folds it into its visual tokenizer's head.
    ``image_size`` is the tile's side;
    ``hidden_stride`` the side, in patches, of the block folded into one
    image token.
    """

    tower_output = value(
        "tower_output", Patches, description="the last block's stream after the tower's final norm",
        key=norm_output, select=None, unavailable=no_images,
        doc="The last block's stream after the tower's final RMS norm (``vision.norm``), ``[tiles, patches, "
        "vision_hidden_size]``: what the tower folds into image tokens for its visual tokenizer.",
    )

    @property
    def image_size(self) -> int:
        """The side of a tile, in pixels (the vision config's ``image_size``): every row of the tower is one tile."""
        return self.vision_config.image_size

    @property
    def hidden_stride(self) -> int:
        """The side, in patches, of the square block the visual tokenizer folds into one image token."""
        return self.vision_config.hidden_stride


class Ovis2Projector(VisualTokenizerProjector):
    """Ovis2's projector, the visual embedding table (``visual_embeddings_table``): ``projector.visual_tokens``
    (`envoys.vision.visual_tokens`) is its input without the indicator columns, ``[tiles, image_tokens,
    visual_vocab]``, what the tower's visual tokenizer returns."""

    visual_tokens = visual_tokens_value(VisualTokens, "input", Argument(0, "visual_tokens"))


ENVOYS = {
    Ovis2VisionModel: Ovis2Vision,
    Ovis2VisualEmbeddingTable: Ovis2Projector,
    Ovis2VisionEncoderLayer: VisionLayer,
    Ovis2VisionAttention: VisionAttention,
    Ovis2MLP: VisionMlp,
}

#: The tokens Ovis2's processor writes before a tile's image tokens.
IMAGE_START, GRID_START, NEXT_COLUMN, NEXT_ROW = "<IMG_START>", "<IMG_GRID>", "<IMG_COL>", "<IMG_ROW>"


class OvisGrids(TiledLayout):
    """Ovis2's grids: each image's thumbnail tile first, then its grid tiles, placed by the token before each run.

    On the tower's stream (``[tiles, patches, ...]``, no CLS) a cell is its
    patch's row; on the image tokens, a cell is one token: the
    ``hidden_stride`` x ``hidden_stride`` block of patches folded into it, in
    raster order of the blocks within each tile (a tile whose side is no
    multiple of the stride is padded at its bottom and right).
    """

    def token_side(self, config: Any) -> int:
        stride = config.vision_config.hidden_stride
        return -(-self.patch_side(config) // stride)

    def tiled_images(self, inputs: ImageInputs) -> list[TiledImage]:
        images: list[TiledImage] = []
        tile = 0
        for run in inputs.token_runs():
            before = inputs.token_before(run)
            if before == IMAGE_START:
                images.append(TiledImage((), run, tile, whole_first=True))
                tile += 1
                continue
            if not images or before not in (GRID_START, NEXT_COLUMN, NEXT_ROW):
                raise GridError(f"the image tokens at position {run.position} of prompt {run.batch} follow "
                                f"{before!r}, not one of {IMAGE_START}, {GRID_START}, {NEXT_COLUMN}, {NEXT_ROW}: the "
                                f"prompt is not one Ovis2's processor wrote, so its tiles cannot be placed")
            image = images[-1]
            if before == GRID_START:
                place = (0, 0)
            else:
                row, column, _ = image.tiles[-1]
                place = (row, column + 1) if before == NEXT_COLUMN else (row + 1, 0)
            images[-1] = TiledImage((*image.tiles, (*place, run)), image.whole, image.first, whole_first=True)
            tile += 1
        return images


FAMILY = Family(
    "ovis2", RENAME, ENVOYS, "model.language_model.layers", grid_layout=OvisGrids(),
)
