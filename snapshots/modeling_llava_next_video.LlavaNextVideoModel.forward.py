# rule llava_next_video.image-scatter: image features (_0), the tiles unpadded with image_newline rows added, and video features (_1), the frames pooled 2x2, scattered into the embeddings
# transformers.models.llava_next_video.modeling_llava_next_video:LlavaNextVideoModel.forward
# transformers/models/llava_next_video/modeling_llava_next_video.py
# sites: inputs_embeds_masked_scatter_0, inputs_embeds_masked_scatter_1

@merge_with_config_defaults
@can_return_tuple
@auto_docstring
@deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
def forward(
    self,
    input_ids: torch.LongTensor | None = None,
    pixel_values: torch.Tensor | None = None,
    pixel_values_videos: torch.Tensor | None = None,
    image_sizes: torch.LongTensor | None = None,
    attention_mask: torch.Tensor | None = None,
    position_ids: torch.LongTensor | None = None,
    cache: Cache | None = None,
    inputs_embeds: torch.Tensor | None = None,
    vision_feature_layer: int | list[int] | list[int] | None = None,
    vision_feature_select_strategy: str | None = None,
    use_cache: bool | None = None,
    mm_encoder_outputs: dict[str, BaseModelOutputWithPooling] | None = None,
    **kwargs: Unpack[FlashAttentionKwargs],
) -> tuple | LlavaNextVideoModelOutputWithPast:
    r"""
    vision_feature_select_strategy (`str`, *optional*, defaults to `"default"`):
        The feature selection strategy used to select the vision feature from the vision backbone.
        Can be one of `"default"` or `"full"`. If `"default"`, the CLS token is removed from the vision features.
        If `"full"`, the full vision features are used.
    """
    if (input_ids is None) ^ (inputs_embeds is not None):
        raise ValueError("You must specify exactly one of input_ids or inputs_embeds")

    if (pixel_values is not None or pixel_values_videos is not None) and mm_encoder_outputs is not None:
        raise ValueError(
            "You cannot specify both pixel_values/pixel_values_videos and mm_encoder_outputs at the same time"
        )

    if inputs_embeds is None:
        inputs_embeds = self.get_input_embeddings()(input_ids)

    mm_encoder_outputs = mm_encoder_outputs if mm_encoder_outputs is not None else {}
    if mm_encoder_outputs.get("image") is None and pixel_values is not None:
        mm_encoder_outputs["image"] = self.get_image_features(
            pixel_values,
            image_sizes,
            vision_feature_layer=vision_feature_layer,
            vision_feature_select_strategy=vision_feature_select_strategy,
            return_dict=True,
        )

    if mm_encoder_outputs.get("image") is not None:
        image_features = torch.cat(mm_encoder_outputs["image"].pooler_output, dim=0).to(
            inputs_embeds.device, inputs_embeds.dtype
        )
        special_image_mask, _ = self.get_placeholder_mask(
            input_ids, inputs_embeds=inputs_embeds, image_features=image_features
        )
        inputs_embeds = __vlm_site__("inputs_embeds_masked_scatter_0", inputs_embeds.masked_scatter, special_image_mask, image_features)

    if mm_encoder_outputs.get("video") is None and pixel_values_videos is not None:
        mm_encoder_outputs["video"] = self.get_video_features(
            pixel_values_videos,
            vision_feature_layer=vision_feature_layer,
            vision_feature_select_strategy=vision_feature_select_strategy,
            return_dict=True,
        )

    if mm_encoder_outputs.get("video") is not None:
        video_features = [feature.flatten(0, 1) for feature in mm_encoder_outputs["video"].pooler_output]
        video_feature_lens = [feature.size(0) for feature in video_features]
        video_features = torch.cat(video_features, dim=0)
        video_feature_lens = torch.tensor(video_feature_lens, dtype=torch.long, device=video_features.device)
        video_features = video_features.to(inputs_embeds.device, inputs_embeds.dtype)

        _, special_video_mask = self.get_placeholder_mask(
            input_ids, inputs_embeds=inputs_embeds, video_features=video_features
        )
        inputs_embeds = __vlm_site__("inputs_embeds_masked_scatter_1", inputs_embeds.masked_scatter, special_video_mask, video_features)

    outputs = self.language_model(
        attention_mask=attention_mask,
        position_ids=position_ids,
        cache=cache,
        inputs_embeds=inputs_embeds,
        use_cache=use_cache,
        **kwargs,
    )

    return LlavaNextVideoModelOutputWithPast(
        **outputs, image_outputs=mm_encoder_outputs.get("image"), video_outputs=mm_encoder_outputs.get("video")
    )
