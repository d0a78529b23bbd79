# rule clip.CLIPAttention: the attention kernel call: queries, keys, values in, head outputs out
# transformers.models.clip.modeling_clip:CLIPAttention.forward
# transformers/models/clip/modeling_clip.py
# variant: transformers<5.1: the kernel is assigned twice before the call, which nnsight numbers attention_interface_2
# sites: attention_interface_1 (numbered attention_interface_2)

def forward(
    self,
    hidden_states: torch.Tensor,
    attention_mask: Optional[torch.Tensor] = None,
    causal_attention_mask: Optional[torch.Tensor] = None,
    output_attentions: Optional[bool] = False,
) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Input shape: Batch x Time x Channel"""

    batch_size, seq_length, embed_dim = hidden_states.shape

    queries = self.q_proj(hidden_states)
    keys = self.k_proj(hidden_states)
    values = self.v_proj(hidden_states)

    queries = queries.view(batch_size, seq_length, -1, self.head_dim).transpose(1, 2)
    keys = keys.view(batch_size, seq_length, -1, self.head_dim).transpose(1, 2)
    values = values.view(batch_size, seq_length, -1, self.head_dim).transpose(1, 2)
    # CLIP text model uses both `causal_attention_mask` and `attention_mask`
    # in case FA2 kernel is called, `is_causal` should be inferred from `causal_attention_mask`
    if self.config._attn_implementation == "flash_attention_2":
        self.is_causal = causal_attention_mask is not None
    else:
        if attention_mask is not None and causal_attention_mask is not None:
            attention_mask = attention_mask + causal_attention_mask
        elif causal_attention_mask is not None:
            attention_mask = causal_attention_mask

    attention_interface: Callable = eager_attention_forward
    if self.config._attn_implementation != "eager":
        attention_interface = ALL_ATTENTION_FUNCTIONS[self.config._attn_implementation]

    attn_output, attn_weights = __vlm_site__("attention_interface_1", attention_interface,
        self,
        queries,
        keys,
        values,
        attention_mask,
        is_causal=self.is_causal,
        scaling=self.scale,
        dropout=0.0 if not self.training else self.dropout,
        output_attentions=output_attentions,
    )

    attn_output = attn_output.reshape(batch_size, seq_length, embed_dim).contiguous()
    attn_output = self.out_proj(attn_output)

    if not output_attentions:
        attn_weights = None
    return attn_output, attn_weights
