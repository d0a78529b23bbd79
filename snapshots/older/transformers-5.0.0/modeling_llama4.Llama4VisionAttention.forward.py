# rule llama4.Llama4VisionAttention: the attention kernel call: queries, keys, values in, head outputs out
# transformers.models.llama4.modeling_llama4:Llama4VisionAttention.forward
# transformers/models/llama4/modeling_llama4.py
# variant: transformers<5.1: the kernel is assigned twice before the call, which nnsight numbers attention_interface_2
# sites: attention_interface_1 (numbered attention_interface_2)

def forward(
    self,
    hidden_states: torch.Tensor,
    freqs_ci: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    past_key_values: Cache | None = None,
    **kwargs: Unpack[FlashAttentionKwargs],
) -> tuple[torch.Tensor, torch.Tensor | None, tuple[torch.Tensor] | None]:
    input_shape = hidden_states.shape[:-1]
    hidden_shape = (*input_shape, -1, self.head_dim)

    query_states = self.q_proj(hidden_states).view(hidden_shape)
    key_states = self.k_proj(hidden_states).view(hidden_shape)
    value_states = self.v_proj(hidden_states).view(hidden_shape)

    query_states, key_states = vision_apply_rotary_emb(query_states, key_states, freqs_ci=freqs_ci)

    query_states = query_states.transpose(1, 2)
    key_states = key_states.transpose(1, 2)
    value_states = value_states.transpose(1, 2)

    attention_interface: Callable = vision_eager_attention_forward
    # flex disable because breaks on TP 8, embed is 88 not power of 2
    if self.config._attn_implementation not in ["eager", "flex_attention"]:
        attention_interface = ALL_ATTENTION_FUNCTIONS[self.config._attn_implementation]

    attn_output, attn_weights = __vlm_site__("attention_interface_1", attention_interface,
        self,
        query_states,
        key_states,
        value_states,
        None,
        dropout=0.0 if not self.training else self.attention_dropout,
        scaling=None,  # TODO Might be enforced here for TP compatibility as scaling is not just sqrt(head_dim)
        is_causal=False,  # HAS TO BE ENFORCED
        **kwargs,
    )

    attn_output = attn_output.reshape(*input_shape, -1).contiguous()
    attn_output = self.o_proj(attn_output)
    return attn_output, attn_weights
