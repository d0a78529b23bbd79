# rule nemotron_h_omni.image-scatter: the root scatters image (_0), video (_1) and audio (_2) features in its own forward
# transformers.models.nemotron_h_omni.modeling_nemotron_h_omni:NemotronH_Omni_Reasoning_V3.forward
# transformers/models/nemotron_h_omni/modeling_nemotron_h_omni.py
# sites: inputs_embeds_masked_scatter_0, inputs_embeds_masked_scatter_1, inputs_embeds_masked_scatter_2

@can_return_tuple
@auto_docstring
def forward(
    self,
    input_ids: torch.LongTensor | None = None,
    pixel_values: torch.Tensor | None = None,
    image_grid_hw: torch.LongTensor | None = None,
    pixel_values_videos: torch.Tensor | None = None,
    input_features: torch.Tensor | None = None,
    input_features_mask: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
    position_ids: torch.LongTensor | None = None,
    past_key_values: Cache | None = None,
    labels: torch.LongTensor | None = None,
    inputs_embeds: torch.Tensor | None = None,
    use_cache: bool | None = None,
    mm_encoder_outputs: dict[str, BaseModelOutputWithPooling] | None = None,
    **kwargs: Unpack[TransformersKwargs],
) -> CausalLMOutputWithPast:
    r"""
    pixel_values (`torch.Tensor` of shape `(total_patches, num_channels * patch_size**2)`, *optional*):
        Flattened patches of all images, concatenated, as returned by the image processor.
    image_grid_hw (`torch.LongTensor` of shape `(num_images, 2)`, *optional*):
        Patch grid `(height, width)` of each image in `pixel_values`.
    input_features (`torch.Tensor` of shape `(batch_size, num_frames, num_mel_bins)`, *optional*):
        Mel features produced by the processor, encoded and scattered onto the audio
        placeholder tokens.
    input_features_mask (`torch.Tensor` of shape `(batch_size, num_frames)`, *optional*):
        Mask marking the real mel frames of each padded clip.
    """
    if (pixel_values is not None or pixel_values_videos is not None) and mm_encoder_outputs is not None:
        raise ValueError(
            "You cannot specify both pixel_values/pixel_values_videos and mm_encoder_outputs at the same time"
        )

    if inputs_embeds is None:
        inputs_embeds = self.get_input_embeddings()(input_ids)

    mm_encoder_outputs = mm_encoder_outputs if mm_encoder_outputs is not None else {}
    if mm_encoder_outputs.get("image") is None and pixel_values is not None:
        mm_encoder_outputs["image"] = self.get_image_features(
            pixel_values, image_grid_hw, return_dict=True, **kwargs
        )

    if mm_encoder_outputs.get("video") is None and pixel_values_videos is not None:
        mm_encoder_outputs["video"] = self.get_video_features(pixel_values_videos, return_dict=True, **kwargs)

    if mm_encoder_outputs.get("image") is not None:
        image_embeds = torch.cat(mm_encoder_outputs["image"].pooler_output, dim=0).to(
            inputs_embeds.device, inputs_embeds.dtype
        )
        image_mask = self.get_placeholder_mask(input_ids, inputs_embeds, image_embeds, self.image_token_id)
        inputs_embeds = __vlm_site__("inputs_embeds_masked_scatter_0", inputs_embeds.masked_scatter, image_mask, image_embeds)

    if mm_encoder_outputs.get("video") is not None:
        video_embeds = torch.cat(mm_encoder_outputs["video"].pooler_output, dim=0).to(
            inputs_embeds.device, inputs_embeds.dtype
        )
        video_mask = self.get_placeholder_mask(input_ids, inputs_embeds, video_embeds, self.image_token_id)
        inputs_embeds = __vlm_site__("inputs_embeds_masked_scatter_1", inputs_embeds.masked_scatter, video_mask, video_embeds)

        if self.video_pruning_rate > 0:
            h = w = int(video_embeds.shape[1] ** 0.5)
            evs_mask = compute_retention_mask(
                video_embeds=video_embeds,
                thw=(video_embeds.shape[0], h, w),
                spatial_merge_size=1,
                q=self.video_pruning_rate,
            )
            retention_mask = torch.ones_like(input_ids, dtype=torch.bool)
            retention_mask[input_ids == self.image_token_id] = evs_mask.view(-1)
            inputs_embeds = inputs_embeds[retention_mask].unsqueeze(0)
            if attention_mask is not None:
                attention_mask = attention_mask[retention_mask].unsqueeze(0)
            input_ids = input_ids[retention_mask].unsqueeze(0)

    if input_features is not None and self.audio_tower is not None and input_ids is not None:
        audio_embeds = self.get_audio_features(input_features, input_features_mask).pooler_output
        audio_embeds = audio_embeds.to(inputs_embeds.device, inputs_embeds.dtype)
        audio_mask = self.get_placeholder_mask(input_ids, inputs_embeds, audio_embeds, self.audio_token_id)
        inputs_embeds = __vlm_site__("inputs_embeds_masked_scatter_2", inputs_embeds.masked_scatter, audio_mask, audio_embeds)

    outputs = self.language_model(
        inputs_embeds=inputs_embeds,
        attention_mask=attention_mask,
        position_ids=position_ids,
        past_key_values=past_key_values,
        use_cache=use_cache,
        **kwargs,
    )
    logits = outputs.logits

    loss = None
    if labels is not None:
        loss = self.loss_function(
            logits=logits, labels=labels, vocab_size=self.config.text_config.vocab_size, **kwargs
        )

    return CausalLMOutputWithPast(
        loss=loss,
        logits=logits,
        past_key_values=outputs.past_key_values,
        hidden_states=outputs.hidden_states,
        attentions=outputs.attentions,
    )
