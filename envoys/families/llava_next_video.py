"""LLaVA-NeXT-Video (model_type llava_next_video): LLaVA-NeXT's CLIP tower on tiles, its projector, a Llama text model.

On images, LLaVA-NeXT (`envoys.families.llava_next`), copied into its own
classes: ``LlavaNextVideoModel.get_image_features`` runs the tower
(``model.vision_tower``) on every real tile of the call, each image's base
tile then its grid tiles, CLS first (``[tiles, 1 + patches,
vision_hidden_size]``), the projector reads block -2 without the CLS token
(``vision_feature_layer`` -2, strategy "default"), and ``pack_image_features``
lays each image's grid tiles out as one feature grid, crops the processor's
padding (``unpad_image``, from ``image_sizes``), appends the learned
``image_newline`` after each of its rows and puts the base tile's features
first. ``LlavaNextVideoModel.forward`` scatters those
(``inputs_embeds_masked_scatter_0``, argument 1), so ``vision.image_features``
is read at the scatter, neither ``projector.output`` nor a reshape of it.
LLaVA-NeXT's envoys and grids serve it unchanged: they read the config
(``image_grid_pinpoints``, the vision config's sizes) and the processor's
``image_sizes``, which this family's image processor (LlavaNextImageProcessor)
gives as LLaVA-NeXT's does.

Videos: ``get_video_features`` runs the same tower on every frame (its second
run, after the image's scatter: ``model.video``, frames as its batch),
average-pools block -2's patches 2 x 2 (``model.vision_resampler``, a
``LlavaNextVideoPooler``, which images never reach), projects them with the
same projector, and the forward scatters them second
(``inputs_embeds_masked_scatter_1``, the frames' features handed over flat:
``vision.video_features`` is ``[video_tokens, hidden_size]``), frame after
frame, each frame's pooled tokens in raster order (``vision.video_token_grid``).
"""

from __future__ import annotations

from rewrites.image_scatter import Scatter

from ..towers.anyres import LlavaNextGrids
from . import IMAGE_AND_VIDEO, Family
from .llava_next import ENVOYS, RENAME

SCATTER = Scatter(purpose="image features (_0), the tiles unpadded with image_newline rows added, and video "
                          "features (_1), the frames pooled 2x2, scattered into the embeddings")

FAMILY = Family("llava_next_video", RENAME, ENVOYS, "model.language_model.layers", scatter=SCATTER,
                grid_layout=LlavaNextGrids(), media=IMAGE_AND_VIDEO)
