"""Nemotron-H Omni (model_type nemotron_h_omni): a RADIO tower on a NemotronH (Mamba2 / attention / MoE) text model.

The root, ``NemotronH_Omni_Reasoning_V3``, has no inner model: it runs the
tower and the projector (``get_image_features``) and scatters the projected
features into the token embeddings in its own forward
(``inputs_embeds_masked_scatter_0``, argument 1, the mask pre-expanded to
``[batch, seq, hidden_size]``; ``_1`` is video, ``_2`` audio), so the family
sets ``ROOT_SCATTER`` and the root is the host. The text model is the root's
``language_model`` (a NemotronH causal LM), the tower ``vision_model`` (a
`RadioVision`: packed, cls and register tokens per image), the projector
``multi_modal_projector`` (RMSNorm and two linear layers over each image's
pixel-shuffled patches, 2x2 patches folded into one image token).

Audio: the root's ``audio_tower`` (``model.audio``, a Parakeet Conformer
encoder: `ConformerLayer` blocks) runs on the feature extractor's mel frames,
``embed_audio`` projects its output, and the forward scatters it third
(``inputs_embeds_masked_scatter_2``: ``audio.audio_features``). Videos are not
served: the processor writes a video's frames with the image token, so the
video's placeholder is the image's, and transformers 5.24 cannot take an image
and a video in one prompt.

NemotronH blocks hold one sublayer each under the native name ``mixer``:
``layers_block_type`` says which, a Mamba2 mixer (``linear_attention``),
softmax attention (``full_attention``), a mixture of experts (``moe``) or an
MLP (``mlp``); ``norm`` comes before it and the residual after it, so
``layer_input + (what the mixer adds) == layer_output`` on every block. The
attention answers to ``self_attn`` and the mixture of experts (and an MLP) to
``mlp`` (class-keyed renames), so a block serves ``attention_output`` or
``mlp_output``, not both, and a Mamba2 block neither: what it adds is
``layers[i].mixer.output``. Every block is a `NemotronHLayer`, which says so
per block. A mixture of experts serves ``mlp.router_logits`` (its router's
``F.linear`` on float32, `envoys.blocks.moe`; the experts run are chosen from its
sigmoid plus ``e_score_correction_bias``, within the best expert groups).
"""

from __future__ import annotations

from typing import Any

from transformers.models.nemotron_h.modeling_nemotron_h import (
    NemotronHAttention,
    NemotronHBlock,
    NemotronHMamba2Mixer,
    NemotronHMLP,
    NemotronHMoE,
)
from transformers.models.parakeet.modeling_parakeet import ParakeetEncoder, ParakeetEncoderBlock
from transformers.models.radio.modeling_radio import RadioAttention, RadioLayer, RadioMLP, RadioModel, RadioSwiGLUFFN

from rewrites.image_scatter import Scatter

from ..audio import Audio, ConformerLayer
from ..blocks.hybrid import HybridLayer, other_mixer
from ..blocks.moe import RoutedMlp
from ..core.standard import child
from ..core.values import Unavailable
from ..text.blocks import Attention
from ..towers.radio import RadioGrids, RadioVision, RadioVisionAttention, RadioVisionLayer
from ..vision.tower import PackedVisionMlp
from . import Family, Media

#: The root scatters the image features in its own forward.
ROOT_SCATTER = Scatter(in_root=True)

RENAME = {
    "language_model.model.embeddings": "embed_tokens",
    "language_model.model.layers": "layers",
    "language_model.model.norm_f": "norm",
    "language_model.lm_head": "lm_head",
    "vision_model": "vision",
    "multi_modal_projector": "projector",
    "audio_tower": "audio",
    "encoder.layer": "layers",
    "embeddings.patch_projection": "patch_embed",
    "attention": "self_attn",
    "norm1": "input_layernorm",
    "norm2": "post_attention_layernorm",
    "mlp.fc1": "mlp.up_proj",
    "mlp.fc2": "mlp.down_proj",
    NemotronHAttention: "self_attn",
    NemotronHMoE: "mlp",
}


