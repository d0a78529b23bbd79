# rule ovis2_5.vision-windows: the tower's window index (the permutation into windows is an inline indexing): item 0 of the call
# transformers.models.ovis2_5.modeling_ovis2_5:Ovis2_5VisionModel.forward
# transformers/models/ovis2_5/modeling_ovis2_5.py
# sites: get_vision_window_index_0

@merge_with_config_defaults
@capture_outputs(tie_last_hidden_states=False)
@auto_docstring
def forward(
    self,
    pixel_values: torch.FloatTensor,
    grid_thw: torch.LongTensor,
    **kwargs: Unpack[TransformersKwargs],
) -> tuple | BaseModelOutputWithPooling:
    r"""
    grid_thw (`torch.LongTensor` of shape `(num_images_or_videos, 3)`):
        Temporal, height, and width patch-grid dimensions for each packed image or video.
    """
    # Ovis feeds embeddings to the encoder without Muse's input LayerNorm.
    hidden_states = self.embeddings(pixel_values, grid_thw, **kwargs)
    spatial_merge_unit = self.spatial_merge_size**2
    window_index, cu_window_seqlens = __vlm_site__("get_vision_window_index_0", get_vision_window_index,
        grid_thw,
        spatial_merge_size=self.spatial_merge_size,
        window_size=self.window_size,
        patch_size=self.patch_size,
        kwargs=kwargs,
    )
    cu_seqlens, max_seqlen = get_vision_attention_seqlens(grid_thw, self.config, kwargs=kwargs)
    max_window_seqlen = get_max_seqlen(
        cu_window_seqlens, self.config, kwargs=kwargs, kwarg_name="max_window_seqlen"
    )

    sequence_length = hidden_states.shape[0]
    hidden_states = hidden_states.reshape(sequence_length // spatial_merge_unit, spatial_merge_unit, -1)
    hidden_states = hidden_states[window_index].reshape(sequence_length, -1)

    # Ovis uses these RoPE coordinates without Muse's axis flip or offset.
    position_ids = get_vision_position_ids(grid_thw, self.spatial_merge_size, kwargs=kwargs)
    position_ids = position_ids.reshape(sequence_length // spatial_merge_unit, spatial_merge_unit, -1)
    position_ids = position_ids[window_index].reshape(sequence_length, -1)
    position_embeddings = self.rotary_emb(hidden_states, position_ids)

    cu_seqlens_mapping = {
        "full_attention": (cu_seqlens, max_seqlen),
        "window_attention": (cu_window_seqlens, max_window_seqlen),
    }
    for layer_index, encoder_layer in enumerate(self.layers):
        layer_cu_seqlens, layer_max_seqlen = cu_seqlens_mapping[self.config.layer_types[layer_index]]
        hidden_states = encoder_layer(
            hidden_states,
            cu_seqlens=layer_cu_seqlens,
            position_embeddings=position_embeddings,
            max_seqlen=layer_max_seqlen,
            **kwargs,
        )

    # Keep one feature row per patch; the visual tokenizer performs spatial merging later.
    reverse_indices = torch.argsort(window_index)
    hidden_states = hidden_states.reshape(sequence_length // spatial_merge_unit, spatial_merge_unit, -1)
    pre_layernorm_hidden_state = hidden_states[reverse_indices].reshape(sequence_length, -1)
    last_hidden_state = self.post_layernorm(pre_layernorm_hidden_state)
    return BaseModelOutputWithPooling(last_hidden_state=last_hidden_state)
