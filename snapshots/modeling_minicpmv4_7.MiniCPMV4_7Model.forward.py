# rule minicpmv4_7.image-scatter: image (_0) and video (_1) features scattered into the embeddings
# transformers.models.minicpmv4_7.modeling_minicpmv4_7:MiniCPMV4_7Model.forward
# transformers/models/minicpmv4_7/modeling_minicpmv4_7.py
# sites: inputs_embeds_masked_scatter_0, inputs_embeds_masked_scatter_1

@can_return_tuple
@auto_docstring
@deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
def forward(
    self,
    input_ids: torch.LongTensor | None = None,
    pixel_values: torch.Tensor | None = None,
    target_sizes: torch.IntTensor | None = None,
    pixel_values_videos: torch.Tensor | None = None,
    target_sizes_videos: torch.IntTensor | None = None,
    attention_mask: torch.Tensor | None = None,
    position_ids: torch.LongTensor | None = None,
    cache: list[torch.Tensor] | None = None,
    inputs_embeds: torch.Tensor | None = None,
    use_cache: bool | None = None,
    downsample_mode: str | None = None,
    mm_token_type_ids: torch.IntTensor | None = None,
    mm_encoder_outputs: dict[str, BaseModelOutputWithPooling] | None = None,
    **kwargs: Unpack[TransformersKwargs],
) -> tuple | MultimodalBaseModelOutputWithPast:
    r"""
    pixel_values (`torch.Tensor`, *optional*):
        Pixel value patches for images, NaViT-packed.
    target_sizes (`torch.IntTensor`, *optional*):
        Height and width (in patches) for each image.
    pixel_values_videos (`torch.Tensor`, *optional*):
        Pixel value patches for video frames, NaViT-packed.
    target_sizes_videos (`torch.IntTensor`, *optional*):
        Height and width (in patches) for each video frame.
    downsample_mode (`str`, *optional*):
        `"4x"` keeps 4x more visual tokens; default `"16x"` applies full merge.
    """
    if (pixel_values is not None or pixel_values_videos is not None) and mm_encoder_outputs is not None:
        raise ValueError(
            "You cannot specify both pixel_values/pixel_values_videos and mm_encoder_outputs at the same time"
        )

    if inputs_embeds is None:
        inputs_embeds = self.get_input_embeddings()(input_ids)

    mm_encoder_outputs = mm_encoder_outputs if mm_encoder_outputs is not None else {}
    if (
        mm_encoder_outputs.get("image") is None
        and pixel_values is not None
        and self.config.image_token_id is not None
    ):
        mm_encoder_outputs["image"] = self.get_image_features(
            pixel_values[:1], target_sizes, downsample_mode=downsample_mode
        )

    if (
        mm_encoder_outputs.get("video") is None
        and pixel_values_videos is not None
        and self.config.video_token_id is not None
    ):
        mm_encoder_outputs["video"] = self.get_video_features(
            pixel_values_videos[:1], target_sizes_videos, downsample_mode=downsample_mode
        )

    if mm_encoder_outputs.get("image") is not None:
        image_features = torch.cat(mm_encoder_outputs["image"].pooler_output, dim=0).to(
            device=inputs_embeds.device, dtype=inputs_embeds.dtype
        )
        mask = self.get_placeholder_mask(input_ids, inputs_embeds, image_features, self.config.image_token_id)
        inputs_embeds = __vlm_site__("inputs_embeds_masked_scatter_0", inputs_embeds.masked_scatter, mask, image_features)

    if mm_encoder_outputs.get("video") is not None:
        video_features = torch.cat(mm_encoder_outputs["video"].pooler_output, dim=0).to(
            device=inputs_embeds.device, dtype=inputs_embeds.dtype
        )
        mask = self.get_placeholder_mask(input_ids, inputs_embeds, video_features, self.config.video_token_id)
        inputs_embeds = __vlm_site__("inputs_embeds_masked_scatter_1", inputs_embeds.masked_scatter, mask, video_features)

    if position_ids is None:
        position_ids = self.compute_3d_position_ids(
            input_ids=input_ids,
            inputs_embeds=inputs_embeds,
            attention_mask=attention_mask,
            cache=cache,
            target_sizes=target_sizes,
            target_sizes_videos=target_sizes_videos,
            mm_token_type_ids=mm_token_type_ids,
            downsample_mode=downsample_mode,
        )

    output = self.language_model(
        attention_mask=attention_mask,
        position_ids=position_ids,
        cache=cache,
        inputs_embeds=inputs_embeds,
        use_cache=use_cache,
        **kwargs,
    )
    return MultimodalBaseModelOutputWithPast(
        **output, image_outputs=mm_encoder_outputs.get("image"), video_outputs=mm_encoder_outputs.get("video")
    )
