# rule granite_docling.deepstack: the DeepStack feature added after each of the first text blocks
# transformers.models.granite_docling.modeling_granite_docling:GraniteDoclingTextModel.forward
# transformers/models/granite_docling/modeling_granite_docling.py
# sites: self__deepstack_process_0

@merge_with_config_defaults
@capture_outputs
@auto_docstring
@deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
def forward(
    self,
    input_ids: torch.LongTensor | None = None,
    attention_mask: torch.Tensor | None = None,
    position_ids: torch.LongTensor | None = None,
    cache: Cache | None = None,
    inputs_embeds: torch.FloatTensor | None = None,
    use_cache: bool | None = None,
    visual_pos_masks: torch.BoolTensor | None = None,
    deepstack_visual_embeds: list[torch.Tensor] | None = None,
    **kwargs: Unpack[TransformersKwargs],
) -> BaseModelOutputWithPast:
    r"""
    visual_pos_masks (`torch.BoolTensor` of shape `(batch_size, sequence_length)`, *optional*):
        Positions of the image tokens that receive the DeepStack features.
    deepstack_visual_embeds (`list[torch.Tensor]`, *optional*):
        DeepStack features, each of shape `(num_image_tokens, hidden_size)`. Entry `i` is added to the hidden
        states at `visual_pos_masks` after decoder layer `i`.
    """
    if (input_ids is None) ^ (inputs_embeds is not None):
        raise ValueError("You must specify exactly one of input_ids or inputs_embeds")

    if inputs_embeds is None:
        inputs_embeds = self.embed_tokens(input_ids)

    inputs_embeds = inputs_embeds * self.embedding_multiplier

    if use_cache and cache is None:
        cache = DynamicCache(config=self.config)

    if position_ids is None:
        past_seen_tokens = cache.get_seq_length() if cache is not None else 0
        position_ids = torch.arange(inputs_embeds.shape[1], device=inputs_embeds.device) + past_seen_tokens
        position_ids = position_ids.unsqueeze(0)

    causal_mask = create_causal_mask(
        config=self.config,
        inputs_embeds=inputs_embeds,
        attention_mask=attention_mask,
        cache=cache,
        position_ids=position_ids,
    )

    hidden_states = inputs_embeds
    position_embeddings = self.rotary_emb(hidden_states, position_ids=position_ids)

    for layer_idx, decoder_layer in enumerate(self.layers[: self.config.num_hidden_layers]):
        hidden_states = decoder_layer(
            hidden_states,
            attention_mask=causal_mask,
            position_ids=position_ids,
            cache=cache,
            use_cache=use_cache,
            position_embeddings=position_embeddings,
            **kwargs,
        )
        if deepstack_visual_embeds is not None and layer_idx < len(deepstack_visual_embeds):
            hidden_states = __vlm_site__("self__deepstack_process_0", self._deepstack_process,
                hidden_states,
                visual_pos_masks,
                deepstack_visual_embeds[layer_idx],
            )

    hidden_states = self.norm(hidden_states)
    return BaseModelOutputWithPast(
        last_hidden_state=hidden_states,
        cache=cache,
    )
