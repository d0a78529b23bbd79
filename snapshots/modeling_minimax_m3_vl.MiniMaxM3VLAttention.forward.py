# rule minimax_m3_vl.MiniMaxM3VLAttention: the attention kernel call: queries, keys, values in, head outputs out
# transformers.models.minimax_m3_vl.modeling_minimax_m3_vl:MiniMaxM3VLAttention.forward
# transformers/models/minimax_m3_vl/modeling_minimax_m3_vl.py
# sites: attention_interface_1

@deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
def forward(
    self,
    hidden_states: torch.Tensor,
    position_embeddings: tuple[torch.Tensor, torch.Tensor],
    attention_mask: torch.Tensor | None,
    cache: Cache | None = None,
    **kwargs: Unpack[TransformersKwargs],
) -> tuple[torch.Tensor, torch.Tensor | None]:
    input_shape = hidden_states.shape[:-1]
    hidden_shape = (*input_shape, -1, self.head_dim)

    query_states = self.q_norm(self.q_proj(hidden_states).view(hidden_shape)).transpose(1, 2)
    key_states = self.k_norm(self.k_proj(hidden_states).view(hidden_shape)).transpose(1, 2)
    value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)

    cos, sin = position_embeddings
    query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)

    if cache is not None:
        key_states, value_states = cache.update(key_states, value_states, self.layer_idx, kwargs=kwargs)

    attention_interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(
        self.config._attn_implementation, eager_attention_forward
    )
    block_indices = None
    if self.indexer is not None:
        position_ids = kwargs.get("position_ids")
        if position_ids is None:
            position_ids = torch.arange(
                key_states.shape[2] - query_states.shape[2], key_states.shape[2], device=query_states.device
            )
        position_ids = (position_ids if position_ids.ndim > 1 else position_ids.unsqueeze(0)).expand(
            query_states.shape[0], -1
        )
        block_indices = self.indexer(hidden_states, position_embeddings, cache, position_ids)
        if self.config._attn_implementation in ("eager", "sdpa"):
            attention_mask = self.indexer.build_block_mask(
                block_indices,
                attention_mask,
                key_states.shape[2],
                query_states.dtype,
                query_states.device,
                position_ids,
            )

    attn_output, attn_weights = __vlm_site__("attention_interface_1", attention_interface,
        self,
        query_states,
        key_states,
        value_states,
        attention_mask,
        dropout=0.0 if not self.training else self.attention_dropout,
        scaling=self.scaling,
        block_indices=block_indices,
        **kwargs,
    )
    attn_output = attn_output.reshape(*input_shape, -1).contiguous()
    return self.o_proj(attn_output), attn_weights
