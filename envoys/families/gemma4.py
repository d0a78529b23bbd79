"""Gemma 4 (model_type gemma4): a patch-padded tower with a pooler inside, on a Gemma 4 text model.

``Gemma4Model.forward`` replaces every multimodal token by the pad token
before embedding, then scatters the image features into the token embeddings
(``inputs_embeds_masked_scatter_0``, argument 1, the features flat over the
image tokens; the mask is expanded to ``[batch, seq, hidden_size]`` first),
its videos' (``_1``: ``vision.video_features``) and its audio's (``_2``:
``audio.audio_features``). The tower
(``model.vision_tower``, a `Gemma4Vision`) runs on the processor's
pre-patchified pixels, its patch axis padded to a fixed row count (the
processor's soft-token budget times the pooling area) with the padded keys
masked; its pooler (``vision.pooler``) makes the soft tokens, and the
projector is ``embed_vision`` (a weightless RMSNorm, then a linear map to the
text width). The same tower runs on a video's sampled frames (its second
run, ``model.video``), frames as its batch.

The audio tower (``model.audio``, a Conformer: `ConformerLayer` blocks) runs
on the feature extractor's log-mel frames; ``embed_audio`` projects its
output to the text width. A checkpoint saved without one (``audio_config``
None) has no ``model.audio``.

The text model's blocks are sandwich-normed and may add a per-layer input
branch and scale by ``layer_scalar`` (`Gemma4TextLayer`). Its attention is on
the shared interface; on the blocks that reuse another block's keys and
values (the last ``num_kv_shared_layers``), ``attention_keys`` and
``attention_values`` are that block's (the kernel receives them), and those
blocks have no ``k_proj``. Under ``generate`` the text model slices the
stream entering the first such block to the positions whose logits are kept
(the last one) on the prompt pass, so from that block on the prompt step's
values have one position; a trace keeps every position. The text attention
is causal (sliding-window on the "sliding_attention" blocks), except on a
checkpoint with ``use_bidirectional_attention="vision"``, whose sliding blocks
let each image's tokens attend to each other both ways.
"""

from __future__ import annotations

from transformers.models.gemma4.modeling_gemma4 import (
    Gemma4AudioLayer,
    Gemma4AudioModel,
    Gemma4TextAttention,
    Gemma4TextDecoderLayer,
    Gemma4TextMLP,
    Gemma4VisionAttention,
    Gemma4VisionEncoderLayer,
    Gemma4VisionMLP,
    Gemma4VisionModel,
)

from ..audio import Audio, ConformerLayer
from ..blocks.per_layer_input import Gemma4TextLayer
from ..blocks.sandwich import SandwichAttention, SandwichMlp
from ..towers.gemma4 import GEMMA4_GRIDS, Gemma4Vision, Gemma4VisionLayer, Gemma4VisionMlp
from ..towers.gemma4 import Gemma4VisionAttention as Gemma4VisionAttentionEnvoy
from . import Family, Media

RENAME = {
    "model.language_model.embed_tokens": "embed_tokens",
    "model.language_model.layers": "layers",
    "model.language_model.norm": "norm",
    "model.vision_tower": "vision",
    "model.embed_vision": "projector",
    "model.audio_tower": "audio",
    "encoder.layers": "layers",
    "patch_embedder": "patch_embed",
}

ENVOYS = {
    Gemma4AudioModel: Audio,
    Gemma4AudioLayer: ConformerLayer,
    Gemma4TextDecoderLayer: Gemma4TextLayer,
    Gemma4TextAttention: SandwichAttention,
    Gemma4TextMLP: SandwichMlp,
    Gemma4VisionModel: Gemma4Vision,
    Gemma4VisionEncoderLayer: Gemma4VisionLayer,
    Gemma4VisionAttention: Gemma4VisionAttentionEnvoy,
    Gemma4VisionMLP: Gemma4VisionMlp,
}

FAMILY = Family("gemma4", RENAME, ENVOYS, "model.language_model.layers", text_model_types=("gemma4_text",),
                grid_layout=GEMMA4_GRIDS, media=Media(("image", "video", "audio")))
