"""LLaVA-OneVision-1.5 (model_type llava_onevision1_5): a packed RICE ViT, a CLS row before each frame, on Qwen3.

``LlavaOnevision15Model.forward`` is EXAONE 4.5's: it scatters the merged
image features into the token embeddings (``inputs_embeds_masked_scatter_0``,
argument 1) and the video's (``_1``). The tower (``model.visual``,
`RiceVision`) is laid out as the Qwen ViT (`envoys.towers.qwen`): packed,
every image's (every frame's) patches in merge-block order, its blocks
``blocks`` (``attn`` with one fused ``qkv``, ``mlp`` with ``fc1`` and
``fc2``, ``norm1``, ``norm2``), attending per image (or frame) with one kernel
call each (``attention_scores`` and ``attention_probabilities`` Unavailable),
its merger (``merger``, the projector) inside it. Unlike the Qwen ViT it puts
a learned CLS row before each frame's patches (``cls_embeddings``, with its
own rotary angle) and norms the stream (``pre_layernorm``) before the first
block, so the blocks' values are ``[1, patches + frames, vision_hidden_size]``
(each frame's CLS row first; ``vision.patch_grid`` skips it), and the tower
drops the CLS rows after its last block: ``tower_output``, what the merger
reads, is ``[1, patches, vision_hidden_size]``, as ``patch_embeddings`` (grid
them with ``of="patch_embeddings"``). A video's frames are one temporal patch
each (the processors' ``temporal_patch_size`` is 1), each with its CLS row.
"""

from __future__ import annotations

from transformers.models.llava_onevision1_5.modeling_llava_onevision1_5 import (
    LlavaOnevision15VisionAttention,
    LlavaOnevision15VisionBlock,
    LlavaOnevision15VisionMLP,
    LlavaOnevision15VisionModel,
)

from ..core.layouts import PackedPatches
from ..core.values import value
from ..towers.qwen import QWEN_VIT_RENAME, QwenGrids, QwenVision, QwenVisionAttention, tower_output_at
from ..vision.tower import PackedVisionLayer, PackedVisionMlp, as_patches, from_patches, no_images
from . import IMAGE_AND_VIDEO, Family


class RiceVision(QwenVision):
    """LLaVA-OneVision-1.5's RICE ViT: the Qwen ViT's layout, with a CLS row before each frame's patches in the
    blocks' stream, which the tower drops before its merger."""

    stream_order = "merge-block order, each frame's CLS row first"

    tower_output = value(
        "tower_output", PackedPatches, description="the last block's stream without its CLS rows, the merger's input",
        key=lambda v: tower_output_at(v)[0], select=lambda v: tower_output_at(v)[1], unavailable=no_images, view=as_patches,
        inverse=from_patches,
        doc="The last block's stream with each frame's CLS row dropped, ``[1, patches, vision_hidden_size]``: the "
        "tower has no final norm, so this is what the merger (``model.projector``) reads. Served at the tower's "
        "output (its ``last_hidden_state``), after the merger has run: read projector values first.",
    )


RENAME = {**QWEN_VIT_RENAME, "mlp.fc1": "mlp.up_proj", "mlp.fc2": "mlp.down_proj"}

ENVOYS = {
    LlavaOnevision15VisionModel: RiceVision,
    LlavaOnevision15VisionBlock: PackedVisionLayer,
    LlavaOnevision15VisionAttention: QwenVisionAttention,
    LlavaOnevision15VisionMLP: PackedVisionMlp,
}

FAMILY = Family(
    "llava_onevision1_5", RENAME, ENVOYS, "model.language_model.layers",
    grid_layout=QwenGrids(frame_prefix=1), media=IMAGE_AND_VIDEO,
)
