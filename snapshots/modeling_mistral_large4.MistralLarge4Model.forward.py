# rule mistral_large4.image-scatter: image features scattered into the embeddings
# transformers.models.mistral_large4.modeling_mistral_large4:MistralLarge4Model.forward
# transformers/models/mistral_large4/modeling_mistral_large4.py
# sites: inputs_embeds_masked_scatter_0

@merge_with_config_defaults
@can_return_tuple
@auto_docstring
@deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
def forward(
    self,
    input_ids: torch.LongTensor | None = None,
    pixel_values: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
    position_ids: torch.LongTensor | None = None,
    cache: Cache | None = None,
    inputs_embeds: torch.Tensor | None = None,
    vision_feature_layer: int | list[int] | list[int] | None = None,
    use_cache: bool | None = None,
    image_sizes: torch.Tensor | None = None,
    mm_encoder_outputs: dict[str, BaseModelOutputWithPooling] | None = None,
    **kwargs: Unpack[TransformersKwargs],
) -> tuple | MistralLarge4ModelOutputWithPast:
    if (input_ids is None) ^ (inputs_embeds is not None):
        raise ValueError("You must specify exactly one of input_ids or inputs_embeds")

    if pixel_values is not None and mm_encoder_outputs is not None:
        raise ValueError("You cannot specify both pixel_values and mm_encoder_outputs at the same time")

    if inputs_embeds is None:
        inputs_embeds = self.get_input_embeddings()(input_ids)

    mm_encoder_outputs = mm_encoder_outputs if mm_encoder_outputs is not None else {}
    if mm_encoder_outputs.get("image") is None and pixel_values is not None:
        mm_encoder_outputs["image"] = self.get_image_features(
            pixel_values=pixel_values,
            vision_feature_layer=vision_feature_layer,
            image_sizes=image_sizes,
            return_dict=True,
        )

    if mm_encoder_outputs.get("image") is not None:
        image_features = torch.cat(mm_encoder_outputs["image"].pooler_output, dim=0).to(
            inputs_embeds.device, inputs_embeds.dtype
        )
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

    return MistralLarge4ModelOutputWithPast(**outputs, image_outputs=mm_encoder_outputs.get("image"))
