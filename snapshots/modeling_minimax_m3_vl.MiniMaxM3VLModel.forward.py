# rule minimax_m3_vl.image-scatter: image (_0) and video (_1) features scattered into the embeddings
# transformers.models.minimax_m3_vl.modeling_minimax_m3_vl:MiniMaxM3VLModel.forward
# transformers/models/minimax_m3_vl/modeling_minimax_m3_vl.py
# sites: inputs_embeds_masked_scatter_0, inputs_embeds_masked_scatter_1

@can_return_tuple
@auto_docstring
@deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
def forward(
    self,
    input_ids: torch.LongTensor | None = None,
    pixel_values: torch.Tensor | None = None,
    pixel_values_videos: torch.Tensor | None = None,
    image_grid_thw: torch.Tensor | None = None,
    video_grid_thw: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
    position_ids: torch.LongTensor | None = None,
    cache: Cache | None = None,
    inputs_embeds: torch.Tensor | None = None,
    mm_encoder_outputs: dict[str, BaseModelOutputWithPooling] | None = None,
    **kwargs: Unpack[TransformersKwargs],
) -> tuple | MiniMaxM3VLModelOutputWithPast:
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
            pixel_values, image_grid_thw, return_dict=True, **kwargs
        )

    if mm_encoder_outputs.get("video") is None and pixel_values_videos is not None:
        mm_encoder_outputs["video"] = self.get_video_features(
            pixel_values_videos, video_grid_thw, return_dict=True, **kwargs
        )

    if mm_encoder_outputs.get("image") is not None:
        image_embeds = torch.cat(mm_encoder_outputs["image"].pooler_output, dim=0).to(
            inputs_embeds.device, inputs_embeds.dtype
        )
        image_mask, _ = self.get_placeholder_mask(
            input_ids, inputs_embeds=inputs_embeds, image_features=image_embeds
        )
        inputs_embeds = __vlm_site__("inputs_embeds_masked_scatter_0", inputs_embeds.masked_scatter, image_mask, image_embeds)

    if mm_encoder_outputs.get("video") is not None:
        video_embeds = torch.cat(mm_encoder_outputs["video"].pooler_output, dim=0).to(
            inputs_embeds.device, inputs_embeds.dtype
        )
        _, video_mask = self.get_placeholder_mask(
            input_ids, inputs_embeds=inputs_embeds, video_features=video_embeds
        )
        inputs_embeds = __vlm_site__("inputs_embeds_masked_scatter_1", inputs_embeds.masked_scatter, video_mask, video_embeds)

    outputs = self.language_model(
        attention_mask=attention_mask,
        position_ids=position_ids,
        cache=cache,
        inputs_embeds=inputs_embeds,
        **kwargs,
    )

    return MiniMaxM3VLModelOutputWithPast(
        **outputs, image_outputs=mm_encoder_outputs.get("image"), video_outputs=mm_encoder_outputs.get("video")
    )
