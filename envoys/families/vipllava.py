"""VipLlava (model_type vipllava): a CLIP tower, a projector over several of its layers, a Llama text model.

LLaVA's shape: ``VipLlavaModel`` (the wrapper's inner model) scatters the
projected features into the token embeddings with
``inputs_embeds.masked_scatter`` (found, as on every default host), its tower
is CLIP (``model.vision_tower``: CLS first, no norm over the patches) and its
text model is LLaVA's. What differs is what the projector reads: the tower's
``hidden_states[k]`` for every ``k`` in ``vision_feature_layer`` (block ``k``'s
input; ``-1`` the last block's output), each without its CLS token, joined on
the feature axis, so ``projector.input`` is ``[images, patches,
len(vision_feature_layer) * vision_hidden_size]`` (layer-normed inside the
projector, ``projector_layernorm``, then two linear layers). Blocks past the
deepest layer it reads run unused: their values have no gradient
(`envoys.towers.feature_layers`). Each image is one CLIP tile, one image token a
patch, as LLaVA's grids place them.
"""

from __future__ import annotations

from ..towers.feature_layers import with_feature_layer_gradients
from . import Family
from .llava import CLIP_ENVOYS, RENAME, LlavaGrids

FAMILY = Family("vipllava", RENAME, with_feature_layer_gradients(CLIP_ENVOYS), "model.language_model.layers",
                grid_layout=LlavaGrids())
