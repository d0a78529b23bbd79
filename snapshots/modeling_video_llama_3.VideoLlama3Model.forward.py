# rule video_llama_3.image-scatter: image (_0) and video (_1) features scattered into the embeddings
# transformers.models.video_llama_3.modeling_video_llama_3:VideoLlama3Model.forward
# transformers/models/video_llama_3/modeling_video_llama_3.py
# sites: inputs_embeds_masked_scatter_0, inputs_embeds_masked_scatter_1

@can_return_tuple
@auto_docstring
@deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
def forward(
    self,
    input_ids: torch.LongTensor = None,
    attention_mask: torch.Tensor | None = None,
    position_ids: torch.LongTensor | None = None,
    cache: Cache | None = None,
    inputs_embeds: torch.Tensor | None = None,
    use_cache: bool | None = None,
    pixel_values: torch.Tensor | None = None,
    image_grid_thw: torch.LongTensor | None = None,
    image_merge_sizes: torch.LongTensor | None = None,
    pixel_values_videos: torch.Tensor | None = None,
    video_grid_thw: torch.LongTensor | None = None,
    video_merge_sizes: torch.LongTensor | None = None,
    video_compression_mask: torch.BoolTensor | None = None,
    mm_encoder_outputs: dict[str, BaseModelOutputWithPooling] | None = None,
    **kwargs: Unpack[TransformersKwargs],
) -> tuple | VideoLlama3ModelOutputWithPast:
    r"""
    image_merge_sizes (`torch.Tensor` of shape `(num_images,)`):
        The spatial downsampling ratio of each image feature.
    video_merge_sizes (`torch.Tensor` of shape `(num_videos,)`):
        The spatial downsampling ratio of each video feature.
    video_compression_mask (`torch.BoolTensor` of shape `(num_video_features,)`, *optional*):
        The mask to indicate which video features are kept after token compression.
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
            pixel_values, image_grid_thw, image_merge_sizes, return_dict=True, **kwargs
        )

    if mm_encoder_outputs.get("video") is None and pixel_values_videos is not None:
        mm_encoder_outputs["video"] = self.get_video_features(
            pixel_values_videos, video_grid_thw, video_merge_sizes, return_dict=True, **kwargs
        )

    if mm_encoder_outputs.get("image") is not None:
        image_embeds = mm_encoder_outputs["image"].pooler_output
        image_embeds = torch.cat(image_embeds, dim=0).to(inputs_embeds.device, inputs_embeds.dtype)
        image_mask, _ = self.get_placeholder_mask(
            input_ids, inputs_embeds=inputs_embeds, image_features=image_embeds
        )
        inputs_embeds = __vlm_site__("inputs_embeds_masked_scatter_0", inputs_embeds.masked_scatter, image_mask, image_embeds)

    if mm_encoder_outputs.get("video") is not None:
        video_embeds = mm_encoder_outputs["video"].pooler_output
        video_embeds = torch.cat(video_embeds, dim=0).to(inputs_embeds.device, inputs_embeds.dtype)
        if video_compression_mask is not None:
            video_embeds = video_embeds[video_compression_mask.to(video_embeds.device)]
        _, video_mask = self.get_placeholder_mask(
            input_ids, inputs_embeds=inputs_embeds, video_features=video_embeds
        )
        inputs_embeds = __vlm_site__("inputs_embeds_masked_scatter_1", inputs_embeds.masked_scatter, video_mask, video_embeds)

    outputs = self.language_model(
        input_ids=None,
        position_ids=position_ids,
        attention_mask=attention_mask,
        cache=cache,
        inputs_embeds=inputs_embeds,
        use_cache=use_cache,
        **kwargs,
    )

    return VideoLlama3ModelOutputWithPast(
        **outputs, image_outputs=mm_encoder_outputs.get("image"), video_outputs=mm_encoder_outputs.get("video")
    )
