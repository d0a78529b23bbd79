"""Idefics 2 (model_type idefics2): a SigLIP-like tower at any resolution, a perceiver connector, a Mistral text model.

What differs from Idefics 3 (`envoys.towers.idefics`), read off
``transformers.models.idefics2.modeling_idefics2``:

- The processor does not tile (``do_image_splitting`` is off by default; on,
  it cuts an image into 4 quarters plus the whole). It resizes each image
  keeping its aspect ratio within the image processor's ``shortest_edge`` /
  ``longest_edge`` and pads every image of the batch with zeros, bottom and
  right, to the batch's largest height and width; ``pixel_attention_mask``
  marks the real pixels. The host drops all-zero images (padding of a batch
  whose prompts hold different image counts) and runs the tower
  (``model.vision_model``, ``Idefics2VisionTransformer``; blocks
  ``encoder.layers``; no CLS) once over the rest: each image is a row of the
  tower's values, ``[images, patches, vision_hidden_size]``, ``patches`` the
  padded grid's in raster order. A patch is real where all its pixels are;
  the blocks' attention masks the padded keys (padded queries still attend
  to the real keys, so their rows are not zero). The position embeddings
  spread each image's real grid over the ``image_size // patch_size``-square
  table (NaViT's fractional buckets), so ``image_size`` is Unavailable.
- The connector (``model.connector``, ``model.projector``) receives
  ``tower_output`` (after ``post_layernorm``) with the patch mask, maps it to
  the text width (``modality_projection``) and resamples it with a perceiver
  (``perceiver_resampler``): ``resampler_n_latents`` learned latents
  cross-attend to the image's real patches and to themselves, block after
  block, then a final RMSNorm. So ``projector.output`` is the latents,
  ``[images, resampler_n_latents, hidden_size]``: a fixed count per image
  whatever its size, as the processor writes ``image_seq_len`` image tokens
  between ``<fake_token_around_image>`` tokens for each image.
- The host scatters through Idefics 3's helper: ``Idefics2Model.forward``
  calls ``self.inputs_merger(input_ids=..., inputs_embeds=...,
  image_hidden_states=...)`` (``self_inputs_merger_0``), whose keyword
  ``image_hidden_states`` (the latents, every image's concatenated,
  ``[image_tokens, hidden_size]``) is ``vision.image_features`` (the scatter
  `INPUTS_MERGER`).
- Grids (`envoys.towers.padded`): ``vision.patch_grid`` puts an image's real
  patches on its grid (Unavailable while the image processor splits
  images into crops); ``token_grid`` is Unavailable, the latents being on
  no grid.
"""

from __future__ import annotations

from transformers.models.idefics2.modeling_idefics2 import (
    Idefics2EncoderLayer,
    Idefics2VisionAttention,
    Idefics2VisionMLP,
    Idefics2VisionTransformer,
)

from rewrites.image_scatter import INPUTS_MERGER

from ..towers.idefics import TEXT_LAYERS, TILED_RENAME
from ..towers.padded import PaddedImageGrids
from ..vision.tower import Vision, VisionAttention, VisionLayer, VisionMlp, variable_resolution
from . import Family


class Idefics2Vision(Vision):
    """Idefics 2's tower: each image a row, ``[images, patches, vision_hidden_size]``, padded to the batch's largest grid.

    An image's row holds the padded grid's patches in raster order (no CLS);
    its real patches are the top-left ``height // patch_size`` x
    ``width // patch_size`` of that grid, its size after the processor's
    resize. ``tower_output`` is after ``post_layernorm`` and is what the
    connector receives. ``image_size`` is Unavailable (`variable_resolution`).
    """

    image_sizes_are = (
        "the processor keeps each image's aspect ratio within its shortest_edge / longest_edge and pads the batch "
        "to its largest height and width; pixel_attention_mask marks each image's real pixels, and a patch is real "
        "where all its pixels are"
    )
    image_size = property(variable_resolution, doc="Unavailable: each image keeps its own size (variable_resolution).")


RENAME = dict(TILED_RENAME)

ENVOYS = {
    Idefics2VisionTransformer: Idefics2Vision,
    Idefics2EncoderLayer: VisionLayer,
    Idefics2VisionAttention: VisionAttention,
    Idefics2VisionMLP: VisionMlp,
}

#: The patch grid of each image's real patches; its image tokens, the perceiver's latents, have none.
GRIDS = PaddedImageGrids("pixel_attention_mask", whole=True, tokens="the perceiver's latents", splits="do_image_splitting")

FAMILY = Family("idefics2", RENAME, ENVOYS, TEXT_LAYERS, scatter=INPUTS_MERGER, grid_layout=GRIDS)
