"""SmolVLM (model_type smolvlm): Idefics 3's tiled tower and pixel-shuffle connector, scattering in its own forward.

``SmolVLMModel.forward`` scatters the projected features into the token
embeddings itself (``inputs_embeds.masked_scatter``,
``inputs_embeds_masked_scatter_0``, argument 1), with no helper, unlike
Idefics 3. Before transformers 5.21 it scattered in a helper, as Idefics 3
does (``self.inputs_merger(..., image_hidden_states=...)``,
``self_inputs_merger_0``; `SmolVLMScatter` serves whichever the installed
release has). The tower, its tiles and the connector are `envoys.towers.idefics`
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

from instrument import installed
from rewrites.image_scatter import INPUTS_MERGER, SMOLVLM_BEFORE_5_21, Scatter

from ..core.values import Argument
from ..towers.idefics import TEXT_LAYERS, TILED_RENAME, TiledGrids, TiledVision
from ..vision.scatter_host import ImageScatter, features_argument
from ..vision.tower import VisionAttention, VisionLayer, VisionMlp
from . import Family

RENAME = dict(TILED_RENAME)


class SmolVLMScatter(ImageScatter):
    """``SmolVLMModel``: its own scatter call where the installed release has it, else (before 5.21) the helper's,
    as Idefics 3's (`INPUTS_MERGER`)."""

    def _through_helper(self) -> bool:
        return any(INPUTS_MERGER.site in rule.site_names for rule in installed(self._module).values())

    @property
    def scatter_operation(self) -> str:
        return INPUTS_MERGER.site if self._through_helper() else super().scatter_operation

    @property
    def scatter_argument(self) -> Argument:
        return features_argument(INPUTS_MERGER) if self._through_helper() else super().scatter_argument


ENVOYS = {
    SmolVLMModel: SmolVLMScatter,
    SmolVLMVisionTransformer: TiledVision,
    SmolVLMEncoderLayer: VisionLayer,
    SmolVLMVisionAttention: VisionAttention,
    SmolVLMVisionMLP: VisionMlp,
}

FAMILY = Family("smolvlm", RENAME, ENVOYS, TEXT_LAYERS, scatter=Scatter(variants=(SMOLVLM_BEFORE_5_21,)),
                grid_layout=TiledGrids())
