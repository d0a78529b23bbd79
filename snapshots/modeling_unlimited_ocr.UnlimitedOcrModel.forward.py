# rule unlimited_ocr.image-scatter: image features scattered into the embeddings
# transformers.models.unlimited_ocr.modeling_unlimited_ocr:UnlimitedOcrModel.forward
# transformers/models/unlimited_ocr/modeling_unlimited_ocr.py
# sites: inputs_embeds_masked_scatter_0

@can_return_tuple
@auto_docstring
@deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
def forward(
    self,
    input_ids: torch.LongTensor | None = None,
    pixel_values: torch.Tensor | None = None,
    pixel_values_local: torch.Tensor | None = None,
    num_local_patches: list[int] | None = None,
    patches_grid: list[list[int]] | None = None,
    attention_mask: torch.Tensor | None = None,
    position_ids: torch.LongTensor | None = None,
    cache: Cache | None = None,
    inputs_embeds: torch.Tensor | None = None,
    use_cache: bool | None = None,
    mm_encoder_outputs: dict[str, BaseModelOutputWithPooling] | None = None,
    **kwargs: Unpack[TransformersKwargs],
) -> tuple | UnlimitedOcrModelOutputWithPast:
    r"""
    pixel_values_local (`torch.Tensor`, *optional*):
        Local patch pixel values of shape `(total_patches, 3, H, W)`.
    num_local_patches (`list[int]`, *optional*):
        Number of local patches per image in the batch.
    patches_grid (`list[list[int]]`, *optional*):
        The patches grid `(num_columns, num_rows)` per image.
    """
    if pixel_values is not None and mm_encoder_outputs is not None:
        raise ValueError("You cannot specify both pixel_values and mm_encoder_outputs at the same time")

    if inputs_embeds is None:
        inputs_embeds = self.get_input_embeddings()(input_ids)

    mm_encoder_outputs = mm_encoder_outputs if mm_encoder_outputs is not None else {}
    if mm_encoder_outputs.get("image") is None and pixel_values is not None:
        mm_encoder_outputs["image"] = self.get_image_features(
            pixel_values, pixel_values_local, num_local_patches, patches_grid, return_dict=True
        )

    if mm_encoder_outputs.get("image") is not None:
        image_features = mm_encoder_outputs["image"].pooler_output
        image_features = torch.cat(image_features, dim=0).to(inputs_embeds.device, inputs_embeds.dtype)
        special_image_mask = self.get_placeholder_mask(input_ids, inputs_embeds, image_features)
        inputs_embeds = __vlm_site__("inputs_embeds_masked_scatter_0", inputs_embeds.masked_scatter, special_image_mask, image_features)

    outputs = self.language_model(
        input_ids=None,
        inputs_embeds=inputs_embeds,
        attention_mask=attention_mask,
        position_ids=position_ids,
        cache=cache,
        use_cache=use_cache,
        **kwargs,
    )

    return UnlimitedOcrModelOutputWithPast(**outputs, image_outputs=mm_encoder_outputs.get("image"))
