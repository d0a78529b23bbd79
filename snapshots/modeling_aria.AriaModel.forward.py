# rule aria.image-scatter: image features scattered into the embeddings
# transformers.models.aria.modeling_aria:AriaModel.forward
# transformers/models/aria/modeling_aria.py
# sites: inputs_embeds_masked_scatter_0

@can_return_tuple
@auto_docstring
@deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
def forward(
    self,
    input_ids: torch.LongTensor | None = None,
    pixel_values: torch.Tensor | None = None,
    pixel_mask: torch.LongTensor | None = None,
    attention_mask: torch.Tensor | None = None,
    position_ids: torch.LongTensor | None = None,
    cache: Cache | None = None,
    inputs_embeds: torch.Tensor | None = None,
    use_cache: bool | None = None,
    mm_encoder_outputs: dict[str, BaseModelOutputWithPooling] | None = None,
    **kwargs: Unpack[FlashAttentionKwargs],
) -> tuple | AriaModelOutputWithPast:
    if pixel_values is not None and mm_encoder_outputs is not None:
        raise ValueError("You cannot specify both pixel_values and mm_encoder_outputs at the same time")

    if inputs_embeds is None:
        inputs_embeds = self.get_input_embeddings()(input_ids)

    # 2. Merge text and images
    mm_encoder_outputs = mm_encoder_outputs if mm_encoder_outputs is not None else {}
    if mm_encoder_outputs.get("image") is None and pixel_values is not None and inputs_embeds.shape[1] != 1:
        mm_encoder_outputs["image"] = self.get_image_features(
            pixel_values=pixel_values,
            pixel_mask=pixel_mask,
            vision_feature_layer=self.config.vision_feature_layer,
            return_dict=True,
            **kwargs,
        )

    if mm_encoder_outputs.get("image") is not None:
        image_features = mm_encoder_outputs["image"].pooler_output
        image_features = image_features.to(inputs_embeds.device, inputs_embeds.dtype)
        special_image_mask = self.get_placeholder_mask(
            input_ids, inputs_embeds=inputs_embeds, image_features=image_features
        )
        inputs_embeds = __vlm_site__("inputs_embeds_masked_scatter_0", inputs_embeds.masked_scatter, special_image_mask, image_features)

    outputs = self.language_model(
        attention_mask=attention_mask,
        position_ids=position_ids,
        cache=cache,
        inputs_embeds=inputs_embeds,
        use_cache=use_cache,
        **kwargs,
    )

    return AriaModelOutputWithPast(**outputs, image_outputs=mm_encoder_outputs.get("image"))
