# rule molmo2.Molmo2VisionAttention: the attention kernel call: queries, keys, values in, head outputs out
# transformers.models.molmo2.modeling_molmo2:Molmo2VisionAttention.forward
# transformers/models/molmo2/modeling_molmo2.py
# sites: attention_interface_1

@deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
def forward(
    self,
    hidden_states: torch.Tensor,
    encoder_hidden_states: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    encoder_hidden_states = hidden_states if encoder_hidden_states is None else encoder_hidden_states

    input_shape = hidden_states.shape[:-1]
    hidden_shape = (*input_shape, -1, self.head_dim)
    key_value_shape = (*encoder_hidden_states.shape[:-1], -1, self.head_dim)

    query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
    key_states = self.k_proj(encoder_hidden_states).view(key_value_shape).transpose(1, 2)
    value_states = self.v_proj(encoder_hidden_states).view(key_value_shape).transpose(1, 2)

    attention_interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(
        self.config._attn_implementation, eager_attention_forward
    )

    attn_output, attn_weights = __vlm_site__("attention_interface_1", attention_interface,
        self,
        query_states,
        key_states,
        value_states,
        attention_mask,
        is_causal=self.is_causal,
        scaling=self.scaling,
        dropout=0.0 if not self.training else self.attention_dropout,
        **kwargs,
    )

    attn_output = attn_output.reshape(*input_shape, -1).contiguous()
    attn_output = self.o_proj(attn_output)

    return attn_output, attn_weights
