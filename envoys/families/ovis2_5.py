"""Ovis2.5 (model_type ovis2_5): a packed SigLIP2-NaViT tower attending in windows, a visual tokenizer over a visual
vocabulary and its embedding table, on a Qwen3 text model.

The tower (``model.vision_tower``, `Ovis2_5Vision`) runs every image's
patches packed, ``[1, patches, vision_hidden_size]``, image after image, each
image's in the processor's merge-block order (``spatial_merge_size`` x
``spatial_merge_size`` blocks, each block's patches consecutive; ``image_grid_thw``
splits them): the patch convolution (``embeddings.patch_embedding``,
``vision.patch_embed``, whose output is ``patch_embeddings``) plus learned
positions resampled to each image's grid; then it permutes the stream into
attention windows of ``window_size`` pixels a side, merge unit by merge unit
(``vision.window_index``, item 0 of ``get_vision_window_index(...)``, computed
after the patch embedding), so every block's values are in window order. The
blocks (``layers``: ``layer_norm1``, ``self_attn`` with ``q_proj``, ``k_proj``,
``v_proj``, ``out_proj`` and a 2D rotary embedding, ``layer_norm2``, ``mlp``
with ``fc1`` and ``fc2``) split their attention at ``cu_seqlens`` as the Qwen
ViT's do (``ovis2_5.vision-attention``): once per window on the
``window_attention`` blocks of ``vision_config.layer_types``, once per image on
the ``full_attention`` ones, so under eager ``attention_scores`` and
``attention_probabilities`` hold each call's pattern on the diagonal of one
tensor, ``kernel_calls[k]`` is call ``k`` alone (`envoys.towers.per_image`),
and the queries, keys and values are served whole, in window order. The tower then puts its
stream back in merge-block order (``argsort(window_index)``) and norms it
(``post_layernorm``, ``vision.norm``): ``tower_output``, its
``last_hidden_state``.

The projector does not read ``tower_output``. ``Ovis2_5Model.get_image_features``
hands ``multi_modal_projector`` (``model.projector``) the tower's
``hidden_states[-1]``, which the tower records with
``tie_last_hidden_states=False``: the last block's output as it leaves the
block, in window order and not normed. So ``projector.input`` is
``vision.layers[-1].layer_output`` (``[patches, vision_hidden_size]``, without
the leading 1), ``tower_output`` feeds nothing the logits depend on (its
gradient is Unavailable, saying so), and the image tokens receive each image's
merge units in window order, not in the processor's order: the image token
``k`` of an image holds the merge unit at window position ``k``
(``vision.token_grid`` places them; on an image of one window both orders are
the same). The tower permutes into windows whatever ``layer_types`` says, so
this holds on a tower whose blocks all attend per image too (the config's
default). That is transformers 5.25's forward as written, and it reads like a
slip of the port (the tower restores the order for ``last_hidden_state``, which
nothing reads): a release that fixes it changes the rewritten forwards'
snapshots, and the grids must follow.

The projector (`Ovis2_5Projector`) folds each merge unit's
``spatial_merge_size**2`` consecutive rows into one row, maps it to logits over
the visual vocabulary (``visual_tokenizer.linear``, then the LayerNorm
``visual_tokenizer.norm``) and takes their softmax:
``projector.visual_tokens``, ``[image_tokens, vocab_size -
num_visual_indicator_tokens]``; the visual tokenizer pads each row with zeros
for the indicator words, and the embedding table
(``visual_embeddings_table``, a linear map) multiplies it by its weight:
``projector.output``, ``[image_tokens, hidden_size]``, each token's expected
embedding under its probabilities, in window order.

``Ovis2_5Model.forward`` scatters through a helper, ``self._merge_visual_features``,
called once for the images and once for the videos; inside it
``inputs_embeds.masked_scatter`` writes the features at the image tokens (the
scatter `Scatter.helper` names: ``self__merge_visual_features_0.source.inputs_embeds_masked_scatter_0``,
argument 1, as nnsight's ``.source`` drill names it; ``_1`` for the videos), so
``image_features`` is ``projector.output``. After the scatter the helper writes
the indicator words' embeddings (the table's rows past the visual words, looked
up) at each image's start and end tokens (``torch.where``), which are not image
tokens: ``layers[0].input[image_token_mask] == image_features`` holds, and the
start and end tokens hold the table's rows ``vocab_size - 4`` and ``- 3`` (a
video's, ``- 2`` and ``- 1``).

Videos: each frame is one temporal unit (``temporal_patch_size`` 1), run
through the tower and projector as an image is (``get_video_features`` calls
``get_image_features``), scattered at the video tokens after the images; each
frame's tokens are in window order too (`Ovis2_5Grids.video_token_grid`).
"""

