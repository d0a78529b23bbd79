"""Janus (model_type janus): a SigLIP-like tower, a two-layer aligner, a Llama text model; image understanding only.

``JanusModel.get_image_features`` runs the tower (``model.vision_model``, a
``JanusVisionModel``: SigLIP's embeddings and pre-norm blocks, no CLS, one
row per image, ``[images, patches, vision_hidden_size]``) and hands the
projector (``model.aligner``, a ``JanusVisionAlignerMLP``: ``fc1``, then GELU
and a linear per further layer of its ``depth``, patch by patch) the tower's
``last_hidden_state``, after ``post_layernorm`` (the tower's ``norm``): so
``projector.input`` is ``tower_output``. The aligner's output replaces the
tower's ``pooler_output``, which the tower computes by running
``post_layernorm`` a second time, on the first patch's normed row (so
``vision.norm`` runs twice a forward; its first call is the one over the
patches, and the second feeds nothing). ``JanusModel.forward`` reshapes the
aligner's output to ``[image_tokens, hidden_size]`` and scatters it into the
token embeddings (``inputs_embeds_masked_scatter_0``, argument 1), so
``image_features`` is ``projector.output`` flattened, image after image, one
image token a patch in raster order.

What differs from SigLIP's names: the attention's output projection is
``projection_layer`` (``self_attn.o_proj`` here), and the MLP has no
``intermediate_size`` in its config but is ``hidden_size * mlp_ratio`` wide
(`JanusVision`). Its ``q_norm`` / ``k_norm`` (identities unless the config's
``use_qk_norm``) run before the kernel, so ``attention_queries`` and
``attention_keys`` are after them.

The image processor resizes each image so its longer side is the tower's
``image_size`` and pads it to a square with the mean colour, as DeepSeek-VL's
does, so every image is one tile of ``num_image_tokens`` image tokens
(``<image_placeholder>``), which the processor writes between
``<begin_of_image>`` and ``<end_of_image>`` for each placeholder; the grids
are DeepSeek-VL's (`DeepseekGrids`).

Image generation is not served and not named: the spec has no value on it.
The VQ-VAE (``model.vqmodel``) and the generation embeddings, aligner and
head (``model.generation_embeddings``, ``model.generation_aligner``,
``model.generation_head``) keep their native paths (plain envoys) and run in
no forward an image-understanding trace or text generation makes. Janus's
own ``generate(generation_mode="image")`` drives the text model itself, step
by step, from the generation embeddings, and reads its last stream through
``generation_head``, never calling the root's forward, so neither the logits
nor the image pathway exist there. Through nnsight it does not run on
transformers 5.24: ``generation_mode`` beside a text prompt goes to the
processor (which appends ``<begin_of_image>``) and the model generates text;
beside ``input_ids`` it reaches Janus's ``generate``, whose image branch
refuses the ``streamer`` nnsight passes (``model_kwargs are not used by the
model: ['streamer']``).
"""

from __future__ import annotations

from transformers.models.janus.modeling_janus import (
    JanusVisionAttention,
    JanusVisionEncoderLayer,
    JanusVisionMLP,
    JanusVisionModel,
)

from ..vision.tower import Vision, VisionAttention, VisionLayer, VisionMlp
from . import Family
from .deepseek_vl import RENAME as DEEPSEEK_VL_RENAME
from .deepseek_vl import DeepseekGrids

#: DeepSeek-VL's names (the inner model's text model, SigLIP-like tower and aligner), the tower's output projection
#: renamed.
RENAME = {**DEEPSEEK_VL_RENAME, "self_attn.projection_layer": "self_attn.o_proj"}


class JanusVision(Vision):
    """Janus's tower: SigLIP's sizes, save that its config gives the MLP's width as ``mlp_ratio``."""

    @property
    def intermediate_size(self) -> int:
        """The MLP's width, ``hidden_size * mlp_ratio``, as ``JanusVisionMLP`` computes it."""
        return int(self.vision_config.hidden_size * self.vision_config.mlp_ratio)


ENVOYS = {
    JanusVisionModel: JanusVision,
    JanusVisionEncoderLayer: VisionLayer,
    JanusVisionAttention: VisionAttention,
    JanusVisionMLP: VisionMlp,
}

FAMILY = Family("janus", RENAME, ENVOYS, "model.language_model.layers", grid_layout=DeepseekGrids())
