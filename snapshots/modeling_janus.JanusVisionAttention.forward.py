# rule janus.JanusVisionAttention: the attention kernel call: queries, keys, values in, head outputs out
# transformers.models.janus.modeling_janus:JanusVisionAttention.forward
# transformers/models/janus/modeling_janus.py
# sites: attention_interface_1

def forward(
    self,
    hidden_states: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    **kwargs: Unpack[TransformersKwargs],
):
    batch_size, seq_len, _ = hidden_states.size()

    query_states = self.q_proj(hidden_states)
    key_states = self.k_proj(hidden_states)
    value_states = self.v_proj(hidden_states)

    query_states = query_states.reshape(-1, self.num_heads, self.head_dim)
    query_states = self.q_norm(query_states)

    key_states = key_states.reshape(-1, self.num_heads, self.head_dim)
    key_states = self.k_norm(key_states)

    query_states = query_states.reshape(batch_size, seq_len, self.num_heads, self.head_dim).transpose(1, 2)
    key_states = key_states.reshape(batch_size, seq_len, self.num_heads, self.head_dim).transpose(1, 2)
    value_states = value_states.view(batch_size, seq_len, self.num_heads, self.head_dim).transpose(1, 2)

    attention_interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(
        self.config._attn_implementation, eager_attention_forward
    )

    attn_output, attn_weights = __vlm_site__("attention_interface_1", attention_interface,
        self,
        query_states,
        key_states,
        value_states,
        attention_mask,
        dropout=0.0 if not self.training else self.attention_dropout,
        scaling=self.scale,
        is_causal=self.is_causal,
        **kwargs,
    )
    attn_output = attn_output.reshape(batch_size, seq_len, self.embed_dim)

    output = self.projection_layer(attn_output)
    output = self.projection_dropout(output)
    return output, attn_weights
