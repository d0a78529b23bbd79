# rule ovis2.image-scatter: image features scattered into the embeddings
# transformers.models.ovis2.modeling_ovis2:Ovis2Model.forward
# transformers/models/ovis2/modeling_ovis2.py
# sites: inputs_embeds_masked_scatter_0

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
    labels: torch.LongTensor | None = None,
    use_cache: bool | None = None,
    mm_encoder_outputs: dict[str, BaseModelOutputWithPooling] | None = None,
    **kwargs,
) -> tuple | Ovis2ModelOutputWithPast:
    if (input_ids is None) ^ (inputs_embeds is not None):
        raise ValueError("You must specify exactly one of input_ids or inputs_embeds")

    if pixel_values is not None and mm_encoder_outputs is not None:
        raise ValueError("You cannot specify both pixel_values and mm_encoder_outputs at the same time")

    if inputs_embeds is None:
        inputs_embeds = self.get_input_embeddings()(input_ids)

    mm_encoder_outputs = mm_encoder_outputs if mm_encoder_outputs is not None else {}
    if mm_encoder_outputs.get("image") is None and pixel_values is not None:
        mm_encoder_outputs["image"] = self.get_image_features(pixel_values=pixel_values, return_dict=True)

    if mm_encoder_outputs.get("image") is not None:
        image_features = mm_encoder_outputs["image"].pooler_output
        visual_indicator_features = mm_encoder_outputs["image"].visual_indicator_features

        special_image_mask = self.get_placeholder_mask(
            input_ids,
            inputs_embeds=inputs_embeds,
            image_features=image_features,
        )
        image_features = image_features.to(inputs_embeds.device, inputs_embeds.dtype)
        inputs_embeds = __vlm_site__("inputs_embeds_masked_scatter_0", inputs_embeds.masked_scatter, special_image_mask, image_features)

        for i, visual_indicator_id in enumerate(self.visual_indicator_token_ids):
            if input_ids is None:
                mask = inputs_embeds == self.get_input_embeddings()(
                    torch.tensor(visual_indicator_id, dtype=torch.long, device=inputs_embeds.device)
                )
                mask = mask.all(-1)
            else:
                mask = (input_ids == visual_indicator_id).to(inputs_embeds.device)

            if mask.any():
                inputs_embeds[mask] = visual_indicator_features[i].to(inputs_embeds.device, inputs_embeds.dtype)

    outputs = self.language_model(
        attention_mask=attention_mask,
        position_ids=position_ids,
        cache=cache,
        inputs_embeds=inputs_embeds,
        use_cache=use_cache,
        **kwargs,
    )

    return Ovis2ModelOutputWithPast(**outputs, image_outputs=mm_encoder_outputs.get("image"))
