# rule paligemma.image-scatter: projected patches, [images, patches, hidden], scattered unscaled into the scaled embeddings
# transformers.models.paligemma.modeling_paligemma:PaliGemmaModel.forward
# transformers/models/paligemma/modeling_paligemma.py
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
    use_cache: bool | None = None,
    mm_encoder_outputs: dict[str, BaseModelOutputWithPooling] | None = None,
    **kwargs: Unpack[FlashAttentionKwargs],
) -> tuple | PaliGemmaModelOutputWithPast:
    r"""
    Example:

    ```python
    >>> from PIL import Image
    >>> from huggingface_hub.utils import httpx
    >>> from io import BytesIO
    >>> from transformers import AutoProcessor, PaliGemmaForConditionalGeneration

    >>> model = PaliGemmaForConditionalGeneration.from_pretrained("google/paligemma2-3b-mix-224")
    >>> processor = AutoProcessor.from_pretrained("google/paligemma2-3b-mix-224")

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

    if position_ids is None:
        past_seen_tokens = cache.get_seq_length() if cache is not None else 0
        position_ids = torch.arange(inputs_embeds.shape[1], device=inputs_embeds.device) + past_seen_tokens
        position_ids = position_ids.unsqueeze(0) + 1  # Paligemma positions are 1-indexed

    # Merge text and images
    mm_encoder_outputs = mm_encoder_outputs if mm_encoder_outputs is not None else {}
    if mm_encoder_outputs.get("image") is None and pixel_values is not None:
        mm_encoder_outputs["image"] = self.get_image_features(pixel_values)

    if mm_encoder_outputs.get("image") is not None:
        image_features = mm_encoder_outputs["image"].pooler_output.to(inputs_embeds.device, inputs_embeds.dtype)
        special_image_mask = self.get_placeholder_mask(
            input_ids, inputs_embeds=inputs_embeds, image_features=image_features
        )
        inputs_embeds = __vlm_site__("inputs_embeds_masked_scatter_0", inputs_embeds.masked_scatter, special_image_mask, image_features)

    # Create the mask
    mask_kwargs = {
        "config": self.config.get_text_config(),
        "inputs_embeds": inputs_embeds,
        "attention_mask": attention_mask,
        "cache": cache,
        "position_ids": position_ids,
    }
    is_first_iteration = cache is None or not cache.is_initialized or pixel_values is not None
    if token_type_ids is not None and is_first_iteration:
        # Can attend bidirectionally in prefix and only causally in suffix
        mask_kwargs["block_sequence_ids"] = torch.where(token_type_ids == 0, 0, -1)

    # PG has no sliding window, only full attn. But PG2 needs sliding mask and full mask
    causal_mask = create_causal_mask(**mask_kwargs)
    if getattr(self.config.text_config, "sliding_window", None) is not None:
        sliding_mask_kwargs = mask_kwargs.copy()
        causal_mask = {
            "full_attention": causal_mask,
            "sliding_attention": create_sliding_window_causal_mask(**sliding_mask_kwargs),
        }

    outputs = self.language_model(
        attention_mask=causal_mask,
        position_ids=position_ids,
        cache=cache,
        inputs_embeds=inputs_embeds,
        use_cache=use_cache,
        **kwargs,
    )

    return PaliGemmaModelOutputWithPast(**outputs, image_outputs=mm_encoder_outputs.get("image"))
