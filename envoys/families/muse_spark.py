"""Muse Spark (model_type muse_spark): Muse Glimmer's tower and host, on a text model whose blocks gate the residual
stream, and an audio tower.

``MuseSparkModel.forward`` scatters the image features
(``inputs_embeds_masked_scatter_0``, argument 1, found; ``_1`` is video,
``_2`` audio). The tower, adapter, projector and embedding norm are Muse
Glimmer's (`envoys.families.muse_glimmer`, `envoys.towers.muse`): the tower
``model.vision_tower`` (``vision``, a `MuseVision`), packed, its blocks
attending per window then per image at ``cu_seqlens``; ``projector`` is
``model.vision_projection``, and ``image_features`` its output RMS-normed
(weightless), so ``layers[0].input[mask] == image_features`` holds.

The text blocks (``model.language_model.layers``) join each sublayer's normed
output to the stream through a residual gate (`GatedResidualLayer`,
`envoys.blocks.gated_residual`): ``alpha * residual + beta * post_norm(sublayer)``
with learned per-channel ``alpha`` and ``beta``, so the stream is rescaled at
every sublayer and the block identity is stated with the gates::

    stream_after_attention == attention_gate.residual_scale * layer_input + attention_gate.output_scale * attention_output
    layer_output == mlp_gate.residual_scale * stream_after_attention + mlp_gate.output_scale * mlp_output

``attention_output`` and ``mlp_output`` are the post-norms' outputs, what
each sublayer hands its gate; the gates (``layers[i].attention_gate``,
``layers[i].mlp_gate``, native ``post_attention_residual_gate`` and
``post_feedforward_residual_gate``) serve ``output_scale`` (beta) and
``residual_scale`` (alpha), ``[hidden_size]``. The attention is Muse
Glimmer's (gated heads, weightless q/k norm, RoPE only on the layers whose
``layer_rope_theta`` is not 0) with a weightless norm of the heads' output
before the gate, so ``attention_head_outputs`` (the kernel's) is before both.
A block's MLP is dense or a mixture of experts (``mlp_layer_types``): on a
sparse block ``mlp.router_logits`` is the router's ``F.linear`` output,
which the router multiplies by ``output_multiplier`` before its sigmoid and
returns so scaled (`envoys.blocks.moe`); the dense blocks' say they have none.

The logits are the head's output times ``output_multiplier``, soft-capped at
``final_logit_softcapping``; ``project_on_vocab`` does the same, so on the
last block's ``layer_output`` it gives the logits. On an earlier block the
lens reads the stream before the later gates rescale it channel by channel:
what of block k's stream reaches the final norm is that stream times every
later ``residual_scale``, in the order the gates apply them (the later
sublayers add the rest), so the lens of what block k's stream carries to the
end is ``project_on_vocab`` of it so scaled: with the later sublayers' outputs
written to zeros, that is the logits, exactly.

Unavailable: the tower's ``attention_scores`` and ``attention_probabilities``
(one kernel call per window or image), ``image_size`` (any resolution).
Videos are scattered (``inputs_embeds_masked_scatter_1``) but no video value
is served yet; audio is not served (`Media.not_served`).
"""

from __future__ import annotations

from transformers.models.muse_spark.modeling_muse_spark import (
    MuseSparkMoE,
    MuseSparkResidualGate,
    MuseSparkTextAttention,
    MuseSparkTextDecoderLayer,
    MuseSparkTextMLP,
    MuseSparkVisionAttention,
    MuseSparkVisionEncoderLayer,
    MuseSparkVisionMLP,
    MuseSparkVisionModel,
)

from ..blocks.gated_residual import (
    GatedResidualAttention,
    GatedResidualLayer,
    GatedResidualRoutedMlp,
    ResidualGate,
)
from ..towers.muse import MUSE_GRIDS, MuseVision, MuseVisionAttention
from ..vision.tower import PackedVisionLayer, PackedVisionMlp
from . import Family, Media
from .muse_glimmer import RENAME

#: Why the audio the host scatters is not served.
AUDIO_NOT_SERVED = (
    "Muse Spark's audio tower (model.audio_tower) is a causal convolutional pyramid with no attention: four stages, "
    "each a patch embedding (a strided linear map of the waveform) and depthwise causal-convolution blocks, then a "
    "norm, a projection to the text width and a norm; its features are RMS-normed by the embedding's norm and "
    "scattered at inputs_embeds_masked_scatter_2. No audio envoy serves a tower of convolution stages yet: read "
    "model.model.audio_tower's modules at their native paths"
)

ENVOYS = {
    MuseSparkVisionModel: MuseVision,
    MuseSparkVisionEncoderLayer: PackedVisionLayer,
    MuseSparkVisionAttention: MuseVisionAttention,
    MuseSparkVisionMLP: PackedVisionMlp,
    MuseSparkTextDecoderLayer: GatedResidualLayer,
    MuseSparkTextAttention: GatedResidualAttention,
    MuseSparkTextMLP: GatedResidualRoutedMlp,  # "a dense MLP" beside the sparse blocks (`envoys.blocks.moe`)
    MuseSparkMoE: GatedResidualRoutedMlp,
    MuseSparkResidualGate: ResidualGate,
}

FAMILY = Family(
    "muse_spark", RENAME, ENVOYS, "model.language_model.layers", grid_layout=MUSE_GRIDS,
    media=Media(not_served={"audio": AUDIO_NOT_SERVED}),
)
