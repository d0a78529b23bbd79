# rule mllama.MllamaTextCrossAttention: the attention kernel call: queries, keys, values in, head outputs out
# transformers.models.mllama.modeling_mllama:MllamaTextCrossAttention.forward
# transformers/models/mllama/modeling_mllama.py
# sites: attention_interface_1

@deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
def forward(
    self,
    hidden_states: torch.Tensor,
    cross_attention_states: torch.Tensor | None = None,
    cache: Cache | None = None,
    attention_mask: torch.Tensor | None = None,
    use_cache: bool | None = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor | None, tuple[torch.Tensor] | None]:
    """Input shape: Batch x Time x Channel"""
    bsz, q_len, _ = hidden_states.size()
    query_states = self.q_proj(hidden_states)
    query_states = query_states.view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)
    query_states = self.q_norm(query_states)

    if cross_attention_states is not None:
        key_states = self.k_proj(cross_attention_states)
        value_states = self.v_proj(cross_attention_states)
        key_states = key_states.view(bsz, -1, self.num_key_value_heads, self.head_dim).transpose(1, 2)
        value_states = value_states.view(bsz, -1, self.num_key_value_heads, self.head_dim).transpose(1, 2)

        key_states = self.k_norm(key_states)
        if cache is not None:
            # if we have a new image + new tokens, we only computed key_states on that new image
            # we still update the cross key states, past_image, new_image. And use it!
            key_states, value_states = cache.update(key_states, value_states, self.layer_idx, kwargs=kwargs)
    else:
        # `MllamaTextModel` skips this layer entirely when there is nothing cached, so assume the cache exists
        # and let it fail loudly otherwise.
        key_states, value_states = (
            cache.layers[self.layer_idx].keys,
            cache.layers[self.layer_idx].values,
        )

    attention_interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(
        self.config._attn_implementation, eager_attention_forward
    )

    attn_output, attn_weights = __vlm_site__("attention_interface_1", attention_interface,
        self,
        query_states,
        key_states,
        value_states,
        attention_mask,
        dropout=0.0 if not self.training else self.dropout,
        scaling=self.scaling,
        **kwargs,
    )

    attn_output = attn_output.reshape(bsz, q_len, -1).contiguous()
    attn_output = self.o_proj(attn_output)

    return attn_output, attn_weights
