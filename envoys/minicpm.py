"""MiniCPM-V 4.6, MiniCPM-V 4.7 and MiniCPM-OCR: a packed SigLIP-NaViT tower that merges its stream inside, per-image
attention, a merger outside the tower, on a Qwen3.5 text model.

The three share one layout (transformers builds 4.7's and MiniCPM-OCR's
classes as copies of 4.6's). The processor turns each image into units: the
image resized to about ``scale_resolution`` squared pixels and, for an image
larger than that (``slice_mode``), a grid of slices of the image, each unit
one row of ``target_sizes`` (its ``[h, w]`` in patches). The prompt holds each
unit's image tokens in that order (the source image between ``<image>`` and
``</image>``, each slice between ``<slice>`` and ``</slice>``).

The tower (``model.vision_tower``, standard ``model.vision``) embeds every
unit's patches with one convolution over the processor's NaViT-packed pixels
(``embeddings.patch_embedding``, ``patch_embed``), each unit's in raster
order, units one after another, and adds learned positions bucketed from each
unit's grid; its stream is packed, ``[1, patches, vision_hidden_size]``. Its
blocks (``encoder.layers``, SigLIP's names) split queries, keys and values at
``cu_seqlens`` and call the kernel once per unit under every implementation
but flash, as the Qwen ViT does, so the interior is served whole
(`MiniCPMVisionAttention`) and no one tensor is a block's pattern
(`PER_IMAGE`).

Where a model downsamples 16x (MiniCPM-V 4.6's and 4.7's default
``downsample_mode``), the tower's forward runs its window-attention merger
(``vit_merger``, native name) after block ``insert_layer_id``: it attends
within each 2x2 window of a unit's grid and folds the window into one row, so
the blocks after it run on a quarter of the rows, each unit's on its
half-side grid in raster order, and ``layers[k + 1].layer_input`` is
``vit_merger``'s output, not ``layers[k].layer_output``
(``vision.merged_after`` says which k). Downsampling 4x (MiniCPM-OCR's
default) skips it: every block runs on every patch. Then the final LayerNorm
(``post_layernorm``, ``vision.norm``): ``tower_output`` is its output, the
tower's ``last_hidden_state``, read before the projector. On a model that
downsamples 4x the ``vit_merger``'s envoys are not served
(`vit_merger_skipped`: its values are Unavailable, saying why).

The projector is the merger (``model.merger``, outside the tower): for each
unit it folds 2x2 blocks of ``tower_output``'s grid into one row and maps it
to the text width, returning a list of one ``[tokens, hidden_size]`` tensor
per unit, which the host (``*Model.forward``) concatenates and scatters
(``inputs_embeds_masked_scatter_0``, argument 1; ``_1`` is video). So
``projector.input`` is ``tower_output`` and ``projector.output`` is that
list; ``torch.cat(projector.output)`` is ``image_features``.
"""

from __future__ import annotations

from typing import Any

from rewrites.qwen_vit_attention import PER_IMAGE_SITE

from .families.encoder_names import ENCODER_RENAME
from .per_image import per_image_pattern
from .qwen import QwenVisionAttention
from .vision import Vision, variable_resolution

#: Why MiniCPM-V's attention has no scores or probabilities, under any implementation.
PER_IMAGE = (
    "MiniCPM-V's ViT attention makes one interface call per image unit (attention_interface_2: per source image or "
    "slice, per 2x2 window in the vit_merger), so no one tensor is the block's pattern; read attention_queries and "
    "attention_keys, whole, and split them where the calls do: at the attention's cu_seqlens argument "
    "(self_attn.inputs[1]['cu_seqlens']), which per unit is the processor's target_sizes"
)


class MiniCPMVisionAttention(QwenVisionAttention):
    """MiniCPM-V's tower attention: the Qwen ViT's layout (`QwenVisionAttention`), one kernel call per unit.

    ``attention_queries``, ``attention_keys`` and ``attention_values`` are the
    whole ``[1, heads, patches, head_dim]`` tensors (no rotary embedding)
    before the split at ``cu_seqlens``; ``attention_head_outputs`` the
    per-unit outputs joined back, ``[1, patches, heads, head_dim]``;
    ``attention_scores`` and ``attention_probabilities`` are Unavailable
    (`PER_IMAGE`). The ``vit_merger``'s own attention is of this class too and
    splits per 2x2 window.
    """

    attention_scores, attention_probabilities = per_image_pattern(PER_IMAGE, PER_IMAGE_SITE, "PER_IMAGE")


class MiniCPMVision(Vision):
    """MiniCPM-V's tower: packed, ``[1, patches, vision_hidden_size]``, its stream merged 2x2 after one block under 16x.

    Every unit's patches (source images and slices, the processor's
    ``target_sizes`` order), each unit's in raster order. ``patch_embeddings``
    is the convolution's output as one packed row, before the learned
    positions; ``tower_output`` is after ``post_layernorm``, what the merger
    (``model.projector``) receives. Under 16x the ``vit_merger`` folds each
    2x2 window after block ``merged_after``: the later blocks and
    ``tower_output`` hold a quarter of the rows, each unit's half-side grid in
    raster order. ``image_size`` is Unavailable: the config's is the side of
    the learned position table, and each unit keeps its own size.
    """

    image_sizes_are = (
        "each unit's size (the source image and each slice) is the processor's target_sizes, [h, w] in patches of "
        "patch_size pixels; the config's image_size is the side of the learned position table"
    )

    image_size = property(variable_resolution, doc="Unavailable: each unit keeps its own size (variable_resolution).")

    @property
    def merged_after(self) -> int | None:
        """The block after which ``vit_merger`` folds the stream 2x2 (``insert_layer_id``), where the model downsamples
        16x; None where it downsamples 4x (the ``vit_merger`` does not run)."""
        config: Any = self.root.config
        if config.downsample_mode == "4x" or config.insert_layer_id < 0:
            return None
        return config.insert_layer_id


def vit_merger_skipped(envoy: Any) -> str | None:
    """Why ``envoy`` is not served: it is in the tower's ``vit_merger`` (its attention, keyed by class, is the blocks'
    kind) on a model that downsamples 4x, whose tower's forward skips the ``vit_merger``; None elsewhere (`Family`'s
    ``unserved``)."""
    if "vit_merger" not in envoy.path.split(".") or envoy.root.config.downsample_mode != "4x":
        return None
    return ("this is the tower's vit_merger, which the tower's forward skips on a model that downsamples 4x "
            "(config.downsample_mode '4x'): every block runs on every patch, and the merger folds 2x2 patches")


#: The native names of MiniCPM-V's tower, merger and Qwen3.5 text model under the standard ones.
MINICPM_RENAME = {
    "model.language_model.embed_tokens": "embed_tokens",
    "model.language_model.layers": "layers",
    "model.language_model.norm": "norm",
    "model.vision_tower": "vision",
    "model.merger": "projector",
    **ENCODER_RENAME,
    "post_layernorm": "norm",
}

#: Where the text blocks are.
TEXT_LAYERS = "model.language_model.layers"

__all__ = ["MINICPM_RENAME", "PER_IMAGE", "TEXT_LAYERS", "MiniCPMVision", "MiniCPMVisionAttention", "vit_merger_skipped"]
