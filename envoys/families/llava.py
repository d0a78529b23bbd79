"""LLaVA (model_type llava): a SigLIP or CLIP tower, a two-layer projector, any text model.

``LlavaModel.forward`` scatters the projected features into the token
embeddings (``inputs_embeds_masked_scatter_0``, argument 1). What the
projector reads depends on the checkpoint: llava-interleave
(``vision_feature_layer=-1``, strategy "full") reads the last block's output
before the tower's final norm, so ``projector.input`` is
``vision.layers[-1].layer_output``, not ``tower_output``; Llava 1.5 (``-2``,
"default") reads block -2 without its CLS token (the last block still runs,
unused). SigLIP has no CLS and a final norm over the patches
(``post_layernorm``, the tower's ``norm``); CLIP puts the CLS token first and
its ``post_layernorm`` normalises only the pooled CLS, so it is no ``norm``.
"""

from __future__ import annotations

from typing import Any

from transformers.models.clip.modeling_clip import CLIPAttention, CLIPEncoderLayer, CLIPMLP, CLIPVisionModel
from transformers.models.llava.modeling_llava import LlavaModel
from transformers.models.siglip.modeling_siglip import (
    SiglipAttention,
    SiglipEncoderLayer,
    SiglipMLP,
    SiglipVisionModel,
)

from ..feature_layers import with_feature_layer_gradients
from ..vision import ImageScatter, Vision, VisionAttention, VisionLayer, VisionMlp
from . import Family
from .encoder_names import ENCODER_RENAME, WRAPPER_RENAME

RENAME = {**WRAPPER_RENAME, **ENCODER_RENAME}

ENVOYS = {
    LlavaModel: ImageScatter,
    SiglipVisionModel: Vision,
    CLIPVisionModel: Vision,
    SiglipEncoderLayer: VisionLayer,
    CLIPEncoderLayer: VisionLayer,
    SiglipAttention: VisionAttention,
    CLIPAttention: VisionAttention,
    SiglipMLP: VisionMlp,
    CLIPMLP: VisionMlp,
}
#: The projector reads hidden_states[vision_feature_layer]: the tower values past it have no gradient.
ENVOYS = with_feature_layer_gradients(ENVOYS, host=LlavaModel)


def tower_norm(config: Any) -> dict[str, str]:
    """SigLIP's post_layernorm normalises the patches, so it is the tower's ``norm``; CLIP's is not."""
    return {"post_layernorm": "norm"} if config.vision_config.model_type == "siglip_vision_model" else {}


FAMILY = Family("llava", RENAME, ENVOYS, "model.language_model.layers", extra_rename=tower_norm)