#: Why Nemotron-H Omni's videos are not served.
VIDEO_AS_IMAGES = (
    "its processor writes a video's frames with the image token (no video token reaches input_ids), so a video's "
    "placeholder is the image's, and transformers 5.24 cannot take an image and a video in one prompt (the host's "
    "placeholder check counts both at the image token); the video scatter, inputs_embeds_masked_scatter_1, is read "
    "by nnsight's own model.source.inputs_embeds_masked_scatter_1"
)


class NemotronHLayer(HybridLayer):
    """A NemotronH block: one sublayer (``mixer``), so ``layer_input + (what it adds) == layer_output``.

    On an attention block that is ``attention_output`` (``mlp_output`` is
    Unavailable: there is no MLP in it); on a mixture-of-experts or MLP block
    ``mlp_output``; on a Mamba2 block neither (nor any ``self_attn.*`` value):
    what it adds is ``layers[i].mixer.output``. Its one norm, ``norm``, answers
    to the name it has on every block: ``input_layernorm`` on an attention block,
    ``post_attention_layernorm`` on an MLP block (`Unavailable` otherwise).
    """

    mixers = {NemotronHMamba2Mixer: "a Mamba2 selective state-space mixer"}

    @property
    def input_layernorm(self) -> Any:
        """The norm before the attention, on an attention block: the block's one norm, ``norm``."""
        return self._norm_before("self_attn", "softmax attention")

    @property
    def post_attention_layernorm(self) -> Any:
        """The norm before the MLP, on a mixture-of-experts or MLP block: the block's one norm, ``norm``."""
        return self._norm_before("mlp", "MLP")

    def _norm_before(self, part: str, what: str) -> Any:
        if child(self, part) is None:
            index = self.path.rpartition(".")[2]
            raise Unavailable(
                f"layers[{index}] holds no {what}: a NemotronH block holds one sublayer behind one norm, "
                f"layers[{index}].norm, which here comes before its sublayer, {self.mixer_name()}"
            )
        return child(self, "norm")

    def mixer_name(self) -> str:
        """What this block's one sublayer is."""
        found = other_mixer(self)
        if found is not None:
            return found[1]
        return "softmax attention" if child(self, "self_attn") is not None else "MLP"


ENVOYS = {
    ParakeetEncoder: Audio,
    ParakeetEncoderBlock: ConformerLayer,
    RadioModel: RadioVision,
    RadioLayer: RadioVisionLayer,
    RadioAttention: RadioVisionAttention,
    RadioMLP: PackedVisionMlp,
    RadioSwiGLUFFN: PackedVisionMlp,
    NemotronHBlock: NemotronHLayer,
    NemotronHAttention: Attention,
    NemotronHMoE: RoutedMlp,
    NemotronHMLP: RoutedMlp,
}


def plain_mlp_blocks(config: Any) -> dict[Any, str]:
    """``mlp`` for the MLP blocks of a stack that has them; not otherwise, since each mixture of experts holds one
    MLP (its shared expert), which would be aliased ``mlp`` inside it too."""
    return {NemotronHMLP: "mlp"} if "mlp" in config.get_text_config().layers_block_type else {}


#: The root pixel-shuffles each image's patches by ``downsample_ratio`` (0.5: 2x2 patches per image token).
GRIDS = RadioGrids(merge_of=lambda config: round(1 / config.downsample_ratio))

FAMILY = Family(
    "nemotron_h_omni", RENAME, ENVOYS, "language_model.model.layers",
    scatter=ROOT_SCATTER, extra_rename=plain_mlp_blocks, text_model_types=("nemotron_h",), grid_layout=GRIDS,
    media=Media(("image", "audio"), not_served={"video": VIDEO_AS_IMAGES}),
)
