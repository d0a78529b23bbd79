"""Video-LLaVA (model_type video_llava): two CLIP towers, one for images and one for videos, LLaVA's projector, a Llama text model.

Llava 1.5's shape (`envoys.families.llava`) with one more tower:
``VideoLlavaModel`` holds ``image_tower`` and ``video_tower``, two
``CLIPVisionModel`` of one config and their own weights, and one
``multi_modal_projector`` that both feed. ``model.vision`` is the image tower
(``model.image_tower``): CLS first, no norm over the patches, one row per
image, ``[images, 1 + patches, vision_hidden_size]``. The image processor
returns the images as ``pixel_values_images`` (its legacy output, still the
default in 5.24; ``pixel_values`` with ``return_legacy_image_output=False``),
which the root's forward takes under either name. ``get_image_features``
reads the image tower's ``hidden_states[vision_feature_layer]`` (-2, strategy
"default": block -2's output without its CLS; the last block runs, unused),
so ``projector.input`` is ``vision.layers[-2].layer_output[:, 1:]``, and
``VideoLlavaModel.forward`` scatters the projector's output as it is
(``inputs_embeds_masked_scatter_0``, argument 1: ``vision.image_features`` is
``projector.output`` flattened), one image token a patch, as LLaVA's grids
place them.

Videos: the video tower is ``model.video`` (``model.model.video_tower``, the
same classes and envoys as the image tower, so the same values), run on every
frame of ``pixel_values_videos``, ``[videos * frames, 1 + patches,
vision_hidden_size]``; ``get_video_features`` projects its block -2 with the
CLS kept (one video token per patch and CLS, 17 a frame here) through the same
projector, and the forward scatters them second (``inputs_embeds_masked_scatter_1``:
``vision.video_features``). The image tower runs on images only and the video
tower on videos only (`Media.video_tower`): a tower's values on a prompt
without its medium say so.
"""

from __future__ import annotations

import torch

from ..image.frames import uniform_frames
from ..image.grids import Grid, ImageInputs
from ..towers.feature_layers import with_feature_layer_gradients
from . import Family, Media
from .llava import CLIP_ENVOYS, LlavaGrids
from .llava import RENAME as LLAVA_RENAME

#: The video tower's path from the root (the image tower's is ``model.image_tower``).
VIDEO_TOWER_PATH = "model.video_tower"

RENAME = {**{key: name for key, name in LLAVA_RENAME.items() if name != "vision"}, "model.image_tower": "vision",
          VIDEO_TOWER_PATH: "video"}

#: The projector reads hidden_states[vision_feature_layer]: the tower values past it have no gradient.
ENVOYS = with_feature_layer_gradients(CLIP_ENVOYS)


class VideoLlavaGrids(LlavaGrids):
    """LLaVA's grids (`LlavaGrids`), the images counted on whichever name the processor gave their pixels."""

    @staticmethod
    def video_token_grid(inputs: ImageInputs, video: int, mask: torch.Tensor) -> Grid:
        """Video ``video``'s grids over the video tokens, ``[frames, side, side]``: each frame's CLS then its
        patches in raster order (the projector reads block -2 with the CLS kept), frame after frame."""
        return uniform_frames(inputs, video, mask, before=1)

    @staticmethod
    def _images(inputs: ImageInputs) -> int:
        pixels = inputs.get("pixel_values_images")
        return (pixels if pixels is not None else inputs["pixel_values"]).shape[0]


FAMILY = Family("video_llava", RENAME, ENVOYS, "model.language_model.layers", grid_layout=VideoLlavaGrids(),
                media=Media(("image", "video"), video_tower=VIDEO_TOWER_PATH))
