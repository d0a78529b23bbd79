"""Mistral 3 (model_type mistral3): the Pixtral tower, a patch-merging projector, a Mistral text model.

``Mistral3Model.forward`` scatters the projected features into the token
embeddings (``inputs_embeds_masked_scatter_0``, argument 1). The tower
(``model.vision_tower``, a `PixtralVision`) is packed: every image's patches
in one row, ``[1, all patches, vision_hidden_size]``, its blocks
``transformer.layers`` (``attention``, ``feed_forward``, ``attention_norm``,
``ffn_norm``), one attention call under a block-diagonal mask. The projector
(``multi_modal_projector``) reads the tower's hidden state at
``vision_feature_layer`` (the last block by default; the tower has no final
norm) without the leading 1, ``[all patches, vision_hidden_size]``, with the
processor's ``image_sizes``; it normalises it, merges each
``spatial_merge_size`` x ``spatial_merge_size`` square of patches into one
(``patch_merger``) and maps it to the text width, so an image of ``h x w``
pixels gives ``(h // (patch_size * spatial_merge_size)) * (w // (patch_size *
spatial_merge_size))`` image tokens, in raster order over the merged grid.
"""

from __future__ import annotations

from transformers.models.mistral3.modeling_mistral3 import Mistral3Model
from transformers.models.pixtral.modeling_pixtral import (
    PixtralAttention,
    PixtralAttentionLayer,
    PixtralMLP,
    PixtralVisionModel,
)

from ..pixtral import PixtralVision, PixtralVisionAttention
from ..vision import ImageScatter, VisionLayer, VisionMlp
from . import Family

#: The Pixtral tower's native names under the standard ones (relative to the tower).
PIXTRAL_RENAME = {
    "transformer.layers": "layers",
    "patch_conv": "patch_embed",
    "attention": "self_attn",
    "feed_forward": "mlp",
    "attention_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}

#: The Pixtral tower's envoys.
PIXTRAL_ENVOYS = {
    PixtralVisionModel: PixtralVision,
    PixtralAttentionLayer: VisionLayer,
    PixtralAttention: PixtralVisionAttention,
    PixtralMLP: VisionMlp,
}

RENAME = {
    "model.language_model.embed_tokens": "embed_tokens",
    "model.language_model.layers": "layers",
    "model.language_model.norm": "norm",
    "model.vision_tower": "vision",
    "model.multi_modal_projector": "projector",
    **PIXTRAL_RENAME,
}

ENVOYS = {Mistral3Model: ImageScatter, **PIXTRAL_ENVOYS}

FAMILY = Family("mistral3", RENAME, ENVOYS, "model.language_model.layers")
