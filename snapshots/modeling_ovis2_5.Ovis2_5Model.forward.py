# rule ovis2_5.image-scatter: image (_0) and video (_1) features scattered into the embeddings
# transformers.models.ovis2_5.modeling_ovis2_5:Ovis2_5Model.forward
# transformers/models/ovis2_5/modeling_ovis2_5.py
# sites: self__merge_visual_features_0, self__merge_visual_features_1

@can_return_tuple
@auto_docstring
@deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
def forward(
    self,
    input_ids: torch.LongTensor | None = None,
    attention_mask: torch.Tensor | None = None,
    position_ids: torch.LongTensor | None = None,
    cache: Cache | None = None,
    inputs_embeds: torch.FloatTensor | None = None,
    use_cache: bool | None = None,
    pixel_values: torch.FloatTensor | None = None,
    image_grid_thw: torch.LongTensor | None = None,
    pixel_values_videos: torch.FloatTensor | None = None,
    video_grid_thw: torch.LongTensor | None = None,
    mm_encoder_outputs: dict[str, BaseModelOutputWithPooling] | None = None,
    mm_token_type_ids: torch.LongTensor | None = None,
    **kwargs: Unpack[TransformersKwargs],
) -> tuple | MultimodalBaseModelOutputWithPast:
    r"""
    mm_token_type_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
        Modality labels returned by the processor with `return_mm_token_type_ids=True`. Pass them with
        `inputs_embeds` to locate visual placeholders when token embeddings are shared.
    """
    if (input_ids is None) == (inputs_embeds is None):
        raise ValueError("You must specify exactly one of `input_ids` or `inputs_embeds`.")
    if (pixel_values is not None or pixel_values_videos is not None) and mm_encoder_outputs is not None:
        raise ValueError(
            "You cannot specify both pixel_values/pixel_values_videos and mm_encoder_outputs at the same time"
        )

    mm_encoder_outputs = mm_encoder_outputs if mm_encoder_outputs is not None else {}
    if mm_encoder_outputs.get("image") is None and pixel_values is not None:
        mm_encoder_outputs["image"] = self.get_image_features(
            pixel_values=pixel_values,
            image_grid_thw=image_grid_thw,
            return_dict=True,
            **kwargs,
        )
    if mm_encoder_outputs.get("video") is None and pixel_values_videos is not None:
        mm_encoder_outputs["video"] = self.get_video_features(
            pixel_values_videos=pixel_values_videos,
            video_grid_thw=video_grid_thw,
            return_dict=True,
            **kwargs,
        )

    if inputs_embeds is not None and (
        mm_encoder_outputs.get("video") is not None and mm_encoder_outputs.get("image") is not None
    ):
        raise ValueError("The model doesn't support mixed-inputs with `inputs_embeds` as the main input.")

    if inputs_embeds is None:
        inputs_embeds = self.get_input_embeddings()(input_ids)

    if mm_encoder_outputs.get("image") is not None:
        inputs_embeds = __vlm_site__("self__merge_visual_features_0", self._merge_visual_features,
            input_ids,
            inputs_embeds,
            mm_encoder_outputs["image"].pooler_output,
            is_video=False,
        )

    if mm_encoder_outputs.get("video") is not None:
        inputs_embeds = __vlm_site__("self__merge_visual_features_1", self._merge_visual_features,
            input_ids,
            inputs_embeds,
            mm_encoder_outputs["video"].pooler_output,
            is_video=True,
        )

    outputs = self.language_model(
        attention_mask=attention_mask,
        position_ids=position_ids,
        cache=cache,
        inputs_embeds=inputs_embeds,
        use_cache=use_cache,
        return_dict=True,
        **kwargs,
    )
    return MultimodalBaseModelOutputWithPast(
        **outputs, image_outputs=mm_encoder_outputs.get("image"), video_outputs=mm_encoder_outputs.get("video")
    )
