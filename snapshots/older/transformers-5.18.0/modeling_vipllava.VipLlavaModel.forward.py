# rule vipllava.image-scatter: image features scattered into the embeddings
# transformers.models.vipllava.modeling_vipllava:VipLlavaModel.forward
# transformers/models/vipllava/modeling_vipllava.py
# sites: inputs_embeds_masked_scatter_0

@can_return_tuple
@auto_docstring
def forward(
    self,
    input_ids: torch.LongTensor | None = None,
    pixel_values: torch.FloatTensor | None = None,
    attention_mask: torch.Tensor | None = None,
    position_ids: torch.LongTensor | None = None,
    past_key_values: Cache | None = None,
    inputs_embeds: torch.FloatTensor | None = None,
    vision_feature_layers: int | list[int] | None = None,
    use_cache: bool | None = None,
    mm_encoder_outputs: dict[str, BaseModelOutputWithPooling] | None = None,
    **kwargs: Unpack[TransformersKwargs],
) -> tuple | VipLlavaModelOutputWithPast:
    r"""
    vision_feature_layers (`Union[int, list[int]]`, *optional*):
        The vision feature layer, or the list of indexes of the layers to select
        the vision feature.
    """
    if pixel_values is not None and mm_encoder_outputs is not None:
        raise ValueError("You cannot specify both pixel_values and mm_encoder_outputs at the same time")

    vision_feature_layers = (
        vision_feature_layers if vision_feature_layers is not None else self.config.vision_feature_layers
    )

    if (input_ids is None) ^ (inputs_embeds is not None):
        raise ValueError("You must specify exactly one of input_ids or inputs_embeds")

    if inputs_embeds is None:
        inputs_embeds = self.get_input_embeddings()(input_ids)

    mm_encoder_outputs = mm_encoder_outputs if mm_encoder_outputs is not None else {}
    if mm_encoder_outputs.get("image") is None and pixel_values is not None:
        mm_encoder_outputs["image"] = self.get_image_features(
            pixel_values=pixel_values, vision_feature_layers=vision_feature_layers
        )

    if mm_encoder_outputs.get("image") is not None:
        image_features = mm_encoder_outputs["image"].pooler_output.to(inputs_embeds.device, inputs_embeds.dtype)
        special_image_mask = self.get_placeholder_mask(
            input_ids, inputs_embeds=inputs_embeds, image_features=image_features
        )
        inputs_embeds = __vlm_site__("inputs_embeds_masked_scatter_0", inputs_embeds.masked_scatter, special_image_mask, image_features)

    outputs: BaseModelOutputWithPast = self.language_model(
        attention_mask=attention_mask,
        position_ids=position_ids,
        past_key_values=past_key_values,
        inputs_embeds=inputs_embeds,
        use_cache=use_cache,
        **kwargs,
    )

    output = VipLlavaModelOutputWithPast(
        last_hidden_state=outputs.last_hidden_state,
        past_key_values=outputs.past_key_values,
        hidden_states=outputs.hidden_states,
        attentions=outputs.attentions,
        image_hidden_states=image_features if mm_encoder_outputs.get("image") is not None else None,
    )
    return output
