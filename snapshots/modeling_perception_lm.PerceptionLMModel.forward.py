# rule perception_lm.image-scatter: image (_0) and video (_1) features scattered into the embeddings
# transformers.models.perception_lm.modeling_perception_lm:PerceptionLMModel.forward
# transformers/models/perception_lm/modeling_perception_lm.py
# sites: inputs_embeds_masked_scatter_0, inputs_embeds_masked_scatter_1

@can_return_tuple
@auto_docstring
@deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
def forward(
    self,
    input_ids: torch.LongTensor | None = None,
    pixel_values: torch.Tensor | None = None,
    pixel_values_videos: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
    position_ids: torch.LongTensor | None = None,
    cache: Cache | None = None,
    inputs_embeds: torch.Tensor | None = None,
    use_cache: bool | None = None,
    mm_encoder_outputs: dict[str, BaseModelOutputWithPooling] | None = None,
    **kwargs,
) -> tuple | PerceptionLMModelOutputWithPast:
    if (input_ids is None) ^ (inputs_embeds is not None):
        raise ValueError("You must specify exactly one of input_ids or inputs_embeds")

    if inputs_embeds is None:
        inputs_embeds = self.get_input_embeddings()(input_ids)

    image_features = None
    mm_encoder_outputs = mm_encoder_outputs if mm_encoder_outputs is not None else {}
    if mm_encoder_outputs.get("image") is None and pixel_values is not None:
        mm_encoder_outputs["image"] = self.get_image_features(pixel_values=pixel_values, return_dict=True)

    if mm_encoder_outputs.get("image") is not None:
        image_features = mm_encoder_outputs["image"].pooler_output.to(
            inputs_embeds.device, dtype=inputs_embeds.dtype
        )
        special_image_mask, _ = self.get_placeholder_mask(
            input_ids, inputs_embeds=inputs_embeds, image_features=image_features
        )
        inputs_embeds = __vlm_site__("inputs_embeds_masked_scatter_0", inputs_embeds.masked_scatter, special_image_mask, image_features)

    video_features = None
    if mm_encoder_outputs.get("video") is None and pixel_values_videos is not None:
        mm_encoder_outputs["video"] = self.get_image_features(pixel_values=pixel_values_videos, return_dict=True)

    if mm_encoder_outputs.get("video") is not None:
        video_features = mm_encoder_outputs["video"].pooler_output.to(
            inputs_embeds.device, dtype=inputs_embeds.dtype
        )
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
        return_dict=True,
        **kwargs,
    )
    return PerceptionLMModelOutputWithPast(**outputs, image_outputs=mm_encoder_outputs.get("image"))
