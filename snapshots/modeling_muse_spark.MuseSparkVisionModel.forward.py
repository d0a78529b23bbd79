# rule muse_spark.vision-windows: the tower's window index (the permutation into windows is an inline indexing): item 0 of the call
# transformers.models.muse_spark.modeling_muse_spark:MuseSparkVisionModel.forward
# transformers/models/muse_spark/modeling_muse_spark.py
# sites: get_vision_window_index_0

@merge_with_config_defaults
@capture_outputs
@auto_docstring
def forward(
    self,
    pixel_values: torch.Tensor,
    grid_thw: torch.LongTensor,
    **kwargs: Unpack[TransformersKwargs],
) -> BaseModelOutputWithPooling:
    r"""
    grid_thw (`torch.LongTensor` of shape `(num_images_or_videos, 3)`):
        The temporal, height and width patch-grid dimensions for each packed image or video.
    """
    cu_seqlens = get_vision_cu_seqlens(grid_thw, kwargs=kwargs)
    # assumes pos_emb_height==pos_emb_width, adapt to non-square if needed
    window_index, cu_window_seqlens = __vlm_site__("get_vision_window_index_0", get_vision_window_index,
        grid_thw,
        spatial_merge_size=self.spatial_merge_size,
        window_size=self.window_size,
        patch_size=self.patch_size,
        kwargs=kwargs,
    )

    inputs_embeds = self.patch_embedder(pixel_values, grid_thw, **kwargs)
    hidden_states = self.ln_pre(inputs_embeds)
    hidden_states = hidden_states[window_index, :]

    # Add `1` because ref implementation's position offset is `1`!
    position_ids = get_vision_position_ids(grid_thw, spatial_merge_size=self.spatial_merge_size, kwargs=kwargs)
    position_ids = position_ids.flip(-1) + 1
    position_ids = position_ids[window_index, :]
    position_embeddings = self.rotary_emb(hidden_states, position_ids)

    cu_seqlens_mapping = {
        "full_attention": cu_seqlens,
        "window_attention": cu_window_seqlens,
    }
    for i, block in enumerate(self.layers):
        hidden_states = block(
            hidden_states,
            position_embeddings=position_embeddings,
            cu_seqlens=cu_seqlens_mapping[self.config.layer_types[i]],
        )

    reverse_indices = torch.argsort(window_index)
    hidden_states = hidden_states[reverse_indices, :]

    hidden_states = self.ln_post(hidden_states)
    hidden_states = self.pixel_shuffle(hidden_states, grid_thw, **kwargs)
    return BaseModelOutputWithPooling(last_hidden_state=hidden_states)
