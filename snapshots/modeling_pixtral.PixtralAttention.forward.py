# rule pixtral.PixtralAttention: the attention kernel call: queries, keys, values in, head outputs out
# transformers.models.pixtral.modeling_pixtral:PixtralAttention.forward
# transformers/models/pixtral/modeling_pixtral.py
# sites: attention_interface_1

def forward(
    self,
    hidden_states: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
    **kwargs: Unpack[TransformersKwargs],
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Input shape: Batch x Time x Channel"""

    batch_size, patches, _ = hidden_states.size()

    query_states = self.q_proj(hidden_states)
    key_states = self.k_proj(hidden_states)
    value_states = self.v_proj(hidden_states)

    query_states = query_states.view(batch_size, patches, self.num_heads, self.head_dim).transpose(1, 2)
    key_states = key_states.view(batch_size, patches, self.num_heads, self.head_dim).transpose(1, 2)
    value_states = value_states.view(batch_size, patches, self.num_heads, self.head_dim).transpose(1, 2)

    cos, sin = position_embeddings
    query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin, unsqueeze_dim=0)

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

    attn_output = attn_output.reshape(batch_size, patches, -1).contiguous()
    attn_output = self.o_proj(attn_output)

    return attn_output, attn_weights
