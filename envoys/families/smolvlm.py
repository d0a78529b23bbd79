"""SmolVLM (model_type smolvlm): Idefics 3's tiled tower and pixel-shuffle connector, scattering in its own forward.

``SmolVLMModel.forward`` scatters the projected features into the token
embeddings itself (``inputs_embeds.masked_scatter``,
``inputs_embeds_masked_scatter_0``, argument 1), with no helper, unlike
Idefics 3. The tower, its tiles and the connector are `envoys.idefics`
(`TiledVision`); the text model is a Llama.
"""

from __future__ import annotations

from transformers.models.smolvlm.modeling_smolvlm import (
    SmolVLMEncoderLayer,
    SmolVLMModel,
    SmolVLMVisionAttention,
    SmolVLMVisionMLP,
    SmolVLMVisionTransformer,
)

from ..idefics import TEXT_LAYERS, TILED_RENAME, TiledVision
from ..vision import ImageScatter, VisionAttention, VisionLayer, VisionMlp
from . import Family

RENAME = dict(TILED_RENAME)

ENVOYS = {
    SmolVLMModel: ImageScatter,
    SmolVLMVisionTransformer: TiledVision,
    SmolVLMEncoderLayer: VisionLayer,
    SmolVLMVisionAttention: VisionAttention,
    SmolVLMVisionMLP: VisionMlp,
}

FAMILY = Family("smolvlm", RENAME, ENVOYS, TEXT_LAYERS)
