# rule instructblip.image-scatter: the root scatters the language projection's output into the embeddings in its own forward
# transformers.models.instructblip.modeling_instructblip:InstructBlipForConditionalGeneration.forward
# transformers/models/instructblip/modeling_instructblip.py
# sites: inputs_embeds_masked_scatter_0

@can_return_tuple
@auto_docstring
def forward(
    self,
    pixel_values: torch.Tensor,
    qformer_input_ids: torch.Tensor,
    qformer_attention_mask: torch.LongTensor | None = None,
    input_ids: torch.Tensor | None = None,
    attention_mask: torch.LongTensor | None = None,
    decoder_input_ids: torch.LongTensor | None = None,
    decoder_attention_mask: torch.LongTensor | None = None,
    inputs_embeds: torch.Tensor | None = None,
    labels: torch.LongTensor | None = None,
    interpolate_pos_encoding: bool = False,
    mm_encoder_outputs: dict[str, BaseModelOutputWithPooling] | None = None,
    **kwargs: Unpack[TransformersKwargs],
) -> tuple | InstructBlipForConditionalGenerationModelOutput:
    r"""
    qformer_input_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
        Indices of input sequence tokens in the vocabulary of the Q-Former. Input tokens can optionally be provided
        to serve as text prompt, which the Q-Former model will encode.

        Indices can be obtained using [`InstructBlipProcessor`]. See [`InstructBlipProcessor.__call__`] for
        details.

        [What are input IDs?](../glossary#input-ids)
    qformer_attention_mask (`torch.Tensor` of shape `(batch_size, sequence_length)`, *optional*):
        Mask to avoid performing attention on padding token indices. Mask values selected in `[0, 1]`:

        - 1 for tokens that are **not masked**,
        - 0 for tokens that are **masked**.

        [What are attention masks?](../glossary#attention-mask)
    decoder_attention_mask (`torch.BoolTensor` of shape `(batch_size, target_sequence_length)`, *optional*):
        Default behavior: generate a tensor that ignores pad tokens in `decoder_input_ids`. Causal mask will also
        be used by default.

        Only relevant in case an encoder-decoder language model (like T5) is used.
    labels (`torch.LongTensor` of shape `(batch_size,)`, *optional*):
        Labels for computing the language modeling loss. Indices should be in `[-100, 0, ..., config.vocab_size -
        1]`. All labels set to `-100` are ignored (masked), the loss is only computed for labels in `[0, ...,
        config.vocab_size]`

    Examples:

    ```python
    >>> from transformers import InstructBlipProcessor, InstructBlipForConditionalGeneration
    >>> import torch
    >>> from PIL import Image
    >>> from huggingface_hub.utils import httpx
    >>> from io import BytesIO

    >>> model = InstructBlipForConditionalGeneration.from_pretrained("Salesforce/instructblip-vicuna-7b")
    >>> processor = InstructBlipProcessor.from_pretrained("Salesforce/instructblip-vicuna-7b")

    >>> device = "cuda" if torch.cuda.is_available() else "cpu"
    >>> model.to(device)  # doctest: +IGNORE_RESULT

    >>> url = "https://huggingface.co/datasets/hf-internal-testing/transformers-synthetic-assets/resolve/main/images/lavis_confusing_pictures.jpg"
    >>> with httpx.stream("GET", url) as response:
    ...     image = Image.open(BytesIO(response.read())).convert("RGB")
    >>> prompt = "What is unusual about this image?"
    >>> inputs = processor(images=image, text=prompt, return_tensors="pt").to(device)

    >>> outputs = model.generate(
    ...     **inputs,
    ...     do_sample=False,
    ...     num_beams=5,
    ...     max_length=256,
    ...     min_length=1,
    ...     top_p=0.9,
    ...     repetition_penalty=1.5,
    ...     length_penalty=1.0,
    ...     temperature=1,
    ... )
    >>> generated_text = processor.batch_decode(outputs, skip_special_tokens=True)[0].strip()
    >>> print(generated_text)
    The unusual aspect of this image is that a man is ironing clothes on the back of a yellow SUV, which is parked in the middle of a busy city street. This is an unconventional approach to ironing clothes, as it requires the man to balance himself and his ironing equipment on top of the vehicle while navigating through traffic. Additionally, the presence of taxis and other vehicles in the scene further emphasizes the unusual nature of this situation.
    ```"""
    if pixel_values is not None and mm_encoder_outputs is not None:
        raise ValueError("You cannot specify both pixel_values and mm_encoder_outputs at the same time")

    mm_encoder_outputs = mm_encoder_outputs if mm_encoder_outputs is not None else {}
    if mm_encoder_outputs.get("image") is None:
        mm_encoder_outputs["image"]: BaseModelOutputWithVisionQformerOutputs = self.get_image_features(
            pixel_values,
            qformer_input_ids=qformer_input_ids,
            qformer_attention_mask=qformer_attention_mask,
            interpolate_pos_encoding=interpolate_pos_encoding,
            return_dict=True,
        )
    language_model_inputs = mm_encoder_outputs["image"].pooler_output
    qformer_outputs = mm_encoder_outputs["image"].qformer_outputs
    vision_outputs = mm_encoder_outputs["image"].vision_outputs

    if inputs_embeds is None:
        inputs_embeds = self.get_input_embeddings()(input_ids)

    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)

    language_model_inputs = language_model_inputs.to(inputs_embeds.device, inputs_embeds.dtype)
    special_image_mask = self.get_placeholder_mask(input_ids, inputs_embeds=inputs_embeds)
    inputs_embeds = __vlm_site__("inputs_embeds_masked_scatter_0", inputs_embeds.masked_scatter, special_image_mask, language_model_inputs)

    if self.config.use_decoder_only_language_model:
        outputs = self.language_model(
            inputs_embeds=inputs_embeds,
            attention_mask=attention_mask,
            **kwargs,
        )
        logits = outputs[0]
        loss = None
        if labels is not None:
            loss = self.loss_function(
                logits=logits, labels=labels, vocab_size=self.config.text_config.vocab_size, **kwargs
            )

    else:
        kwargs["return_dict"] = True
        outputs = self.language_model(
            inputs_embeds=inputs_embeds,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask,
            labels=labels,
            **kwargs,
        )
        loss = outputs.loss
        logits = outputs.logits

    return InstructBlipForConditionalGenerationModelOutput(
        loss=loss,
        logits=logits,
        vision_outputs=vision_outputs,
        qformer_outputs=qformer_outputs,
        language_model_outputs=outputs,
    )
