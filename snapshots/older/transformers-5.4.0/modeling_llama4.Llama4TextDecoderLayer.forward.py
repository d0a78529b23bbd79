# rule llama4.text-block: the feed-forward's output (MoE or dense) viewed in the stream's shape, as the block adds it
# transformers.models.llama4.modeling_llama4:Llama4TextDecoderLayer.forward
# transformers/models/llama4/modeling_llama4.py
# sites: hidden_states_view_0

def forward(
    self,
    hidden_states: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    position_ids: torch.LongTensor | None = None,
    past_key_values: Cache | None = None,
    use_cache: bool | None = False,
    position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
    **kwargs: Unpack[FlashAttentionKwargs],
) -> tuple[torch.FloatTensor, tuple[torch.FloatTensor, torch.FloatTensor] | None]:
    residual = hidden_states

    hidden_states = self.input_layernorm(hidden_states)

    # Self Attention
    attention_states, _ = self.self_attn(
        hidden_states=hidden_states,
        position_embeddings=position_embeddings,
        attention_mask=attention_mask,
        past_key_values=past_key_values,
        use_cache=use_cache,
        **kwargs,
    )
    hidden_states = residual + attention_states

    # Fully Connected
    residual = hidden_states
    hidden_states = self.post_attention_layernorm(hidden_states)
    hidden_states = self.feed_forward(hidden_states)
    if self.is_moe_layer:
        hidden_states, _ = hidden_states
    hidden_states = residual + __vlm_site__("hidden_states_view_0", hidden_states.view, residual.shape)
    return hidden_states