from __future__ import annotations

import torch
from transformers.models.ovis2_5.modeling_ovis2_5 import (
    Ovis2_5MultiModalProjector,
    Ovis2_5VisionAttention,
    Ovis2_5VisionEncoderLayer,
    Ovis2_5VisionMLP,
    Ovis2_5VisionModel,
)

from rewrites.image_scatter import Scatter

from ..core.layouts import PackedPatches
from ..core.values import value
from ..image.frames import check_video
from ..image.grids import Grid, ImageInputs, value_named
from ..towers.encoder_names import ENCODER_BLOCK_RENAME, WRAPPER_RENAME
from ..towers.packed_siglip import one_row
from ..towers.qwen import TOKEN_VALUES, QwenGrids, QwenVision, QwenVisionAttention, window_positions
from ..vision.tower import (
    PackedVisionLayer,
    PackedVisionMlp,
    as_patches,
    from_patches,
    no_images,
    no_patch_embed,
    norm_output,
)
from ..vision.visual_tokens import PackedVisualTokens, VisualTokenizerProjector, visual_tokens_value
from . import IMAGE_AND_VIDEO, Family

RENAME = {
    **WRAPPER_RENAME,
    "embeddings.patch_embedding": "patch_embed",
    "post_layernorm": "norm",
    **ENCODER_BLOCK_RENAME,
}

#: The host's helper that scatters, once for the images and once for the videos.
SCATTER = Scatter(helper="self._merge_visual_features")


class OvisWindowAttention(QwenVisionAttention):
    """The Ovis2.5 tower's attention: the Qwen ViT's layout (`QwenVisionAttention`), one kernel call per window or
    image; ``attention_scores`` and ``attention_probabilities`` each call's pattern on the diagonal of one tensor under
    eager, in window order (`envoys.towers.per_image.BlockDiagonal`), ``kernel_calls[k]`` call ``k`` alone."""


#: Why the tower's own output has no gradient.
UNREAD = (
    "the projector reads the tower's hidden_states[-1], the last block's output in window order "
    "(vision.layers[-1].layer_output), not the tower's last_hidden_state (post_layernorm's output), so the logits "
    "do not depend on it; read vision.layers[-1].layer_output for the gradient of what the projector reads"
)


class Ovis2_5Vision(QwenVision):
    """The Ovis2.5 tower: packed, merge-block order, windows of merge units in its blocks, ``post_layernorm`` after.

    ``patch_embeddings`` is the patch convolution's output as one packed row,
    merge-block order; the blocks' values are in window order
    (``window_index``, one entry a merge unit); ``tower_output`` is
    ``post_layernorm``'s output, back in merge-block order, which nothing the
    logits depend on reads (the projector reads the last block's output).
    Sizes, off the vision config: ``num_heads`` (``num_attention_heads``),
    ``window_size`` (pixels), ``spatial_merge_size``; ``image_size`` is
    Unavailable (any resolution; the config's ``image_size`` is the learned
    position grid's, resampled to each image).
    """

    stream_order = "window order"

    patch_embeddings = value(
        "patch_embeddings", PackedPatches, description="every image's patch embeddings, before the learned positions",
        key=lambda v: f"{v.patch_embed.path}.output", select=None, unavailable=no_patch_embed, view=one_row, inverse=from_patches,
        doc="Every image's patch embeddings, ``[1, patches, vision_hidden_size]``, image after image, each in "
        "merge-block order (the processor's): the patch convolution's output (``[patches, vision_hidden_size, 1, "
        "1]``) as one row, before the learned positions and the window permutation. Assign a tensor of the same "
        "shape to replace it, or edit it in place.",
    )

    tower_output = value(
        "tower_output", PackedPatches, description="the last block's stream back in merge-block order, after post_layernorm",
        key=norm_output, select=None, unavailable=no_images, view=as_patches, inverse=from_patches,
        doc="The last block's stream put back from window order into merge-block order and normed "
        "(``post_layernorm``, ``vision.norm``), ``[1, patches, vision_hidden_size]``: the tower's "
        "last_hidden_state. The projector does not read it (it reads ``layers[-1].layer_output``), so nothing "
        "downstream changes with it and it has no gradient. Read it after the blocks' values and before the "
        "projector's.",
    )

    def gradient_reason(self, name: str) -> str | None:
        """``tower_output`` feeds nothing the logits depend on; every other tower value does."""
        return UNREAD if name == "tower_output" else None

    @property
    def num_heads(self) -> int:
        return self.vision_config.num_attention_heads


