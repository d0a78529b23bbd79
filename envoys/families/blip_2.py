"""BLIP-2 (model_type blip-2): a BLIP ViT, a Q-Former and a language projection, scattered by the root into an OPT
text model.

``Blip2ForConditionalGeneration`` has no inner model: its own forward runs
the tower, the Q-Former on the learned queries and the language projection
(``get_image_features``), then scatters the projection's output into the
token embeddings with ``inputs_embeds.to(device).masked_scatter(mask,
features)``: nnsight labels that call ``masked_scatter_0`` (the callee is a
call's result), argument 1 the features; the root is the scatter host. What
the tower, the projector (the language projection; its input is the
Q-Former's output at the queries) and ``image_features`` are, and why
``generate`` serves neither the mask nor the features, is `envoys.towers.qformer`'s.

The text model is OPT (``language_model.model.decoder``): ``layers``,
``embed_tokens``, the final ``norm`` (``final_layer_norm``), ``lm_head``; a
block's ``self_attn_layer_norm`` is its ``input_layernorm``, its attention's
``out_proj`` its ``o_proj``. OPT's block runs its MLP inline (``fc1``, the
activation, ``fc2`` on the tokens flattened to ``[batch * seq, hidden_size]``,
no MLP module), so ``mlp_output`` is Unavailable on every block with the
reason (`envoys.blocks.opt.OptLayer`). OPT adds learned position embeddings
(``embed_positions``) to the embeddings before its first block, so
``layers[0].input[image_token_mask] == image_features +
embed_positions.output[image_token_mask]``: the image rows the text model's
first block receives are the features plus their positions. The logits are
read at the language model's output (``logits_at``), which ``generate`` runs
too.

Unavailable: ``mlp_output`` (above); under generate, ``image_token_mask`` and
``image_features``. Refused: a checkpoint on Flan-T5 (an encoder-decoder text
model), before anything is loaded (`envoys.towers.qformer.encoder_decoder_text`).
"""

from __future__ import annotations

from transformers.models.blip_2.modeling_blip_2 import (
    Blip2Attention,
    Blip2EncoderLayer,
    Blip2ForConditionalGeneration,
    Blip2MLP,
    Blip2VisionModel,
)
from transformers.models.opt.modeling_opt import OPTDecoderLayer

from rewrites.image_scatter import Scatter

from ..blocks.opt import OptLayer
from ..towers.qformer import BLIP_RENAME, BlipGrids, blip_quirks
from ..vision.tower import Vision, VisionAttention, VisionLayer, VisionMlp
from . import Batching, Family

#: OPT's text model under the root's ``language_model``, and its block's names.
RENAME = {
    "language_model.model.decoder.embed_tokens": "embed_tokens",
    "language_model.model.decoder.layers": "layers",
    "language_model.model.decoder.final_layer_norm": "norm",
    "self_attn_layer_norm": "input_layernorm",
    "self_attn.out_proj": "self_attn.o_proj",
    **BLIP_RENAME,
}

ENVOYS = {
    Blip2VisionModel: Vision,
    Blip2EncoderLayer: VisionLayer,
    Blip2Attention: VisionAttention,
    Blip2MLP: VisionMlp,
    OPTDecoderLayer: OptLayer,
}

#: The root scatters: ``inputs_embeds.to(language_model_inputs.device).masked_scatter(special_image_mask, ...)``.
SCATTER = Scatter(in_root=True, callee="masked_scatter",
                  purpose="the root scatters the language projection's output into the embeddings in its own forward")

FAMILY = Family("blip-2", RENAME, ENVOYS, "language_model.model.decoder.layers", scatter=SCATTER,
                grid_layout=BlipGrids(), batching=Batching(images_per_prompt=1),
                quirks=blip_quirks(Blip2ForConditionalGeneration))
