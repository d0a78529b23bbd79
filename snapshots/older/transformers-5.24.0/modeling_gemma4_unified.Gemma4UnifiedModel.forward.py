# rule gemma4_unified.image-scatter: image (_0), video (_1) and audio (_2) features scattered into the embeddings
# transformers.models.gemma4_unified.modeling_gemma4_unified:Gemma4UnifiedModel.forward
# transformers/models/gemma4_unified/modeling_gemma4_unified.py
# sites: inputs_embeds_masked_scatter_0, inputs_embeds_masked_scatter_1, inputs_embeds_masked_scatter_2

@merge_with_config_defaults
@can_return_tuple
@auto_docstring
@deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
def forward(
    self,
    input_ids: torch.LongTensor | None = None,
    pixel_values: torch.Tensor | None = None,
    pixel_values_videos: torch.Tensor | None = None,
    input_features: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
    input_features_mask: torch.Tensor | None = None,
    position_ids: torch.LongTensor | None = None,
    cache: Cache | None = None,
    mm_token_type_ids: torch.LongTensor | None = None,
    inputs_embeds: torch.Tensor | None = None,
    use_cache: bool | None = None,
    image_position_ids: torch.LongTensor | None = None,
    video_position_ids: torch.LongTensor | None = None,
    num_frames_per_video: torch.LongTensor | None = None,
    mm_encoder_outputs: dict[str, BaseModelOutputWithPooling] | None = None,
    **kwargs: Unpack[TransformersKwargs],
) -> Gemma4UnifiedModelOutputWithPast:
    r"""
    input_features_mask (`torch.Tensor` of shape `(num_images, seq_length)`):
        The attention mask for the input audio.
    image_position_ids (`torch.LongTensor` of shape `(batch_size, max_patches, 2)`, *optional*):
        2D patch position coordinates from the image processor, with `(-1, -1)` indicating padding.
        Passed through to the vision encoder for positional embedding computation.
    video_position_ids (`torch.LongTensor` of shape `(total_num_frames, max_patches, 2)`, *optional*):
        2D patch position coordinates from the video processor, with `(-1, -1)` indicating padding.
        Passed through to the vision encoder for positional embedding computation.
    num_frames_per_video (`torch.LongTensor` of shape `(num_videos,)`, *optional*):
        Number of frames belonging to each video. Required whenever `pixel_values_videos` is passed,
        since the frames of all videos are concatenated along a single axis.
    """
    if (input_ids is None) ^ (inputs_embeds is not None):
        raise ValueError("You must specify exactly one of input_ids or inputs_embeds")

    if (pixel_values is not None or pixel_values_videos is not None) and mm_encoder_outputs is not None:
        raise ValueError(
            "You cannot specify both pixel_values/pixel_values_videos and mm_encoder_outputs at the same time"
        )

    image_mask, video_mask, audio_mask = self.get_placeholder_mask(input_ids, inputs_embeds)
    multimodal_mask = image_mask | video_mask | audio_mask

    # Replace image id with PAD if the image token if OOV, to avoid index-errors
    llm_input_ids = None
    if inputs_embeds is None:
        llm_input_ids = input_ids.clone()
        llm_input_ids = torch.where(multimodal_mask, self.config.text_config.pad_token_id, llm_input_ids)
        inputs_embeds = self.get_input_embeddings()(llm_input_ids)

    # Merge text and images
    mm_encoder_outputs = mm_encoder_outputs if mm_encoder_outputs is not None else {}
    if mm_encoder_outputs.get("image") is None and pixel_values is not None:
        mm_encoder_outputs["image"] = self.get_image_features(pixel_values, image_position_ids, return_dict=True)

    if mm_encoder_outputs.get("image") is not None:
        image_features = torch.cat(mm_encoder_outputs["image"].pooler_output, dim=0).to(
            inputs_embeds.device, inputs_embeds.dtype
        )

        # Confirm the number of soft tokens from the vision tower matches the number of slots in the embeddings.
        n_image_tokens = image_mask.sum()
        image_mask = image_mask.unsqueeze(-1).expand_as(inputs_embeds).to(inputs_embeds.device)
        torch_compilable_check(
            inputs_embeds[image_mask].numel() == image_features.numel(),
            f"Image features and image tokens do not match, tokens: {n_image_tokens}, features:"
            f" {image_features.shape[0]}",
        )

        inputs_embeds = __vlm_site__("inputs_embeds_masked_scatter_0", inputs_embeds.masked_scatter,
            image_mask.to(inputs_embeds.device), image_features.to(inputs_embeds.device)
        )

    if mm_encoder_outputs.get("video") is None and pixel_values_videos is not None:
        mm_encoder_outputs["video"] = self.get_video_features(
            pixel_values_videos, video_position_ids, num_frames_per_video=num_frames_per_video, return_dict=True
        )

    if mm_encoder_outputs.get("video") is not None:
        video_features = torch.cat(mm_encoder_outputs["video"].pooler_output, dim=0).to(
            inputs_embeds.device, inputs_embeds.dtype
        )

        # Confirm the number of soft tokens from the vision tower matches the number of slots in the embeddings.
        n_video_tokens = video_mask.sum()
        video_mask = video_mask.unsqueeze(-1).expand_as(inputs_embeds).to(inputs_embeds.device)
        torch_compilable_check(
            inputs_embeds[video_mask].numel() == video_features.numel(),
            f"Video features and video tokens do not match, tokens: {n_video_tokens}, features:"
            f" {video_features.shape[0]}",
        )

        inputs_embeds = __vlm_site__("inputs_embeds_masked_scatter_1", inputs_embeds.masked_scatter,
            video_mask.to(inputs_embeds.device), video_features.to(inputs_embeds.device)
        )

    # Merge text and audio
    audio_outputs = None
    if input_features is not None and input_features_mask is not None:
        audio_output = self.get_audio_features(input_features, input_features_mask, return_dict=True)
        audio_features = audio_output.pooler_output.to(inputs_embeds.device, inputs_embeds.dtype)
        audio_mask_from_encoder = audio_output.attention_mask  # True = valid

        # Strip padding tokens: only keep real (non-padding) audio soft tokens.
        # audio_mask_from_encoder is True for valid positions, False for padding tokens.
        # This mirrors the vision encoder's padding stripping (see Gemma4UnifiedVisionEncoder.forward).
        audio_features = audio_features[audio_mask_from_encoder.to(audio_features.device)]

        n_audio_tokens = audio_mask.sum()
        audio_mask = audio_mask.unsqueeze(-1).expand_as(inputs_embeds).to(inputs_embeds.device)
        torch_compilable_check(
            inputs_embeds[audio_mask].numel() == audio_features.numel(),
            f"Audio features and audio tokens do not match, tokens: {n_audio_tokens}, features:"
            f" {audio_features.shape[0] * audio_features.shape[1]}",
        )

        inputs_embeds = __vlm_site__("inputs_embeds_masked_scatter_2", inputs_embeds.masked_scatter, audio_mask.to(inputs_embeds.device), audio_features)

    # It may already have been prepared by, e.g., `generate`
    if position_ids is None:
        past_seen_tokens = cache.get_seq_length() if cache is not None else 0
        position_ids = torch.arange(inputs_embeds.shape[1], device=inputs_embeds.device) + past_seen_tokens
        position_ids = position_ids.unsqueeze(0)

    if not isinstance(causal_mask_mapping := attention_mask, dict):
        mask_kwargs = {
            "config": self.config.get_text_config(),
            "inputs_embeds": inputs_embeds,
            "attention_mask": attention_mask,
            "cache": cache,
            "position_ids": position_ids,
        }

        # Larger Gemma 4 models use Gemma 3's bidirectional attention mask for vision inputs
        # Smaller Gemma models use a conventional casual attention mask
        if self.config.get_text_config().use_bidirectional_attention == "vision":
            block_sequence_ids = torch.full([*inputs_embeds.size()[:-1]], -1, device=inputs_embeds.device)
            if mm_token_type_ids is not None:
                block_sequence_ids = get_block_sequence_ids_for_mask(
                    mm_token_type_ids, device=inputs_embeds.device
                )

            mask_kwargs["block_sequence_ids"] = block_sequence_ids

        # Create the masks
        causal_mask_mapping = create_masks_for_generate(**mask_kwargs)

    outputs = self.language_model(
        attention_mask=causal_mask_mapping,
        position_ids=position_ids,
        cache=cache,
        inputs_embeds=inputs_embeds,
        use_cache=use_cache,
        return_dict=True,
        **kwargs,
    )

    return Gemma4UnifiedModelOutputWithPast(
        **outputs, image_outputs=mm_encoder_outputs.get("image"), audio_outputs=audio_outputs
    )
