# rule dots3_note.image-scatter: image (_0), video (_1) and audio (_2) features scattered into the embeddings
# transformers.models.dots3_note.modeling_dots3_note:Dots3NoteModel.forward
# transformers/models/dots3_note/modeling_dots3_note.py
# sites: inputs_embeds_masked_scatter_0, inputs_embeds_masked_scatter_1, inputs_embeds_masked_scatter_2

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
    pixel_values: torch.Tensor | None = None,
    image_grid_thw: torch.Tensor | None = None,
    pixel_values_videos: torch.Tensor | None = None,
    video_grid_thw: torch.Tensor | None = None,
    input_features: torch.Tensor | None = None,
    chunk_sample_lengths: torch.Tensor | None = None,
    mm_encoder_outputs: dict[str, BaseModelOutputWithPooling] | None = None,
    **kwargs,
) -> MultimodalMoeBaseModelOutputWithPast | tuple:
    r"""
    chunk_sample_lengths (`torch.Tensor`, *optional*):
        Waveform sample count for each audio feature chunk.
    """
    if (input_ids is None) == (inputs_embeds is None):
        raise ValueError("You must specify exactly one of input_ids or inputs_embeds")
    if inputs_embeds is None:
        inputs_embeds = self.get_input_embeddings()(input_ids)

    if (pixel_values is not None or pixel_values_videos is not None) and mm_encoder_outputs is not None:
        raise ValueError("Cannot specify both pixel_values/pixel_values_videos and mm_encoder_outputs")

    mm_encoder_outputs = mm_encoder_outputs if mm_encoder_outputs is not None else {}
    if pixel_values is not None:
        mm_encoder_outputs["image"] = self.get_image_features(
            pixel_values, image_grid_thw, return_dict=True, **kwargs
        )
    if mm_encoder_outputs.get("image") is not None:
        image_embeddings = torch.cat(mm_encoder_outputs["image"].pooler_output, dim=0)
        image_mask = self.get_placeholder_mask(
            input_ids, inputs_embeds, image_embeddings, self.config.image_token_id
        )
        inputs_embeds = __vlm_site__("inputs_embeds_masked_scatter_0", inputs_embeds.masked_scatter, image_mask, image_embeddings.to(inputs_embeds))

    if pixel_values_videos is not None:
        mm_encoder_outputs["video"] = self.get_video_features(
            pixel_values_videos, video_grid_thw, return_dict=True, **kwargs
        )
    if mm_encoder_outputs.get("video") is not None:
        video_embeddings = torch.cat(mm_encoder_outputs["video"].pooler_output, dim=0)
        video_mask = self.get_placeholder_mask(
            input_ids, inputs_embeds, video_embeddings, self.config.video_token_id
        )
        inputs_embeds = __vlm_site__("inputs_embeds_masked_scatter_1", inputs_embeds.masked_scatter, video_mask, video_embeddings.to(inputs_embeds))

    if input_features is not None:
        audio_embeddings = self.get_audio_features(
            input_features, chunk_sample_lengths, return_dict=True
        ).pooler_output
        audio_mask = self.get_placeholder_mask(
            input_ids, inputs_embeds, audio_embeddings, self.config.audio_token_id
        )
        inputs_embeds = __vlm_site__("inputs_embeds_masked_scatter_2", inputs_embeds.masked_scatter, audio_mask, audio_embeddings.to(inputs_embeds))

    outputs = self.language_model(
        attention_mask=attention_mask,
        position_ids=position_ids,
        cache=cache,
        inputs_embeds=inputs_embeds,
        **kwargs,
    )
    return MultimodalMoeBaseModelOutputWithPast(
        **outputs, image_outputs=mm_encoder_outputs.get("image"), video_outputs=mm_encoder_outputs.get("video")
    )
