# rule gemma3.image-scatter: pooled image features, [images, tokens, hidden], scattered into the scaled embeddings
# transformers.models.gemma3.modeling_gemma3:Gemma3Model.forward
# transformers/models/gemma3/modeling_gemma3.py
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
    token_type_ids: torch.LongTensor | None = None,
    inputs_embeds: torch.Tensor | None = None,
    labels: torch.LongTensor | None = None,
    use_cache: bool | None = None,
    mm_encoder_outputs: dict[str, BaseModelOutputWithPooling] | None = None,
    **kwargs: Unpack[TransformersKwargs],
) -> tuple | Gemma3ModelOutputWithPast:
    r"""
    Example:

    ```python
    >>> from PIL import Image
    >>> from huggingface_hub.utils import httpx
    >>> from io import BytesIO
    >>> from transformers import AutoProcessor, Gemma3ForConditionalGeneration

    >>> model = Gemma3ForConditionalGeneration.from_pretrained("google/gemma32-3b-mix-224")
    >>> processor = AutoProcessor.from_pretrained("google/gemma32-3b-mix-224")

    >>> prompt = "Where is the cat standing?"
    >>> url = "https://huggingface.co/datasets/huggingface/documentation-images/resolve/main/pipeline-cat-chonk.jpeg"
    >>> with httpx.stream("GET", url) as response:
    ...     image = Image.open(BytesIO(response.read()))

    >>> inputs = processor(images=image, text=prompt,  return_tensors="pt")

    >>> # Generate
    >>> generate_ids = model.generate(**inputs,)
    >>> processor.batch_decode(generate_ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)[0]
    "Where is the cat standing?\nsnow"
    ```"""
    if (input_ids is None) ^ (inputs_embeds is not None):
        raise ValueError("You must specify exactly one of input_ids or inputs_embeds")

    if pixel_values is not None and mm_encoder_outputs is not None:
        raise ValueError("You cannot specify both pixel_values and mm_encoder_outputs at the same time")

    # Replace image id with PAD if the image token if OOV, to avoid index-errors
    if input_ids is not None and self.config.image_token_id >= self.vocab_size:
        special_image_mask = input_ids == self.config.image_token_id
        llm_input_ids = input_ids.clone()
        llm_input_ids[special_image_mask] = 0
    else:
        llm_input_ids = input_ids

    if inputs_embeds is None:
        inputs_embeds = self.get_input_embeddings()(llm_input_ids)

    # Merge text and images
    mm_encoder_outputs = mm_encoder_outputs if mm_encoder_outputs is not None else {}
    if mm_encoder_outputs.get("image") is None and pixel_values is not None:
        mm_encoder_outputs["image"] = self.get_image_features(pixel_values, return_dict=True)

    if mm_encoder_outputs.get("image") is not None:
        image_features = mm_encoder_outputs["image"].pooler_output.to(inputs_embeds.device, inputs_embeds.dtype)
        special_image_mask = self.get_placeholder_mask(
            input_ids, inputs_embeds=inputs_embeds, image_features=image_features
        )
        inputs_embeds = __vlm_site__("inputs_embeds_masked_scatter_0", inputs_embeds.masked_scatter, special_image_mask, image_features)

    # It may already have been prepared by e.g. `generate`
    if not isinstance(causal_mask_mapping := attention_mask, dict):
        mask_kwargs = {
            "config": self.config.get_text_config(),
            "inputs_embeds": inputs_embeds,
            "attention_mask": attention_mask,
            "cache": cache,
            "position_ids": position_ids,
        }

        if token_type_ids is not None:
            block_sequence_ids = get_block_sequence_ids_for_mask(token_type_ids, device=inputs_embeds.device)
            causal_mask_mapping = create_masks_for_vision_model(
                block_sequence_ids=block_sequence_ids,
                **mask_kwargs,
            )
        else:
            causal_mask_mapping = create_masks_for_generate(**mask_kwargs)

    outputs = self.language_model(
        attention_mask=causal_mask_mapping,
        position_ids=position_ids,
        cache=cache,
        inputs_embeds=inputs_embeds,
        use_cache=use_cache,
        return_dict=True,
        **kwargs,
    )

    return Gemma3ModelOutputWithPast(**outputs, image_outputs=mm_encoder_outputs.get("image"))
