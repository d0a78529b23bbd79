# rule blip_2.image-scatter: the root scatters the language projection's output into the embeddings in its own forward
# transformers.models.blip_2.modeling_blip_2:Blip2ForConditionalGeneration.forward
# transformers/models/blip_2/modeling_blip_2.py
# sites: masked_scatter_0

@can_return_tuple
@auto_docstring
def forward(
    self,
    pixel_values: torch.Tensor,
    input_ids: torch.LongTensor,
    attention_mask: torch.LongTensor | None = None,
    decoder_input_ids: torch.LongTensor | None = None,
    decoder_attention_mask: torch.LongTensor | None = None,
    inputs_embeds: torch.Tensor | None = None,
    labels: torch.LongTensor | None = None,
    interpolate_pos_encoding: bool = False,
    mm_encoder_outputs: dict[str, BaseModelOutputWithPooling] | None = None,
    **kwargs: Unpack[TransformersKwargs],
) -> tuple | Blip2ForConditionalGenerationModelOutput:
    r"""
    input_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
        Indices of input sequence tokens in the vocabulary of the language model. Input tokens can optionally be
        provided to serve as text prompt, which the language model can continue.

        Indices can be obtained using [`Blip2Processor`]. See [`Blip2Processor.__call__`] for details.

        [What are input IDs?](../glossary#input-ids)
    decoder_attention_mask (`torch.BoolTensor` of shape `(batch_size, target_sequence_length)`, *optional*):
        Default behavior: generate a tensor that ignores pad tokens in `decoder_input_ids`. Causal mask will also
        be used by default.

        Only relevant in case an encoder-decoder language model (like T5) is used.

    Examples:

    Prepare processor, model and image input

    ```python
    >>> from PIL import Image
    >>> from huggingface_hub.utils import httpx
    >>> from io import BytesIO
    >>> from transformers import Blip2Processor, Blip2ForConditionalGeneration
    >>> import torch

    >>> device = "cuda" if torch.cuda.is_available() else "cpu"

    >>> processor = Blip2Processor.from_pretrained("Salesforce/blip2-opt-2.7b")
    >>> model = Blip2ForConditionalGeneration.from_pretrained(
    ...     "Salesforce/blip2-opt-2.7b", load_in_8bit=True, device_map={"": 0}, dtype=torch.float16
    ... )  # doctest: +IGNORE_RESULT

    >>> url = "http://images.cocodataset.org/val2017/000000039769.jpg"
    >>> with httpx.stream("GET", url) as response:
    ...     image = Image.open(BytesIO(response.read()))
    ```

    Image captioning (without providing a text prompt):

    ```python
    >>> inputs = processor(images=image, return_tensors="pt").to(device, torch.float16)

    >>> generated_ids = model.generate(**inputs)
    >>> generated_text = processor.batch_decode(generated_ids, skip_special_tokens=True)[0].strip()
    >>> print(generated_text)
    two cats laying on a couch
    ```

    Visual question answering (prompt = question):

    ```python
    >>> prompt = "Question: how many cats are there? Answer:"
    >>> inputs = processor(images=image, text=prompt, return_tensors="pt").to(device="cuda", dtype=torch.float16)

    >>> generated_ids = model.generate(**inputs)
    >>> generated_text = processor.batch_decode(generated_ids, skip_special_tokens=True)[0].strip()
    >>> print(generated_text)
    two
    ```

    Note that int8 inference is also supported through [bitsandbytes](https://github.com/TimDettmers/bitsandbytes).
    This greatly reduces the amount of memory used by the model while maintaining the same performance.

    ```python
    >>> model = Blip2ForConditionalGeneration.from_pretrained(
    ...     "Salesforce/blip2-opt-2.7b", load_in_8bit=True, device_map={"": 0}, dtype=torch.bfloat16
    ... )  # doctest: +IGNORE_RESULT

    >>> inputs = processor(images=image, text=prompt, return_tensors="pt").to(device="cuda", dtype=torch.bfloat16)

    >>> generated_ids = model.generate(**inputs)
    >>> generated_text = processor.batch_decode(generated_ids, skip_special_tokens=True)[0].strip()
    >>> print(generated_text)
    two
    ```"""
    if pixel_values is not None and mm_encoder_outputs is not None:
        raise ValueError("You cannot specify both pixel_values and mm_encoder_outputs at the same time")

    mm_encoder_outputs = mm_encoder_outputs if mm_encoder_outputs is not None else {}
    if mm_encoder_outputs.get("image") is None:
        mm_encoder_outputs["image"]: BaseModelOutputWithVisionQformerOutputs = self.get_image_features(
            pixel_values, interpolate_pos_encoding=interpolate_pos_encoding, return_dict=True
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
    inputs_embeds = __vlm_site__("masked_scatter_0", inputs_embeds.to(language_model_inputs.device).masked_scatter,
        special_image_mask, language_model_inputs
    )

    if self.config.use_decoder_only_language_model:
        outputs = self.language_model(
            inputs_embeds=inputs_embeds,
            attention_mask=attention_mask,
            **kwargs,
        )
        logits = outputs[0]
        loss = None
        # we compute the loss here since we need to take into account the sequence length of the query embeds
        if labels is not None:
            labels = labels.to(logits.device)
            logits = logits[:, -labels.size(1) :, :]
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

    return Blip2ForConditionalGenerationModelOutput(
        loss=loss,
        logits=logits,
        vision_outputs=vision_outputs,
        qformer_outputs=qformer_outputs,
        language_model_outputs=outputs,
    )
