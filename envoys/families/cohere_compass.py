"""Cohere Compass (model_type cohere_compass, North Vision): Qwen3-VL's tower and DeepStack on a Cohere 2-style
parallel text model.

``transformers.models.cohere_compass`` is Qwen3-VL's wrapper, tower and
DeepStack loop under new class names, with Cohere 2's blocks as the text
model; so the vision side is served as Qwen3-VL's is
(`envoys.families.qwen3_vl`), the text blocks as Cohere 2's are
(`envoys.towers.cohere`):

- ``CohereCompassModel.forward`` scatters the merged image features
  (``inputs_embeds_masked_scatter_0``, argument 1, found; ``_1`` is video).
- The tower (``model.visual``, ``vision``; a `QwenVision`: packed, a learned
  ``pos_embed`` added after ``patch_embed``, its merger ``projector`` inside,
  no final norm) attends once per image, so under eager its blocks'
  ``attention_scores`` and ``attention_probabilities`` hold each image's
  pattern on the diagonal of one tensor, ``kernel_calls[k]`` is image ``k``'s
  call alone (`envoys.towers.per_image`), and the queries and keys are served
  whole (``cohere_compass.vision-attention``). It taps the blocks in
  ``vision_config.deepstack_visual_indexes``, each merged by
  ``vision.deepstack_merger_list[k]`` (native path), and the text model adds
  merger k's output at the image positions after text block k
  (``layers[k].deepstack_output``, at occurrence k of the text model's
  ``self__deepstack_process_0``: ``cohere_compass.deepstack``).
- The text blocks (``model.language_model.layers``) are parallel
  (`ParallelDeepstackLayer`): one LayerNorm (``input_layernorm``, which
  ``post_attention_layernorm`` answers as), the attention and the MLP both
  reading its output, both added to the block's input, so ``layer_input +
  attention_output + mlp_output == layer_output``. The attention applies
  M-RoPE on the layer types whose ``rope_parameters`` name one and no position
  embedding on the others (None); sliding layers see ``sliding_window`` keys.
  The logits are the head's output times ``text_config.logit_scale``.

Unavailable, as on Qwen3-VL: ``image_size`` (any resolution: ``image_grid_thw``
says each image's), ``window_index`` (no windows), ``deepstack_output`` on the
blocks past the taps. Videos are scattered (``inputs_embeds_masked_scatter_1``)
but no video value is served yet.
"""

from __future__ import annotations

from transformers.models.cohere_compass.modeling_cohere_compass import (
    CohereCompassDecoderLayer,
    CohereCompassVisionAttention,
    CohereCompassVisionBlock,
    CohereCompassVisionMLP,
    CohereCompassVisionModel,
)

from ..blocks.deepstack import DeepstackLayer
from ..blocks.parallel import ParallelLayer
from ..towers.qwen import QWEN_GRIDS, QwenVision, QwenVisionAttention
from ..vision.tower import PackedVisionLayer, PackedVisionMlp
from . import Family
from .qwen3_vl import RENAME as QWEN3_VL_RENAME


class ParallelDeepstackLayer(DeepstackLayer, ParallelLayer):
    """A Cohere Compass text block: parallel (`ParallelLayer`), and the DeepStack feature added after it
    (`DeepstackLayer`'s ``deepstack_output``)."""


RENAME = dict(QWEN3_VL_RENAME)

ENVOYS = {
    CohereCompassDecoderLayer: ParallelDeepstackLayer,
    CohereCompassVisionModel: QwenVision,
    CohereCompassVisionBlock: PackedVisionLayer,
    CohereCompassVisionAttention: QwenVisionAttention,
    CohereCompassVisionMLP: PackedVisionMlp,
}

FAMILY = Family("cohere_compass", RENAME, ENVOYS, "model.language_model.layers", grid_layout=QWEN_GRIDS)
