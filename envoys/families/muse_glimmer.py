"""Muse Glimmer (model_type muse_glimmer): the Muse tower (windows, then whole images), an adapter, on a Gemma 2-style
sandwich-normed text model.

``MuseGlimmerModel.forward`` scatters the image features
(``inputs_embeds_masked_scatter_0``, argument 1, found; ``_1`` is video).
The tower (``model.vision_tower``, ``vision``; a `MuseVision`, `envoys.towers.muse`)
is packed, each image's patches in raster order; its blocks (``layers``)
split their attention at ``cu_seqlens`` as the Qwen ViT's do
(``muse_glimmer.vision-attention``): per window on the
``window_attention`` blocks, per image on the ``full_attention`` ones: the
queries, keys and values are served whole, in window order
(``vision.window_index``, patch by patch: ``muse_glimmer.vision-windows``),
and under eager the pattern is each call's on the diagonal of one tensor
(`envoys.towers.per_image`). The tower ends with ``ln_post``
(``vision.norm``: ``tower_output``, back in raster order) and a 2x2 pixel
shuffle; the host then maps the shuffled rows with ``vision_adapter`` (two
linear maps under GELU, ``projector_hidden_size`` wide; native path
``model.model.vision_adapter``), ``vision_projection`` (``projector``: a
linear map to the text width) and a weightless RMSNorm
(``perception_emb_norm``), whose output is ``image_features``.

The text blocks (``model.language_model.layers``) norm each sublayer's output
before it joins the stream (`SandwichLayer`: ``post_attention_layernorm``
after the attention, ``pre_feedforward_layernorm`` and
``post_feedforward_layernorm`` around the MLP), so ``attention_output`` and
``mlp_output`` are the post-norms' outputs and the block identity holds. The
attention norms its queries and keys (weightless), scales the queries by
``qk_scale_factor``, applies RoPE on the layers whose ``layer_rope_theta``
is not 0 (none on the others), and gates its heads' output by a sigmoid of
``gate_proj`` before ``o_proj``, so ``attention_head_outputs`` (the kernel's)
is before the gate. ``embed_tokens`` RMS-norms its embeddings (weightless)
before the scatter, so ``layers[0].input[mask] == image_features`` holds. The
logits are the head's output times ``output_multiplier``, soft-capped at
``final_logit_softcapping``; ``project_on_vocab`` does the same.

Unavailable: the tower's ``attention_scores`` and ``attention_probabilities``
(one kernel call per window or image), ``image_size`` (any resolution:
``image_grid_thw`` says each image's). The grids (`MuseGrids`) place each
image's patches (window order in the blocks' values, raster order in
``patch_embeddings`` and ``tower_output``: ``of="patch_embeddings"``) and its
image tokens, one per 2x2 block. Videos are scattered
(``inputs_embeds_masked_scatter_1``) but no video value is served yet.
"""

from __future__ import annotations

from transformers.models.muse_glimmer.modeling_muse_glimmer import (
    MuseGlimmerTextAttention,
    MuseGlimmerTextDecoderLayer,
    MuseGlimmerTextMLP,
    MuseGlimmerVisionAttention,
    MuseGlimmerVisionEncoderLayer,
    MuseGlimmerVisionMLP,
    MuseGlimmerVisionModel,
)

from ..blocks.sandwich import SandwichAttention, SandwichLayer, SandwichMlp
from ..towers.muse import MUSE_GRIDS, MUSE_VISION_RENAME, MuseVision, MuseVisionAttention
from ..vision.tower import PackedVisionLayer, PackedVisionMlp
from . import Family

#: The text model's names under the standard ones (the blocks' are Gemma's).
MUSE_TEXT_RENAME = {
    "model.language_model.embed_tokens": "embed_tokens",
    "model.language_model.layers": "layers",
    "model.language_model.norm": "norm",
}

RENAME = {**MUSE_TEXT_RENAME, **MUSE_VISION_RENAME}

#: The Muse tower's envoys.
TOWER_ENVOYS = {
    MuseGlimmerVisionModel: MuseVision,
    MuseGlimmerVisionEncoderLayer: PackedVisionLayer,
    MuseGlimmerVisionAttention: MuseVisionAttention,
    MuseGlimmerVisionMLP: PackedVisionMlp,
}

ENVOYS = {
    **TOWER_ENVOYS,
    MuseGlimmerTextDecoderLayer: SandwichLayer,
    MuseGlimmerTextAttention: SandwichAttention,
    MuseGlimmerTextMLP: SandwichMlp,
}

FAMILY = Family("muse_glimmer", RENAME, ENVOYS, "model.language_model.layers", grid_layout=MUSE_GRIDS)
