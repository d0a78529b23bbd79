# rule muse_spark.image-scatter: image (_0), video (_1) and audio (_2) features scattered into the embeddings
# transformers.models.muse_spark.modeling_muse_spark:MuseSparkModel.forward
# transformers/models/muse_spark/modeling_muse_spark.py
# sites: inputs_embeds_masked_scatter_0, inputs_embeds_masked_scatter_1, inputs_embeds_masked_scatter_2

@can_return_tuple
@auto_docstring
@deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
def forward(
    self,
    input_ids: torch.LongTensor | None = None,
    attention_mask: torch.Tensor | None = None,
    position_ids: torch.LongTensor | None = None,
    cache: Cache | None = None,
    inputs_embeds: torch.Tensor | None = None,
    use_cache: bool | None = None,
    pixel_values: torch.Tensor | None = None,
    image_grid_thw: torch.LongTensor | None = None,
    pixel_values_videos: torch.Tensor | None = None,
    video_grid_thw: torch.LongTensor | None = None,
    input_values: torch.Tensor | None = None,
    input_values_mask: torch.Tensor | None = None,
    mm_encoder_outputs: dict[str, BaseModelOutputWithPooling] | None = None,
    **kwargs: Unpack[TransformersKwargs],
) -> tuple | MuseSparkModelOutputWithPast:
    r"""
    input_values_mask (`torch.Tensor` of shape `(batch_size, num_samples)`, *optional*):
        Which entries of `input_values` are real audio rather than padding, as produced by
        [`MuseSparkFeatureExtractor`]. Required when batching clips of different lengths.

    Example:

    ```python
    >>> import os

    >>> from transformers import AutoProcessor, DistributedConfig, MuseSparkModel

    >>> distributed_config = DistributedConfig(
    ...     tp_size=int(os.environ["WORLD_SIZE"]),
    ...     ep_size=int(os.environ["WORLD_SIZE"]),
    ... )

    >>> processor = AutoProcessor.from_pretrained("meta-models/Muse-Spark-Open-816B-A42B")
    >>> model = MuseSparkModel.from_pretrained(
    ...     "meta-models/Muse-Spark-Open-816B-A42B",
    ...     dtype="auto",
    ...     distributed_config=distributed_config,
    ... )

    >>> messages = [
    ...     {
    ...         "role": "user",
    ...         "content": [
    ...             {"type": "image", "url": "https://huggingface.co/datasets/huggingface/documentation-images/resolve/main/pipeline-cat-chonk.jpeg"},
    ...             {"type": "text", "text": "What is shown in this image?"},
    ...         ],
    ...     },
    ... ]

    >>> inputs = processor.apply_chat_template(
    ...     messages,
    ...     reasoning_effort="medium",
    ...     add_generation_prompt=True,
    ...     tokenize=True,
    ...     return_dict=True,
    ...     return_tensors="pt",
    ... ).to(model.device).to(model.dtype)

    >>> outputs = model(**inputs)
    >>> last_hidden_state = outputs.last_hidden_state
    ```
    """
    if (pixel_values is not None or pixel_values_videos is not None) and mm_encoder_outputs is not None:
        raise ValueError(
            "You cannot specify both pixel_values/pixel_values_videos and mm_encoder_outputs at the same time"
        )

    if inputs_embeds is None:
        multimodal_mask = (
            (input_ids == self.config.image_token_id)
            | (input_ids == self.config.video_token_id)
            | (input_ids == self.config.audio_token_id)
        )
        llm_input_ids = input_ids.clone()
        llm_input_ids[multimodal_mask] = 0
        inputs_embeds = self.get_input_embeddings()(llm_input_ids)

    mm_encoder_outputs = mm_encoder_outputs if mm_encoder_outputs is not None else {}
    if mm_encoder_outputs.get("image") is None and pixel_values is not None:
        mm_encoder_outputs["image"] = self.get_image_features(
            pixel_values, image_grid_thw, return_dict=True, **kwargs
        )

    if mm_encoder_outputs.get("video") is None and pixel_values_videos is not None:
        mm_encoder_outputs["video"] = self.get_video_features(
            pixel_values_videos, video_grid_thw, return_dict=True, **kwargs
        )

    if mm_encoder_outputs.get("image") is not None:
        image_embeds = torch.cat(mm_encoder_outputs["image"].pooler_output, dim=0).to(
            inputs_embeds.device, inputs_embeds.dtype
        )
        image_mask, _ = self.get_placeholder_mask(
            input_ids, inputs_embeds=inputs_embeds, image_features=image_embeds
        )
        inputs_embeds = __vlm_site__("inputs_embeds_masked_scatter_0", inputs_embeds.masked_scatter, image_mask, image_embeds)

    if mm_encoder_outputs.get("video") is not None:
        video_embeds = torch.cat(mm_encoder_outputs["video"].pooler_output, dim=0).to(
            inputs_embeds.device, inputs_embeds.dtype
        )
        _, video_mask = self.get_placeholder_mask(
            input_ids, inputs_embeds=inputs_embeds, video_features=video_embeds
        )
        inputs_embeds = __vlm_site__("inputs_embeds_masked_scatter_1", inputs_embeds.masked_scatter, video_mask, video_embeds)

    if input_values is not None:
        audio_embeds = self.get_audio_features(input_values, input_values_mask).pooler_output
        audio_embeds = audio_embeds.to(device=inputs_embeds.device, dtype=inputs_embeds.dtype)
        audio_mask = self.get_audio_placeholder_mask(
            input_ids, inputs_embeds=inputs_embeds, audio_features=audio_embeds
        )
        inputs_embeds = __vlm_site__("inputs_embeds_masked_scatter_2", inputs_embeds.masked_scatter, audio_mask, audio_embeds)

    outputs = self.language_model(
        input_ids=None,
        position_ids=position_ids,
        attention_mask=attention_mask,
        cache=cache,
        inputs_embeds=inputs_embeds,
        use_cache=use_cache,
        **kwargs,
    )
    return MuseSparkModelOutputWithPast(**outputs, image_outputs=mm_encoder_outputs.get("image"))
