# rule molmo2.image-scatter: image features scattered into the embeddings
# transformers.models.molmo2.modeling_molmo2:Molmo2Model.forward
# transformers/models/molmo2/modeling_molmo2.py
# sites: inputs_embeds_masked_scatter_0

@can_return_tuple
@auto_docstring
@deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
def forward(
    self,
    input_ids: torch.LongTensor | None = None,
    pixel_values: torch.Tensor | None = None,
    image_token_pooling: torch.Tensor | None = None,
    image_grids: torch.Tensor | None = None,
    image_num_crops: torch.Tensor | None = None,
    pixel_values_videos: torch.Tensor | None = None,
    video_token_pooling: torch.Tensor | None = None,
    video_grids: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
    position_ids: torch.Tensor | None = None,
    cache: Cache | None = None,
    mm_token_type_ids: torch.LongTensor | None = None,
    inputs_embeds: torch.Tensor | None = None,
    use_cache: bool | None = None,
    mm_encoder_outputs: dict[str, BaseModelOutputWithPooling] | None = None,
    **kwargs: Unpack[TransformersKwargs],
) -> tuple | Molmo2ModelOutputWithPast:
    if (input_ids is None) ^ (inputs_embeds is not None):
        raise ValueError("You must specify exactly one of input_ids or inputs_embeds")
    if pixel_values is not None and pixel_values_videos is not None:
        raise ValueError("pixel_values and pixel_values_videos are provided at the same time")
    if (pixel_values is not None or pixel_values_videos is not None) and mm_encoder_outputs is not None:
        raise ValueError(
            "You cannot specify both pixel_values/pixel_values_videos and mm_encoder_outputs at the same time"
        )
    if self.training and mm_token_type_ids is None:
        raise ValueError("`mm_token_type_ids` is required as a model input when training")

    if inputs_embeds is None:
        inputs_embeds = self.get_input_embeddings()(input_ids)

    mm_encoder_outputs = mm_encoder_outputs if mm_encoder_outputs is not None else {}
    if mm_encoder_outputs.get("image") is None and pixel_values is not None:
        mm_encoder_outputs["image"] = self.get_image_features(pixel_values, image_token_pooling, image_grids)
    if mm_encoder_outputs.get("video") is None and pixel_values_videos is not None:
        mm_encoder_outputs["video"] = self.get_video_features(
            pixel_values_videos, video_token_pooling, video_grids
        )

    image_features: torch.Tensor | None = None
    if mm_encoder_outputs.get("image") is not None:
        image_features = mm_encoder_outputs["image"].pooler_output
    elif mm_encoder_outputs.get("video") is not None:
        image_features = mm_encoder_outputs["video"].pooler_output

    if image_features is not None:
        image_features = torch.cat(image_features, dim=0).to(inputs_embeds.device)
        # `get_placeholder_mask` returns a [batch, seq, 1] mask; Molmo2 *adds* the image features onto
        # the placeholder-token embeddings (residual), which means we index `inputs_embeds` directly.
        # Boolean indexing does not broadcast, so the mask must be expanded to the hidden dim first.
        special_image_mask = self.get_placeholder_mask(input_ids, inputs_embeds, image_features)
        special_image_mask = special_image_mask.expand_as(inputs_embeds)
        inputs_embeds = __vlm_site__("inputs_embeds_masked_scatter_0", inputs_embeds.masked_scatter,
            special_image_mask,
            inputs_embeds[special_image_mask] + image_features.reshape(-1),
        )

    # An already prepared 4D mask (e.g. from `generate`) is returned as is by `create_causal_mask`
    mask_kwargs = {
        "config": self.config.get_text_config(),
        "inputs_embeds": inputs_embeds,
        "attention_mask": attention_mask,
        "cache": cache,
        "position_ids": position_ids,
    }
    is_prefill = cache is None or not cache.is_initialized or image_features is not None
    if mm_token_type_ids is not None and is_prefill:
        # every image or frame token attends to every other one, so they all share a single block
        mask_kwargs["block_sequence_ids"] = torch.where(mm_token_type_ids.to(inputs_embeds.device) == 1, 0, -1)
    causal_mask = create_causal_mask(**mask_kwargs)

    outputs = self.language_model(
        attention_mask=causal_mask,
        position_ids=position_ids,
        cache=cache,
        inputs_embeds=inputs_embeds,
        use_cache=use_cache,
        **kwargs,
    )

    return Molmo2ModelOutputWithPast(**outputs, image_outputs=mm_encoder_outputs.get("image"))
