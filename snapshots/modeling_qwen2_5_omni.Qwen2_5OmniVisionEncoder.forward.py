# rule qwen2_5_omni.vision-windows: the tower's permutation into attention windows: argument 1 is the window index
# transformers.models.qwen2_5_omni.modeling_qwen2_5_omni:Qwen2_5OmniVisionEncoder.forward
# transformers/models/qwen2_5_omni/modeling_qwen2_5_omni.py
# sites: self_permute_input_for_window_attn_0, self_permute_input_for_window_attn_1

@merge_with_config_defaults
@capture_outputs
def forward(
    self, hidden_states: torch.Tensor, grid_thw: torch.Tensor, **kwargs: Unpack[TransformersKwargs]
) -> tuple | BaseModelOutputWithPooling:
    """
    Args:
        hidden_states (`torch.Tensor` of shape `(seq_len, hidden_size)`):
            The final hidden states of the model.
        grid_thw (`torch.Tensor` of shape `(num_images_or_videos, 3)`):
            The temporal, height and width of feature shape of each image in LLM.

    Returns:
        `torch.Tensor`: hidden_states.
    """
    position_ids = get_vision_position_ids(grid_thw, self.spatial_merge_size, kwargs=kwargs)
    cu_seqlens, max_seqlen = get_vision_attention_seqlens(grid_thw, self.config, kwargs=kwargs)
    window_index, cu_window_seqlens = get_vision_window_index(
        grid_thw,
        spatial_merge_size=self.spatial_merge_size,
        window_size=self.window_size,
        patch_size=self.patch_size,
        kwargs=kwargs,
    )
    max_window_seqlen = get_max_seqlen(
        cu_window_seqlens, self.config, kwargs=kwargs, kwarg_name="max_window_seqlen"
    )

    hidden_states = self.patch_embed(hidden_states)

    reverse_indices = torch.argsort(window_index)
    seq_len, _ = hidden_states.size()
    hidden_states = __vlm_site__("self_permute_input_for_window_attn_0", self.permute_input_for_window_attn, hidden_states, window_index, seq_len=seq_len)

    position_embeddings = self.rotary_pos_emb(hidden_states, position_ids)
    position_embeddings = tuple(
        __vlm_site__("self_permute_input_for_window_attn_1", self.permute_input_for_window_attn, freq, window_index, seq_len=seq_len) for freq in position_embeddings
    )

    # Modification here
    for layer_num, blk in enumerate(self.blocks):
        if layer_num in self.fullatt_block_indexes:
            cu_seqlens_now = cu_seqlens
            max_seqlen_now = max_seqlen
        else:
            cu_seqlens_now = cu_window_seqlens
            max_seqlen_now = max_window_seqlen

        hidden_states = blk(
            hidden_states,
            cu_seqlens=cu_seqlens_now,
            max_seqlen=max_seqlen_now,
            position_embeddings=position_embeddings,
            **kwargs,
        )

    merged_hidden_states = self.merger(hidden_states)
    merged_hidden_states = merged_hidden_states[reverse_indices, :]

    return BaseModelOutputWithPooling(
        last_hidden_state=hidden_states,
        pooler_output=merged_hidden_states,
    )
