# rule smolvlm.image-scatter: image features scattered into the embeddings
# transformers.models.smolvlm.modeling_smolvlm:SmolVLMModel.forward
# transformers/models/smolvlm/modeling_smolvlm.py
# variant: transformers<5.21: the features are scattered by a helper, self.inputs_merger, keyword image_hidden_states
# sites: self_inputs_merger_0

@merge_with_config_defaults
@can_return_tuple
@auto_docstring(
    custom_intro="""
    Inputs fed to the model can have an arbitrary number of images. To account for this, pixel_values fed to
    the model have image padding -> (batch_size, max_num_images, 3, max_heights, max_widths) where
    max_num_images is the maximum number of images among the batch_size samples in the batch.
    Padding images are not needed beyond padding the pixel_values at the entrance of the model.
    For efficiency, we only pass through the vision_model's forward the real images by
    discarding the padding images i.e. pixel_values of size (image_batch_size, 3, height, width) where
    image_batch_size would be 7 when num_images_per_sample=[1, 3, 1, 2] and max_num_images would be 3.
    """
)
def forward(
    self,
    input_ids: torch.LongTensor | None = None,
    attention_mask: torch.Tensor | None = None,
    position_ids: torch.LongTensor | None = None,
    past_key_values: Cache | None = None,
    inputs_embeds: torch.FloatTensor | None = None,
    pixel_values: torch.FloatTensor | None = None,
    pixel_attention_mask: torch.BoolTensor | None = None,
    image_hidden_states: torch.FloatTensor | None = None,
    use_cache: bool | None = None,
    **kwargs: Unpack[FlashAttentionKwargs],
) -> tuple | SmolVLMBaseModelOutputWithPast:
    r"""
    pixel_attention_mask (`torch.Tensor` of shape `(batch_size, image_size, image_size)`, *optional*):
        Mask to avoid performing attention on padding pixel indices.
    image_hidden_states (`torch.FloatTensor` of shape `(batch_size, num_channels, image_size, image_size)`):
        The hidden states of the image encoder after modality projection.
    """
    if input_ids is not None:
        batch_size, seq_length = input_ids.shape
    elif inputs_embeds is not None:
        batch_size, seq_length, _ = inputs_embeds.shape
    else:
        raise ValueError("You have to specify either input_ids or inputs_embeds")

    if use_cache and past_key_values is None:
        past_key_values = DynamicCache(config=self.config)

    if inputs_embeds is None:
        inputs_embeds = self.text_model.get_input_embeddings()(input_ids).to(input_ids.device)

    if pixel_values is not None and image_hidden_states is not None:
        raise ValueError("You cannot specify both pixel_values and image_hidden_states at the same time")

    if pixel_values is not None:
        image_hidden_states = self.get_image_features(
            pixel_values, pixel_attention_mask, return_dict=True
        ).pooler_output
        image_hidden_states = image_hidden_states.to(inputs_embeds.device)
    elif image_hidden_states is not None:
        image_hidden_states = image_hidden_states.to(dtype=self.dtype, device=inputs_embeds.device)

    if image_hidden_states is not None:
        inputs_embeds = __vlm_site__("self_inputs_merger_0", self.inputs_merger,
            input_ids=input_ids,
            inputs_embeds=inputs_embeds,
            image_hidden_states=image_hidden_states,
        )

    outputs = self.text_model(
        inputs_embeds=inputs_embeds,
        attention_mask=attention_mask,
        position_ids=position_ids,
        past_key_values=past_key_values,
        use_cache=use_cache,
        **kwargs,
    )

    return SmolVLMBaseModelOutputWithPast(
        last_hidden_state=outputs.last_hidden_state,
        past_key_values=outputs.past_key_values,
        hidden_states=outputs.hidden_states,
        attentions=outputs.attentions,
        image_hidden_states=image_hidden_states,
    )
