"""PaliGemma (model_type paligemma): a SigLIP tower, a linear projector on its normed output, a Gemma text model
(PaliGemma) or a Gemma 2 one (PaliGemma 2).

The tower (``model.vision_tower``, SigLIP: no CLS, one row per image, patches
in raster order) ends in ``post_layernorm``, the tower's ``norm``, so
``tower_output`` is after it. ``PaliGemmaModel.get_image_features`` hands the
projector (``multi_modal_projector``, one ``Linear`` from the tower width to
``projection_dim``) the tower's ``last_hidden_state``, that normed output, so
``projector.input`` is ``tower_output`` and ``projector.output`` is
``[images, patches, hidden_size]``, one image token per patch.
``PaliGemmaModel.forward`` scatters it into the token embeddings
(``inputs_embeds_masked_scatter_0``, argument 1, still ``[images, patches,
hidden]``), not rescaled (as read on transformers 5.24.0; older releases
are not checked here); the Gemma embedding scales the text tokens'
embeddings by ``sqrt(hidden_size)`` itself. So ``image_features`` is
``projector.output`` flat, ``[image_tokens, hidden_size]``, image after image.

PaliGemma's text model is Gemma's, with plain pre-norm blocks (the
standard `Layer`); PaliGemma 2's is Gemma 2's, sandwich-norm blocks
(`SandwichLayer`: ``attention_output`` and ``mlp_output`` are the post-norms'
outputs) whose layers alternate sliding-window and global attention, with
soft-capped attention logits (``attention_scores``, the softmax's input, are
after the cap, ``50 * tanh(s / 50)`` on the checkpoints, mask added) and
final logits. What differs from
both text models alone is the attention mask: the processor's
``token_type_ids`` are 0 on the prefix (every image token, ``<bos>``, the
prompt and its ``\\n``) and 1 on a ``suffix=``, and the host builds the mask
so that the prefix attends both ways, every prefix token to every other, and
the suffix causally (after the whole prefix). Under ``generate`` the new
tokens are suffix tokens.

The processor also returns ``labels``: the input ids on the suffix, -100 on
the prefix. A trace written in the processor's terms (``trace(prompt,
images=...)``) hands the forward everything the processor returns, so the
root computes a loss on every trace: NaN without a suffix (no token to
score), the suffix's next-token cross-entropy with one (pass the processor's
encoding of ``suffix=`` to the trace: nnsight does not forward ``suffix`` to
the processor). The logits and every standard value are the same with or
without ``labels``.
"""

from __future__ import annotations

from transformers.models.gemma2.modeling_gemma2 import Gemma2Attention, Gemma2DecoderLayer, Gemma2MLP

from rewrites.image_scatter import Scatter

from ..blocks.sandwich import SandwichAttention, SandwichLayer, SandwichMlp
from ..image.grids import Grid, ImageInputs, check_image
from ..towers.encoder_names import SIGLIP_WRAPPER_RENAME
from ..towers.fixed_tower import TileRows
from . import Batching, Family
from .llava import SIGLIP_ENVOYS

RENAME = dict(SIGLIP_WRAPPER_RENAME)


ENVOYS = {**SIGLIP_ENVOYS, Gemma2DecoderLayer: SandwichLayer, Gemma2Attention: SandwichAttention, Gemma2MLP: SandwichMlp}


class PaliGemmaGrids:
    """PaliGemma's grids: one tower row per image (SigLIP, no CLS), a square patch grid in raster order; one image
    token per patch, in the same order, image after image."""

    stream_dims = 2

    @staticmethod
    def _tile(inputs: ImageInputs, image: int) -> TileRows:
        check_image(image, inputs["pixel_values"].shape[0])
        vision = inputs.config.vision_config
        return TileRows(vision.image_size // vision.patch_size, cls=0, dropped=0)

    def patch_grid(self, inputs: ImageInputs, image: int) -> Grid:
        tile = self._tile(inputs, image)
        start = image * tile.rows
        return Grid(tile.patches(start), slice(start, start + tile.rows), inputs["pixel_values"].shape[0] * tile.rows)

    def token_grid(self, inputs: ImageInputs, image: int) -> Grid:
        tile = self._tile(inputs, image)
        start = image * tile.tokens
        return Grid(tile.token_cells(start), slice(start, start + tile.tokens))


SCATTER = Scatter(purpose="projected patches, [images, patches, hidden], scattered unscaled into the scaled embeddings")

FAMILY = Family("paligemma", RENAME, ENVOYS, "model.language_model.layers", scatter=SCATTER, grid_layout=PaliGemmaGrids(),
                batching=Batching(first_position=1))
