"""Aria (model_type aria): Idefics 3's ViT on padded square images, a cross-attention projector, an MoE text model.

Read off ``transformers.models.aria.modeling_aria``:

- The processor resizes each image, keeping its aspect ratio, so that its
  longer side is ``max_image_size`` (980 unless a call asks for 490), pads it
  with zeros, bottom and right, to that square, and returns ``pixel_mask``
  (the real pixels). The host (``AriaModel``, the wrapper's inner model)
  turns the mask into a patch mask (a patch is real where any of its pixels
  is) and runs the tower (``model.vision_tower``, an
  ``Idefics3VisionTransformer``; blocks ``encoder.layers``; no CLS;
  ``post_layernorm``) once over every image: each image is a row of the
  tower's values, ``[images, patches, vision_hidden_size]``, the square's
  patches in raster order, the padded keys masked in every block.
- The projector (``model.multi_modal_projector``, an ``AriaProjector``,
  ``model.projector``) reads the tower's ``hidden_states[vision_feature_layer]``
  (-1: the last block's output, before ``post_layernorm``, so
  ``tower_output`` is computed and unused): ``projector_patch_to_query_dict``
  picks a query count by the image's patch count; that many learned queries
  cross-attend (``cross_attn``, a ``torch.nn.MultiheadAttention`` over the
  real patches) to each image's patches, then a layer norm and an MLP map
  them to the text width. So ``projector.output`` is ``[images, queries,
  hidden_size]`` and an image is ``queries`` image tokens whatever its size.
- The host scatters it with ``inputs_embeds.masked_scatter`` (found, as on
  every default host), flattened: ``vision.image_features`` is
  ``projector.output`` flattened over its leading axes.
- The text model (``model.language_model``, ``AriaTextModel``) is Llama's
  block with a sparse MLP: ``layers[i].mlp`` is the ``AriaTextMoELayer``
  (a top-k router ``mlp.router``, the routed ``mlp.experts``, always-on
  ``mlp.shared_experts``); its output, the routed experts' sum plus the
  shared experts', is the tensor the block adds to the stream, so
  ``mlp_output`` is it and ``input + attention_output + mlp_output ==
  layer_output`` holds as on a dense block. ``mlp.router_logits`` is the
  router's ``nn.functional.linear`` output, ``[tokens, experts]``, whose top
  ``moe_topk`` are the experts that run (`envoys.blocks.moe`).
- Grids (`envoys.towers.padded`): ``vision.patch_grid`` puts an image's real
  patches on its grid; ``token_grid`` is Unavailable, the queries being on
  no grid.
"""

from __future__ import annotations

from transformers.models.idefics3.modeling_idefics3 import (
    Idefics3EncoderLayer,
    Idefics3VisionAttention,
    Idefics3VisionMLP,
    Idefics3VisionTransformer,
)

from ..towers.encoder_names import SIGLIP_WRAPPER_RENAME
from ..towers.feature_layers import with_feature_layer_gradients
from ..towers.padded import PaddedImageGrids
from ..vision.tower import Vision, VisionAttention, VisionLayer, VisionMlp
from . import Family


class AriaVision(Vision):
    """Aria's tower: each image a row, ``[images, patches, vision_hidden_size]``, over the processor's padded square.

    ``image_size`` is that square's side (the vision config's, the
    processor's ``max_image_size``); an image's real patches are the rows
    its resized image reaches (the processor's ``pixel_mask``), the rest
    padding whose keys every block masks.
    """

    @property
    def queries(self) -> int:
        """Image tokens per image: the projector's query count for this tower's patch count
        (``projector_patch_to_query_dict``)."""
        return self.root.config.projector_patch_to_query_dict[(self.image_size // self.patch_size) ** 2]


RENAME = dict(SIGLIP_WRAPPER_RENAME)

#: ``tower_output`` (after ``post_layernorm``, which the projector does not read) has no gradient
#: (`envoys.towers.feature_layers`).
ENVOYS = with_feature_layer_gradients({
    Idefics3VisionTransformer: AriaVision,
    Idefics3EncoderLayer: VisionLayer,
    Idefics3VisionAttention: VisionAttention,
    Idefics3VisionMLP: VisionMlp,
})

#: The patch grid of each image's real patches; its image tokens, the projector's queries, have none.
GRIDS = PaddedImageGrids("pixel_mask", whole=False, tokens="the projector's learned queries")

FAMILY = Family("aria", RENAME, ENVOYS, "model.language_model.layers", text_model_types=("aria_text",),
                grid_layout=GRIDS)