class Ovis2_5Projector(VisualTokenizerProjector):
    """Ovis2.5's projector (``multi_modal_projector``): the visual tokenizer, then the visual embedding table.

    ``visual_tokens`` (`envoys.vision.visual_tokens`) is the visual tokenizer's
    output without its indicator columns, ``[image_tokens, visual_vocab]``,
    every image's tokens in one run, each image's in window order. ``input``
    and ``output`` are nnsight's own: the last block's output, ``[patches,
    vision_hidden_size]``, and the embeddings, ``[image_tokens, hidden_size]``.
    """

    visual_tokens = visual_tokens_value(PackedVisualTokens, "visual_tokenizer.output")


class Ovis2_5Grids(QwenGrids):
    """Where each image's rows are on Ovis2.5: `QwenGrids` with window order on the image tokens too.

    The blocks' values (``of="stream"``) are in window order, merge unit by
    merge unit, as on Qwen2.5-VL; ``patch_embeddings`` and ``tower_output``
    (``of="patch_embeddings"``) in merge-block order. The projector reads the
    last block's output as it is, so its output and the image tokens
    (``image_features``, the text's values: every ``of``) hold each image's
    merge units in window order too (`window_positions`); on a video, each
    frame's.
    """

    def token_grid(self, inputs: ImageInputs, image: int, of: str = "image_features") -> Grid:
        """Image ``image``'s merged grid over the image tokens, window order, whichever ``of``."""
        value_named(of, TOKEN_VALUES, "Ovis2.5 per-token")
        return super().token_grid(inputs, image, of="projector_output")

    def video_token_grid(self, inputs: ImageInputs, video: int, mask: torch.Tensor) -> Grid:
        """Video ``video``'s grids over the video tokens, ``[frames, h / merge, w / merge]``: one frame a temporal
        unit, each frame's merge units in window order, frame after frame, video after video."""
        sizes = inputs["video_grid_thw"].cpu().long()
        check_video(video, sizes.shape[0])
        vision = inputs.config.vision_config
        merge = vision.spatial_merge_size
        counts = sizes.prod(dim=1) // (merge * merge)
        frames, height, width = (int(size) for size in sizes[video])
        rows, columns = height // merge, width // merge
        side = vision.window_size // merge // vision.patch_size
        start = int(counts[:video].sum())
        frame = torch.arange(frames, dtype=torch.long).reshape(frames, 1, 1) * (rows * columns)
        cells = start + frame + window_positions(rows, columns, side).unsqueeze(0)
        return Grid(cells, slice(start, start + int(counts[video])))


ENVOYS = {
    Ovis2_5VisionModel: Ovis2_5Vision,
    Ovis2_5VisionEncoderLayer: PackedVisionLayer,
    Ovis2_5VisionAttention: OvisWindowAttention,
    Ovis2_5VisionMLP: PackedVisionMlp,
    Ovis2_5MultiModalProjector: Ovis2_5Projector,
}

FAMILY = Family(
    "ovis2_5", RENAME, ENVOYS, "model.language_model.layers", scatter=SCATTER, grid_layout=Ovis2_5Grids(),
    media=IMAGE_AND_VIDEO,
)
