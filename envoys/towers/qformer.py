"""BLIP-2 and InstructBLIP: a BLIP ViT, a Q-Former, a language projection, scattered by the root. What both share.

``Blip2ForConditionalGeneration`` and ``InstructBlipForConditionalGeneration``
have no inner model: the root holds the tower (``vision_model``, standard
``vision``), the learned queries (``query_tokens``, a parameter of the root), the
Q-Former (``qformer``, native name), the language projection
(``language_projection``, standard ``projector``) and the text model
(``language_model``, a causal LM: OPT on BLIP-2, Llama / Vicuna on
InstructBLIP). The root's own forward runs ``get_image_features`` and scatters
its output into the token embeddings (the root is the scatter host,
``root_scatter``): BLIP-2's ``inputs_embeds.to(device).masked_scatter(mask,
features)``, which nnsight labels ``masked_scatter_0`` (its callee is a call's
result, so the label is the method's name alone), InstructBLIP's
``inputs_embeds.masked_scatter(mask, features)``, ``inputs_embeds_masked_scatter_0``;
argument 1 is the features on both.

The tower (a plain `envoys.vision.tower.Vision`) is a pre-norm ViT: CLS first
(``1 + patches`` rows an image, ``[images, 1 + patches, vision_hidden_size]``), blocks at
``encoder.layers`` (``layer_norm1``, a fused-``qkv`` attention on transformers'
shared interface with its output projection ``projection``, ``layer_norm2``,
``mlp.fc1`` / ``mlp.fc2``), and ``post_layernorm`` over every row (the tower's
``norm``; the forward calls it a second time on the CLS row alone, for the
pooled output). ``tower_output`` is its ``last_hidden_state``, after the norm,
CLS included: that, whole, is what the Q-Former cross-attends.

The projector. The image reaches the text model through two modules: the
Q-Former (``model.qformer``: ``num_query_tokens`` learned queries, self-attention
and, in its cross-attention blocks, attention over ``tower_output``) and the
language projection (one Linear from the Q-Former's width to the text width).
``model.projector`` is the language projection, the last module before the
scatter, so:

- ``projector.input`` is the Q-Former's output at the queries, ``[images,
  num_query_tokens, qformer_hidden_size]``: on BLIP-2 the Q-Former's whole
  ``last_hidden_state`` (it runs on the queries alone), cast to the tower's
  dtype (transformers keeps the Q-Former in float32 when it loads the rest in
  half precision); on InstructBLIP the first ``num_query_tokens`` rows of it,
  the instruction's rows (``qformer_input_ids``, which the Q-Former reads
  beside the queries) dropped.
  It is not a tower value: ``tower_output`` reaches it only through the
  Q-Former's cross-attention.
- ``projector.output`` is ``[images, num_query_tokens, hidden_size]``, and
  ``image_features`` is it flattened, image after image, query after query:
  one image token a query.

The stock processors write ``num_query_tokens`` image tokens at the start of
each prompt, once per prompt whatever the number of images, so a prompt takes
one image (``images_per_prompt``): several images go in several prompts (a
batch, ``model.trace([prompt] * n, images=images)``). transformers would take
more (BLIP-2 runs every image through the tower and the projector, and its
``masked_scatter`` keeps the first image's rows as the mask holds no more;
InstructBLIP's Q-Former raises), so a batch with more images than prompts is
refused before it runs, saying so.

Under ``generate`` transformers runs the class's own ``generate``, not the
root's forward: it runs the tower, the Q-Former and the projector, scatters
in its own body and hands the embeddings to ``language_model.generate``. So
under generate the tower's and the projector's values are served on step 0,
the text model's on every step, and ``image_token_mask`` and
``image_features``, which are read at the root's forward, are not served (the
family's ``generate_note``).

The root's forward takes no text alone (``pixel_values`` is required, and
``get_image_features`` runs on every call), so a load without a processor
(no ``task=``) has no vision values and a trace of a prompt alone raises
transformers' ``TypeError``.

Grids (`BlipGrids`): ``vision.patch_grid`` puts an image's patches on its
square grid (each image one row of the tower, CLS first); ``token_grid`` is
Unavailable, the image tokens being the Q-Former's queries, on no grid.

A checkpoint whose text model is an encoder-decoder (BLIP-2 and InstructBLIP
on Flan-T5) cannot be served: its text model is no decoder stream with the
image tokens in it (the image reaches the decoder through T5's encoder), so
`encoder_decoder_text` refuses it before anything is loaded.
"""

