"""GOT-OCR 2.0 (model_type got_ocr2): a SAM-style encoder with a convolutional neck, a convolutional projector, a
Qwen2 text model.

``GotOcr2Model`` (the wrapper's inner model) scatters the projected features
into the token embeddings with ``inputs_embeds.masked_scatter``
(``inputs_embeds_masked_scatter_0``, argument 1, found as on every default
host), so ``image_features`` is the projector's output flattened over images
and tokens.

The tower (``model.vision_tower``, a ``GotOcr2VisionEncoder``: `envoys.towers.sam`)
embeds each image, resized by the processor to the configured square, with a
convolution into a grid ``[images, height, width, vision_hidden_size]``, adds
an absolute position embedding, and runs its blocks on that grid: windowed
blocks (``window_size``) attend within windows of the grid, padded to a
multiple of the window, global blocks (``global_attn_indexes``) over the
whole grid, each with decomposed relative position terms in an inline
kernel (not transformers' shared attention interface; its softmax and the
blocks' return from windows are sites, `rewrites.sam_vision`). The stream
values are served with the grid flattened in raster order,
``[images, patches, vision_hidden_size]``. The neck (two convolutions, each
followed by a channels-first layer norm) maps the last block's grid to
``output_channels`` and returns it channels-first as the tower's
``last_hidden_state``; ``tower_output`` is the last block's stream, before
the neck.

The projector (``model.multi_modal_projector``) reads the neck's output
(``projector.input``, ``[images, output_channels, height, width]``), folds it
with two 3x3 stride-2 convolutions (to ``2 * output_channels``, then to the
text width), flattens the folded grid in raster order and applies a linear
layer: ``projector.output`` is ``[images, (height / 4) * (width / 4),
hidden_size]``. Each image is one tile; the stock processor writes 256 image
tokens for it (``num_image_tokens``). The grids (`GotOcr2Grids`) put each
image's patches on its square grid and its tokens on the folded grid, a
quarter of the side: token ``(r, c)`` is centred on patches ``4r..4r+3``,
``4c..4c+3``, though the two 3x3 convolutions reach a patch or two beyond
them.
"""

from __future__ import annotations

from ..image.grids import Grid, ImageInputs, check_image, raster
from ..towers.encoder_names import WRAPPER_RENAME
from ..towers.sam import GOT_OCR2_ENVOYS, SAM_BLOCK_RENAME
from . import Family

#: The wrapper's names, and a SAM block's.
RENAME = {**WRAPPER_RENAME, **SAM_BLOCK_RENAME}

ENVOYS = dict(GOT_OCR2_ENVOYS)



def folded(side: int) -> int:
    """The side of the projector's output grid: two 3x3 convolutions of stride 2 and padding 1, each ``ceil(n / 2)``."""
    half = (side + 1) // 2
    return (half + 1) // 2


class GotOcr2Grids:
    """One tower row per processor tile (an image, unless called with ``crop_to_patches=True``), its square patch
    grid in raster order; on the image tokens, the projector's folded grid in raster order, tile after tile."""

    stream_dims = 2

    @staticmethod
    def _side(inputs: ImageInputs, image: int) -> int:
        check_image(image, inputs["pixel_values"].shape[0])
        vision = inputs.config.vision_config
        return vision.image_size // vision.patch_size

    def patch_grid(self, inputs: ImageInputs, image: int) -> Grid:
        side = self._side(inputs, image)
        rows = side * side
        return Grid(raster(side, side, image * rows), slice(image * rows, (image + 1) * rows),
                    inputs["pixel_values"].shape[0] * rows)

    def token_grid(self, inputs: ImageInputs, image: int) -> Grid:
        side = folded(self._side(inputs, image))
        tokens = side * side
        return Grid(raster(side, side, image * tokens), slice(image * tokens, (image + 1) * tokens))


FAMILY = Family("got_ocr2", RENAME, ENVOYS, "model.language_model.layers", grid_layout=GotOcr2Grids())
