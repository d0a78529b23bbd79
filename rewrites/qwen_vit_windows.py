"""Qwen2.5-VL's window order: where the tower permutes its stream into attention windows.

``Qwen2_5_VisionTransformerPretrainedModel.forward`` computes ``window_index``
(which merge unit of ``spatial_merge_size**2`` consecutive patches goes
where, over every image of the call) and permutes the patch embeddings with
``self.permute_input_for_window_attn(hidden_states, window_index,
seq_len=...)`` (``self_permute_input_for_window_attn_0``) before the first
block, then the rotary cos and sin with the same call inside a generator
(``self_permute_input_for_window_attn_1``, fired twice). Every block, the
tower's ``last_hidden_state`` and the merger's output are in window order; the
forward restores merge-block order after the merger with
``torch.argsort(window_index)``.

Before transformers 5.17 the tower permutes inline
(``hidden_states[window_index, :, :]``, an indexing, not a call), so the
variants expose the call that computes the index instead, whose item 0 is the
same ``window_index``, served as `INDEX_SITE`: ``get_vision_window_index(...)``
from 5.9 (`INLINE_FROM_5_9`, called before the patch embedding) and
``self.get_window_index(grid_thw)`` before (`INLINE_BEFORE_5_9`, after it).
"""

from instrument import Rule, Variant

#: The tower's permutation of its stream into windows: argument 1 is the window index (occurrence 0; the two
#: later calls permute the rotary cos and sin).
WINDOW_SITE = "self_permute_input_for_window_attn_0"
#: The call computing the window index, on releases that permute inline: its output's item 0 is the index.
INDEX_SITE = "get_vision_window_index_0"

INLINE_FROM_5_9 = Variant(
    ">=5.9,<5.17",
    sites={"get_vision_window_index": (INDEX_SITE,)},
    note="the permutation into windows is an inline indexing; the index is item 0 of get_vision_window_index(...), "
         "called before the patch embedding",
)

INLINE_BEFORE_5_9 = Variant(
    "<5.9",
    sites={"self.get_window_index": ("self_get_window_index_0",)},
    serve_as={"self_get_window_index_0": INDEX_SITE},
    note="the permutation into windows is an inline indexing; the index is item 0 of self.get_window_index(grid_thw)",
)

RULES = (
    Rule(
        "qwen2_5_vl.vision-windows",
        "transformers.models.qwen2_5_vl.modeling_qwen2_5_vl:Qwen2_5_VisionTransformerPretrainedModel.forward",
        {
            "self.permute_input_for_window_attn": (WINDOW_SITE, "self_permute_input_for_window_attn_1"),
        },
        "the tower's permutation into attention windows: argument 1 is the window index",
        variants=(INLINE_FROM_5_9, INLINE_BEFORE_5_9),
    ),
    Rule(
        "exaone4_5.vision-windows", "transformers.models.exaone4_5.modeling_exaone4_5:Exaone4_5_VisionModel.forward",
        {"self.permute_input_for_window_attn": (WINDOW_SITE, "self_permute_input_for_window_attn_1")},
        "the tower's permutation into attention windows (Qwen2.5-VL's forward): argument 1 is the window index",
    ),
    Rule(
        "qwen2_5_omni.vision-windows",
        "transformers.models.qwen2_5_omni.modeling_qwen2_5_omni:Qwen2_5OmniVisionEncoder.forward",
        {"self.permute_input_for_window_attn": (WINDOW_SITE, "self_permute_input_for_window_attn_1")},
        "the tower's permutation into attention windows (Qwen2.5-VL's forward): argument 1 is the window index",
    ),
    Rule(
        "muse_glimmer.vision-windows",
        "transformers.models.muse_glimmer.modeling_muse_glimmer:MuseGlimmerVisionModel.forward",
        {"get_vision_window_index": (INDEX_SITE,)},
        "the Muse tower's window index (patch by patch; the permutation is an inline indexing): item 0 of the call",
    ),
    Rule(
        "ovis2_5.vision-windows",
        "transformers.models.ovis2_5.modeling_ovis2_5:Ovis2_5VisionModel.forward",
        {"get_vision_window_index": (INDEX_SITE,)},
        "the Ovis2.5 tower's window index (merge unit by merge unit, computed after the patch embedding; the "
        "permutation is an inline indexing): item 0 of the call",
    ),
)
