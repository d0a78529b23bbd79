"""Mistral 3 (model_type mistral3): the Pixtral tower, a patch-merging projector, a Mistral text model.

``Mistral3Model.forward`` scatters the projected features into the token
embeddings (``inputs_embeds_masked_scatter_0``, argument 1). The tower
(``model.vision_tower``, a `PixtralVision`) is packed: every image's patches
in one row, ``[1, all patches, vision_hidden_size]``, its blocks
``transformer.layers`` (``attention``, ``feed_forward``, ``attention_norm``,
``ffn_norm``), one attention call under a block-diagonal mask. The projector
(``multi_modal_projector``) reads the tower's hidden state at
``vision_feature_layer`` (the last block by default; the tower has no final
norm) without the leading 1, ``[all patches, vision_hidden_size]``, with the
processor's ``image_sizes``; it normalises it, merges each
``spatial_merge_size`` x ``spatial_merge_size`` square of patches into one
(``patch_merger``) and maps it to the text width, so an image of ``h x w``
pixels gives ``(h // (patch_size * spatial_merge_size)) * (w // (patch_size *
spatial_merge_size))`` image tokens, in raster order over the merged grid.
"""

from __future__ import annotations

from ..towers.encoder_names import WRAPPER_RENAME
from ..towers.pixtral import MERGED_PIXTRAL_GRIDS, PIXTRAL_ENVOYS, PIXTRAL_RENAME
from . import Family

RENAME = {**WRAPPER_RENAME, **PIXTRAL_RENAME}

ENVOYS = dict(PIXTRAL_ENVOYS)


FAMILY = Family("mistral3", RENAME, ENVOYS, "model.language_model.layers", grid_layout=MERGED_PIXTRAL_GRIDS)
