# rule granite_docling.image-scatter: image features scattered into the embeddings
# transformers.models.granite_docling.modeling_granite_docling:GraniteDoclingModel.forward
# transformers/models/granite_docling/modeling_granite_docling.py
# sites: inputs_embeds_masked_scatter_0

@can_return_tuple
@auto_docstring(
    custom_intro="""
    Inputs fed to the model can have an arbitrary number of images. To account for this, pixel_values fed to
    the model have image padding -> (batch_size, max_num_tiles, 3, image_size, image_size) where max_num_tiles
    is the maximum number of tiles among the batch_size samples in the batch. Padding tiles are false in
    `pixel_attention_mask` and are discarded before the vision encoder.
    """
)
@deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
def forward(
    self,
    input_ids: torch.LongTensor | None = None,
    attention_mask: torch.Tensor | None = None,
    position_ids: torch.LongTensor | None = None,
    cache: Cache | None = None,
    inputs_embeds: torch.FloatTensor | None = None,
    pixel_values: torch.FloatTensor | None = None,
    tile_fine_mask: torch.BoolTensor | None = None,
    pixel_attention_mask: torch.BoolTensor | None = None,
    mm_encoder_outputs: dict | None = None,
    **kwargs: Unpack[TransformersKwargs],
) -> tuple | GraniteDoclingBaseModelOutputWithPast:
    r"""
    tile_fine_mask (`torch.BoolTensor` of shape `(batch_size,)`, *optional*):
        All True when the processor is called with `fine_route=True`: the batch takes the fine connector path,
        which yields four times as many image tokens per tile.
    pixel_attention_mask (`torch.BoolTensor` of shape `(batch_size, num_tiles)`, *optional*):
        Real tiles, as returned by the processor. Padding tiles are false. Required with `pixel_values`.
    """
    if (input_ids is None) ^ (inputs_embeds is not None):
        raise ValueError("You must specify exactly one of input_ids or inputs_embeds")

    if inputs_embeds is None:
        inputs_embeds = self.text_model.get_input_embeddings()(input_ids).to(self.device)

    if pixel_values is not None and mm_encoder_outputs is not None:
        raise ValueError("You cannot specify both pixel_values and mm_encoder_outputs at the same time")
    if mm_encoder_outputs is not None and not isinstance(mm_encoder_outputs, dict):
        raise ValueError("mm_encoder_outputs must be a dict of cached encoder outputs.")

    image_hidden_states = None
    deepstack_visual_embeds = None
    visual_pos_masks = None
    mm_encoder_outputs = {} if mm_encoder_outputs is None else mm_encoder_outputs
    if mm_encoder_outputs.get("image") is not None or pixel_values is not None:
        if mm_encoder_outputs.get("image") is None:
            mm_encoder_outputs["image"] = self.get_image_features(
                pixel_values, pixel_attention_mask, tile_fine_mask=tile_fine_mask, return_dict=True
            )
        image_outputs = mm_encoder_outputs["image"]
        image_hidden_states = torch.cat(image_outputs.pooler_output, dim=0).to(
            inputs_embeds.device, inputs_embeds.dtype
        )
        deepstack_visual_embeds = image_outputs.deepstack_features
        if deepstack_visual_embeds is not None:
            deepstack_visual_embeds = [
                torch.cat(features, dim=0).to(inputs_embeds.device, inputs_embeds.dtype)
                for features in deepstack_visual_embeds
            ]
        special_image_mask = self.get_placeholder_mask(input_ids, inputs_embeds, image_hidden_states)
        inputs_embeds = __vlm_site__("inputs_embeds_masked_scatter_0", inputs_embeds.masked_scatter, special_image_mask.unsqueeze(-1), image_hidden_states)
        visual_pos_masks = special_image_mask

    outputs = self.text_model(
        inputs_embeds=inputs_embeds,
        attention_mask=attention_mask,
        position_ids=position_ids,
        cache=cache,
        visual_pos_masks=visual_pos_masks,
        deepstack_visual_embeds=deepstack_visual_embeds,
        **kwargs,
    )

    return GraniteDoclingBaseModelOutputWithPast(
        **outputs,
        image_outputs=mm_encoder_outputs.get("image"),
    )
