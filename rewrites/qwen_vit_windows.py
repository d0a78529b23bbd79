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
(``hidden_states[window_index, :, :]``, an indexing, not a call) with the
index from ``get_vision_window_index(...)`` (5.x) or
``self.get_window_index(grid_thw)`` (4.57): there is no call whose argument
is the index, so on those releases the rule is unavailable, with the reason
(`BEFORE_5_17`), and so is ``vision.window_index``.
"""

from instrument import Rule, Variant

BEFORE_5_17 = Variant(
    "<5.17",
    unavailable=(
        "before transformers 5.17 the Qwen2.5-VL tower permutes its stream into windows inline "
        "(hidden_states[window_index, :, :]), with no call to expose; the window order is not served on this "
        "release: upgrade transformers to 5.17 or later for vision.window_index"
    ),
    note="the permutation into windows is an inline indexing",
)

RULES = (
    Rule(
        "qwen2_5_vl.vision-windows",
        "transformers.models.qwen2_5_vl.modeling_qwen2_5_vl:Qwen2_5_VisionTransformerPretrainedModel.forward",
        {
            "self.permute_input_for_window_attn": (
                "self_permute_input_for_window_attn_0",
                "self_permute_input_for_window_attn_1",
            ),
        },
        ("qwen2_5_vl",),
        "the tower's permutation into attention windows: argument 1 is the window index",
        variants=(BEFORE_5_17,),
    ),
)
