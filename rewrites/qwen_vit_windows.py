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
"""

from instrument import Rule

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
    ),
)
