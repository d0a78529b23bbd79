"""InstructBLIP (model_type instructblip): a BLIP ViT, a Q-Former that also reads the prompt, a language projection,
scattered by the root into a Llama (Vicuna) text model.

``InstructBlipForConditionalGeneration`` has no inner model: its own forward
runs the tower, the Q-Former on the learned queries and the prompt's
``qformer_input_ids`` (the instruction, tokenized by the Q-Former's own
tokenizer, whose rows the Q-Former's self-attention mixes with the
queries'), keeps the queries' rows and projects them (``get_image_features``),
then scatters the projection's output into the token embeddings with
``inputs_embeds.masked_scatter(mask, features)`` (``inputs_embeds_masked_scatter_0``,
argument 1); the root is the scatter host. What the tower, the projector (the
language projection; its input is the Q-Former's output at the queries, the
instruction's rows dropped) and ``image_features`` are, and why ``generate``
serves neither the mask nor the features, is `envoys.towers.qformer`'s.

The text model is Llama (``language_model.model``), found from its blocks:
``layers``, ``embed_tokens``, ``norm``, ``lm_head``. The logits are read at the
language model's output (``logits_at``), which ``generate`` runs too.

Unavailable: under generate, ``image_token_mask`` and ``image_features``.
Refused: a checkpoint on Flan-T5 (an encoder-decoder text model), before
anything is loaded (`envoys.towers.qformer.encoder_decoder_text`). A prompt takes one
image; more images than prompts make the Q-Former raise (transformers').
"""

from __future__ import annotations

from transformers.models.instructblip.modeling_instructblip import (
    InstructBlipAttention,
    InstructBlipEncoderLayer,
    InstructBlipForConditionalGeneration,
    InstructBlipMLP,
    InstructBlipVisionModel,
)

from rewrites.image_scatter import Scatter

from ..towers.qformer import BLIP_RENAME, BlipGrids, blip_quirks
from ..vision.tower import Vision, VisionAttention, VisionLayer, VisionMlp
from . import Batching, Family

#: Llama's text model under the root's ``language_model``.
RENAME = {
    "language_model.model.embed_tokens": "embed_tokens",
    "language_model.model.layers": "layers",
    "language_model.model.norm": "norm",
    **BLIP_RENAME,
}

ENVOYS = {
    InstructBlipVisionModel: Vision,
    InstructBlipEncoderLayer: VisionLayer,
    InstructBlipAttention: VisionAttention,
    InstructBlipMLP: VisionMlp,
}

SCATTER = Scatter(in_root=True,
                  purpose="the root scatters the language projection's output into the embeddings in its own forward")

FAMILY = Family("instructblip", RENAME, ENVOYS, "language_model.model.layers", scatter=SCATTER,
                grid_layout=BlipGrids(),
                batching=Batching(
                    images_per_prompt=1,
                    text_invokes="its Q-Former reads the instruction of every prompt in the batch beside one image "
                                 "each (qformer_input_ids, one row per image), so a prompt without an image has no "
                                 "image to read it with"),
                quirks=blip_quirks(InstructBlipForConditionalGeneration))
