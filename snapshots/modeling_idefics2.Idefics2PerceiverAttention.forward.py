# rule idefics2.Idefics2PerceiverAttention: the attention kernel call: queries, keys, values in, head outputs out
# transformers.models.idefics2.modeling_idefics2:Idefics2PerceiverAttention.forward
# transformers/models/idefics2/modeling_idefics2.py
# sites: attention_interface_1

@deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
def forward(
    self,
    latents: torch.Tensor,
    context: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    position_ids: torch.LongTensor | None = None,
    cache: Cache | None = None,
    **kwargs: Unpack[TransformersKwargs],
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """
    Runs Perceiver Self-Attention, with special (context, latents) appended along the `seq` dimension!

    Args:
        latents (`torch.Tensor`): Tensor of shape [bsz, n_latents, embed_dim] representing fixed length latents to compress to.
        context (`torch.Tensor`): Tensor of shape [bsz, seq, embed_dim] representing long-form context to resample.
        attention_mask (`torch.Tensor`, *optional*): Tensor of shape [bsz, 1, seq, n_latents] representing attention mask.
        position_ids (`torch.LongTensor`, *optional*): Tensor of shape [bsz, seq] representing position indices of each input token.
        cache (`Cache`, *optional*): Tuple of tensors containing cached key and value states.
        output_attentions (`bool`, *optional*, defaults to `False`): Whether to return attention weights.
        use_cache (`bool`, *optional*, defaults to `False`): Whether to use cache for caching.
    """
    bsz, q_len, _ = latents.size()
    kv_seq_len = q_len + context.size()[1]

    hidden_states = torch.concat([context, latents], dim=-2)

    queries = self.q_proj(latents)
    keys = self.k_proj(hidden_states)
    values = self.v_proj(hidden_states)

    queries = queries.view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)
    keys = keys.view(bsz, kv_seq_len, self.num_key_value_heads, self.head_dim).transpose(1, 2)
    values = values.view(bsz, kv_seq_len, self.num_key_value_heads, self.head_dim).transpose(1, 2)

    cache = getattr(self, "cache", cache)

    if cache is not None:
        keys, values = cache.update(keys, values, self.layer_idx, kwargs=kwargs)

    attention_interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(
        self.config._attn_implementation, eager_attention_forward
    )

    attn_output, attn_weights = __vlm_site__("attention_interface_1", attention_interface,
        self,
        queries,
        keys,
        values,
        attention_mask,
        is_causal=self.is_causal,
        scaling=self.scaling,
        dropout=0.0 if not self.training else self.attention_dropout,
        **kwargs,
    )

    attn_output = attn_output.reshape(bsz, q_len, self.num_heads * self.head_dim)
    attn_output = self.o_proj(attn_output)

    return attn_output, attn_weights
