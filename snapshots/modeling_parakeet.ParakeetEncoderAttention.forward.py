# rule parakeet.ParakeetEncoderAttention: the attention kernel call: queries, keys, values in, head outputs out
# transformers.models.parakeet.modeling_parakeet:ParakeetEncoderAttention.forward
# transformers/models/parakeet/modeling_parakeet.py
# sites: attention_interface_1

@deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
def forward(
    self,
    hidden_states: torch.Tensor,
    position_embeddings: torch.Tensor | None,
    attention_mask: torch.Tensor | None = None,
    **kwargs: Unpack[TransformersKwargs],
) -> tuple[torch.Tensor, torch.Tensor]:
    input_shape = hidden_states.shape[:-1]
    batch_size, seq_length = input_shape
    hidden_shape = (batch_size, seq_length, -1, self.head_dim)

    query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
    key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
    value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)

    attention_interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(
        self.config._attn_implementation, eager_attention_forward
    )

    query_states_with_bias_u = query_states + self.bias_u.view(
        1, self.config.num_attention_heads, 1, self.head_dim
    )
    query_states_with_bias_v = query_states + self.bias_v.view(
        1, self.config.num_attention_heads, 1, self.head_dim
    )

    relative_key_states = self.relative_k_proj(position_embeddings)
    relative_key_states = relative_key_states.view(batch_size, -1, self.config.num_attention_heads, self.head_dim)

    # terms (b) and (d)
    matrix_bd = query_states_with_bias_v @ relative_key_states.permute(0, 2, 3, 1)
    matrix_bd = self._rel_shift(matrix_bd)
    matrix_bd = matrix_bd[..., :seq_length]
    matrix_bd = matrix_bd * self.scaling

    if attention_mask is not None:
        matrix_bd = matrix_bd.masked_fill_(attention_mask.logical_not(), torch.finfo(matrix_bd.dtype).min)

    # will compute matrix_ac - terms (a) and (c) - and add matrix_bd
    attn_output, attn_weights = __vlm_site__("attention_interface_1", attention_interface,
        self,
        query=query_states_with_bias_u,
        key=key_states,
        value=value_states,
        attention_mask=matrix_bd,
        dropout=0.0 if not self.training else self.attention_dropout,
        scaling=self.scaling,
        **kwargs,
    )

    attn_output = attn_output.reshape(*input_shape, -1).contiguous()
    attn_output = self.o_proj(attn_output)
    return attn_output, attn_weights