from __future__ import annotations

from typing import Any

from ..core.values import Unavailable
from ..families import Quirks
from ..image.grids import Grid, ImageInputs, check_image
from .fixed_tower import TileRows

#: The tower's, the language projection's and the block's names, shared by both families; the text model's are
#: each family's.
BLIP_RENAME = {
    "language_model.lm_head": "lm_head",
    "vision_model": "vision",
    "language_projection": "projector",
    "encoder.layers": "layers",
    "embeddings.patch_embedding": "patch_embed",
    "post_layernorm": "norm",
    "layer_norm1": "input_layernorm",
    "layer_norm2": "post_attention_layernorm",
    "self_attn.projection": "self_attn.o_proj",
    "mlp.fc1": "mlp.up_proj",
    "mlp.fc2": "mlp.down_proj",
}

#: Why generate serves neither the mask nor the features here.
OWN_GENERATE = (
    "{cls}.generate is its own: it runs the tower, the Q-Former and the projector, scatters the features in its own "
    "body and hands the embeddings to language_model.generate, so the root's forward, where image_token_mask and "
    "image_features are read, does not run under generate; the tower's and the projector's values are served on "
    "step 0 and the text model's on every step. Read image_token_mask and image_features in a trace"
)


def blip_quirks(cls: type) -> Quirks:
    """The root of BLIP-2 and InstructBLIP (``cls``): its language model's output carries the logits, an
    encoder-decoder text model is refused (`encoder_decoder_text`), and it generates in its own way (`OWN_GENERATE`)."""
    return Quirks(logits_at="language_model", unservable=encoder_decoder_text,
                  generate_note=OWN_GENERATE.format(cls=cls.__name__))


def encoder_decoder_text(config: dict[str, Any]) -> str | None:
    """Why a BLIP-2 / InstructBLIP checkpoint (its config as saved) cannot be served, or None: an encoder-decoder
    text model (Flan-T5), decided as transformers decides it (its model_type has no causal LM)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    text = config.get("text_config") or {}
    model_type = text.get("model_type", "opt")  # the configs' default text model
    if model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and not text.get("is_encoder_decoder", False):
        return None
    return (
        f"its text model is {model_type}, an encoder-decoder: the prompt and the image tokens go through the "
        f"encoder and the logits come from a decoder that reads them by cross-attention, so there is no decoder "
        f"stream holding the image tokens for the standard names to read (layers[0].input[image_token_mask] == "
        f"image_features has nothing to hold on); only checkpoints with a decoder-only text model "
        f"(OPT, Llama / Vicuna) are served"
    )


class BlipGrids:
    """Each image one row of the tower's stream, the CLS first, then its ``image_size // patch_size`` square of
    patches in raster order; the image tokens are the Q-Former's queries, on no grid."""

    stream_dims = 2

    def patch_grid(self, inputs: ImageInputs, image: int) -> Grid:
        images = inputs["pixel_values"].shape[0]
        check_image(image, images)
        vision = inputs.config.vision_config
        tile = TileRows(vision.image_size // vision.patch_size, cls=1, dropped=0)
        start = image * tile.rows
        return Grid(tile.patches(start), slice(start, start + tile.rows), images * tile.rows)

    def token_grid(self, inputs: ImageInputs, image: int) -> Grid:
        raise Unavailable(
            f"the image tokens have no grid: they are the Q-Former's {inputs.config.num_query_tokens} learned queries, "
            f"each attending to every row of its image's tower_output (the CLS and every patch), so none sits on a "
            f"cell of the image"
        )
