"""Gemma 4 Unified (model_type gemma4_unified): no vision tower, a vision embedder, on Gemma 4's text blocks.

``Gemma4UnifiedModel.forward`` replaces every multimodal token by the pad
token before embedding, then scatters the image features into the token
embeddings (``inputs_embeds_masked_scatter_0``, argument 1, the features flat
over the image tokens; the mask is expanded to ``[batch, seq, hidden_size]``
first; ``_1`` is video and ``_2`` audio, not served yet: their
values say so, naming the ``.source`` site that reads them). There is no tower
of blocks: ``model.vision`` is the vision embedder (``model.embed_vision``, a
``Gemma4UnifiedVisionEmbedder``), which embeds each of the processor's merged
patches with layer norms, a linear map and a 2D position embedding; the
projector is its ``multimodal_embedder`` (a weightless RMSNorm, then a linear
map to the text width), run on every row, and the host drops the padded rows
before the scatter (`envoys.towers.gemma4_unified`). Every tower-block value
(``vision.layers[i]``'s, the attention interior, the block sizes) is
Unavailable, saying there are no blocks (`envoys.towers.blockless`). The audio
embedder (``model.embed_audio``) keeps its native name.

The text model's blocks are Gemma 4's, sandwich-normed and scaled by
``layer_scalar`` (`Gemma4TextLayer`), without per-layer inputs (so
``per_layer_input`` and ``per_layer_output`` are Unavailable on every block)
and without a mixture of experts; the attention is on the shared interface,
sliding-window on the "sliding_attention" blocks. On a checkpoint with
``use_bidirectional_attention="vision"`` (the default) each image's tokens
attend to each other both ways on every block, full and sliding, whatever the
window (transformers 5.24.0's forward builds its masks with
``create_masks_for_generate`` and the image's block ids; the module's
``create_masks_for_vision_model``, whose docstring keeps the full blocks
causal, is not called); text tokens stay causal.
"""

from __future__ import annotations

from transformers.models.gemma4_unified.modeling_gemma4_unified import (
    Gemma4UnifiedTextAttention,
    Gemma4UnifiedTextDecoderLayer,
    Gemma4UnifiedTextMLP,
    Gemma4UnifiedVisionEmbedder,
)

from ..blocks.per_layer_input import Gemma4TextLayer
from ..blocks.sandwich import SandwichAttention, SandwichMlp
from ..towers.gemma4_unified import GEMMA4_UNIFIED_GRIDS, Gemma4UnifiedVision
from . import Family

RENAME = {
    "model.language_model.embed_tokens": "embed_tokens",
    "model.language_model.layers": "layers",
    "model.language_model.norm": "norm",
    "model.embed_vision": "vision",
    "model.embed_vision.multimodal_embedder": "projector",
}

ENVOYS = {
    Gemma4UnifiedTextDecoderLayer: Gemma4TextLayer,
    Gemma4UnifiedTextAttention: SandwichAttention,
    Gemma4UnifiedTextMLP: SandwichMlp,
    Gemma4UnifiedVisionEmbedder: Gemma4UnifiedVision,
}

FAMILY = Family("gemma4_unified", RENAME, ENVOYS, "model.language_model.layers",
                text_model_types=("gemma4_unified_text",), grid_layout=GEMMA4_UNIFIED_GRIDS)
