"""Molmo 2 (model_type molmo2): a SigLIP-like tower over overlapping crops, a pooling adapter, a Qwen3-like text model.

Read off ``transformers.models.molmo2.modeling_molmo2``:

- The processor cuts each image into its low-resolution view (the whole
  image resized to one crop) and overlapping high-resolution crops, each crop
  flattened into ``patch_size``-square patches: ``pixel_values`` is ``[crops,
  patches_per_crop, patch_size**2 * 3]``, every image's crops one after
  another (``image_num_crops`` each, its low-resolution view first). The
  tower (``model.vision_tower``, ``Molmo2VisionModel``) embeds the patches
  with a linear layer (``patch_embed``), adds one learned position embedding
  per patch of a crop, and runs its blocks (SigLIP's: ``layer_norm1``, the
  attention, ``layer_norm2``, the MLP) on every crop as a row, ``[crops,
  patches_per_crop, vision_hidden_size]``, with no CLS, no mask and no final
  norm, so ``tower_output`` is the last block's output. ``image_size`` is a
  crop's side.
- The adapter (``model.multi_modal_projector``, ``model.projector``,
  ``Molmo2Adapter``) receives the outputs of the blocks its
  ``adapter_config.vision_feature_layer`` names (``k`` >= 0: block ``k``;
  ``k`` < 0: block ``num_layers + k``), concatenated on the width in that
  order: ``projector.input`` is ``[crops, patches_per_crop, vision_hidden_size
  * len(vision_feature_layer)]``. For each image token, the processor's
  ``image_token_pooling`` (the adapter's ``pooled_patches_idx``) names the
  patches it pools, a window of ``pool_h x pool_w`` patches as rows of that
  input flattened over its crops, -1 a padding slot (from transformers
  5.25 the processor numbers each image's patches from 0 and the host moves
  them past the earlier images' before the adapter); the adapter
  cross-attends from their mean (over the valid slots) to them
  (``projector.image_pooling_2d``, the tower's attention class, so its
  interior is served as a tower block's is, and described as one, though its
  rows are image tokens and its keys a token's window:
  ``attention_probabilities`` is ``[image_tokens, heads, 1, pool_h *
  pool_w]``, zero at the padding slots),
  then maps the result to the text width with a gated MLP
  (``image_projector``). ``projector.output`` is a model output whose
  ``last_hidden_state`` is ``[image_tokens, hidden_size]``, every image's
  tokens one after another.
- The host (``Molmo2Model.forward``) adds those features to the image
  tokens' own embeddings: ``inputs_embeds.masked_scatter(mask,
  inputs_embeds[mask] + image_features.reshape(-1))``
  (``inputs_embeds_masked_scatter_0``, argument 1). So
  ``vision.image_features``, what is scattered, is the image tokens'
  embeddings plus ``projector.output``'s features (``[image_tokens,
  hidden_size]``), and ``layers[0].input[mask] == image_features``; zeroing it
  zeroes what the text model receives at the image tokens, the embeddings
  included. The image token is ``<im_patch>`` (the config's
  ``image_patch_id``); the ``<im_col>`` tokens that end each row of tokens,
  and the start and end tokens around each view, are text.
- A video's frames go through the same call (the host scatters a prompt's
  images or its video, never both, pooled by ``video_token_pooling``): videos
  are not served yet, so ``vision.video_token_mask`` and ``video_features``
  are `Unavailable`, and ``image_features`` on a prompt with a video too.
- The text blocks (``Molmo2DecoderLayer``) are pre-norm, as Llama's, where the
  text config's ``norm_after`` is off (its default); with it on (OLMo 2's
  layout) each sublayer's output is normed before it joins the stream,
  and the block's ``attention_output`` and ``mlp_output`` are read after those
  norms (``input_layernorm`` and ``post_attention_layernorm``, which norm the
  sublayers' outputs there).
- Grids (`envoys.towers.pooled_crops`): ``vision.patch_grid`` puts an image's
  patches on its high-resolution canvas (the crops' overlap given to one crop,
  as the pooling indices name them), ``token_grid`` its high-resolution
  tokens on their grid; ``view="low"`` gives the low-resolution view's.
"""

