"""EXAONE 4.5 (model_type exaone4_5): Qwen2.5-VL's windowed ViT, with grouped key-value heads, on an EXAONE 4.0 text
model whose blocks norm each sublayer's output and nothing before it.

``Exaone4_5_Model.forward`` scatters the merged image features into the token
embeddings (``inputs_embeds_masked_scatter_0``, argument 1; ``_1`` is video,
left as it is). The tower (``model.visual``, a `QwenVision`) is Qwen2.5-VL's
forward to the names: packed, each image's patches in merge-block order,
permuted into attention windows at entry (``vision.window_index``), its blocks
``blocks`` (``attn``, ``mlp``, ``norm1``, ``norm2``) attending per window, or
per image on ``fullatt_block_indexes``, one kernel call each (under eager,
``attention_scores`` and ``attention_probabilities`` hold each call's pattern
on the diagonal of one tensor, in window order: `envoys.towers.per_image`), no
final norm, its merger (``merger``, the
projector) inside it, merge-block order restored after the merger. Its
attention projects queries, keys and values with one fused ``qkv`` and has
fewer key-value heads than query heads (``num_key_value_heads``), so
``attention_keys`` and ``attention_values`` are ``[1, key_value_heads,
patches, head_dim]``. The text blocks (EXAONE 4.0's) add
``post_attention_layernorm(self_attn(x))`` and
``post_feedforward_layernorm(mlp(h))``, with no norm before either sublayer:
the sandwich envoys (`envoys.blocks.sandwich`) serve ``attention_output`` and
``mlp_output`` at those norms; blocks alternate sliding-window and global
attention (``layer_types``).
"""

from __future__ import annotations

from transformers.models.exaone4.modeling_exaone4 import Exaone4Attention, Exaone4DecoderLayer, Exaone4MLP
from transformers.models.exaone4_5.modeling_exaone4_5 import (
    Exaone4_5_MLP,
    Exaone4_5_VisionAttention,
    Exaone4_5_VisionBlock,
    Exaone4_5_VisionModel,
)

from ..blocks.sandwich import SandwichAttention, SandwichLayer, SandwichMlp
from ..towers.qwen import QWEN_GRIDS, QWEN_VIT_RENAME, QwenVision, QwenVisionAttention
from ..vision.tower import PackedVisionLayer, PackedVisionMlp
from . import Family

RENAME = dict(QWEN_VIT_RENAME)

ENVOYS = {
    Exaone4_5_VisionModel: QwenVision,
    Exaone4_5_VisionBlock: PackedVisionLayer,
    Exaone4_5_VisionAttention: QwenVisionAttention,
    Exaone4_5_MLP: PackedVisionMlp,
    Exaone4DecoderLayer: SandwichLayer,
    Exaone4Attention: SandwichAttention,
    Exaone4MLP: SandwichMlp,
}

FAMILY = Family("exaone4_5", RENAME, ENVOYS, "model.language_model.layers", grid_layout=QWEN_GRIDS)