from __future__ import annotations

import inspect
from typing import Any

from transformers.models.molmo2.modeling_molmo2 import (
    Molmo2Attention,
    Molmo2DecoderLayer,
    Molmo2MLP,
    Molmo2Model,
    Molmo2VisionAttention,
    Molmo2VisionEncoderLayer,
    Molmo2VisionMLP,
    Molmo2VisionModel,
)

from ..blocks.post_norm import PostNormAttention, PostNormLayer, PostNormMlp
from ..core.layouts import Patches
from ..core.values import Unavailable, value
from ..towers.encoder_names import ENCODER_BLOCK_RENAME, WRAPPER_RENAME
from ..towers.pooled_crops import PooledCropGrids
from ..vision.tower import Vision, VisionAttention, VisionLayer, VisionMlp, no_patch_embed
from . import Batching, Family, Media

RENAME = {**WRAPPER_RENAME, "patch_embedding": "patch_embed", **ENCODER_BLOCK_RENAME}


def feature_blocks(config: Any) -> list[int]:
    """The tower blocks whose outputs ``projector.input`` concatenates, in its order, each counted from 0."""
    layers = config.vision_config.num_hidden_layers
    return [layer if layer >= 0 else layers + layer for layer in config.adapter_config.vision_feature_layer]


class Molmo2Vision(Vision):
    """Molmo 2's tower: each crop a row, ``[crops, patches_per_crop, vision_hidden_size]``, crops image after image.

    ``patch_embeddings`` is the linear patch embedding's output, before the
    position embeddings; ``tower_output`` is the last block's output (no final
    norm). ``image_size`` is a crop's side, in pixels.
    """

    patch_embeddings = value(
        "patch_embeddings", Patches, description="the linear patch embedding's output",
        key=lambda v: f"{v.patch_embed.path}.output", select=None, unavailable=no_patch_embed,
        doc="The linear patch embedding's output, ``[crops, patches_per_crop, vision_hidden_size]``, each crop's "
        "patches in raster order, before the position embeddings.",
    )

    @property
    def image_size(self) -> int:
        """Side of a crop, in pixels: the tower's position embeddings are one per patch of a square crop."""
        height, width = self.vision_config.image_size
        if height != width:
            raise Unavailable(f"the tower's crops are {height} x {width} pixels, not square, so it has no one "
                              "image_size; read vision.vision_config.image_size, [height, width]")
        return height


ENVOYS = {
    Molmo2VisionModel: Molmo2Vision,
    Molmo2VisionEncoderLayer: VisionLayer,
    Molmo2VisionAttention: VisionAttention,
    Molmo2VisionMLP: VisionMlp,
    Molmo2DecoderLayer: PostNormLayer,
    Molmo2Attention: PostNormAttention,
    Molmo2MLP: PostNormMlp,
}

#: The host scatters a prompt's images or its video through one call.
VIDEOS = ("the host writes a prompt's video frames in through the images' call (inputs_embeds_masked_scatter_0), "
          "pooled by video_token_pooling; Molmo 2's videos are not served yet")

#: Whether the host moves each image's ``image_token_pooling`` past the patches of the images before it (its
#: ``get_image_features`` takes ``image_num_crops``: transformers 5.25 on, whose processor numbers each image's patches
#: from 0); before, the processor numbers every image's patches of a batch in one count.
HOST_NUMBERS_PER_IMAGE = "image_num_crops" in inspect.signature(Molmo2Model.get_image_features).parameters

#: Several invokes' pooling indices: numbered per image (the host moves them), or in one count, which joining the
#: invokes continues past the earlier invokes' patches.
BATCHING = Batching() if HOST_NUMBERS_PER_IMAGE else Batching(indexes={"image_token_pooling": "pixel_values"})

FAMILY = Family("molmo2", RENAME, ENVOYS, "model.language_model.layers",
                grid_layout=PooledCropGrids(numbered_per_image=HOST_NUMBERS_PER_IMAGE),
                media=Media(not_served={"video": VIDEOS}), batching=BATCHING)
