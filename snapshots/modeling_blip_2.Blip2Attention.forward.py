# rule blip_2.Blip2Attention: the attention kernel call: queries, keys, values in, head outputs out
# transformers.models.blip_2.modeling_blip_2:Blip2Attention.forward
# transformers/models/blip_2/modeling_blip_2.py
# sites: attention_interface_1

def forward(
    self,
    hidden_states: torch.Tensor,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor | None, tuple[torch.Tensor] | None]:
    """Input shape: Batch x Time x Channel"""

    bsz, tgt_len, embed_dim = hidden_states.size()

    mixed_qkv = self.qkv(hidden_states)

    mixed_qkv = mixed_qkv.reshape(bsz, tgt_len, 3, self.num_heads, embed_dim // self.num_heads).permute(
        2, 0, 3, 1, 4
    )
    query_states, key_states, value_states = mixed_qkv[0], mixed_qkv[1], mixed_qkv[2]

    attention_interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(
        self.config._attn_implementation, eager_attention_forward
    )

    attn_output, attn_weights = __vlm_site__("attention_interface_1", attention_interface,
        self,
        query_states,
        key_states,
        value_states,
        attention_mask=None,
        dropout=0.0 if not self.training else self.attention_dropout,
        scaling=self.scale,
        **kwargs,
    )

    attn_output = attn_output.reshape(bsz, tgt_len, -1).contiguous()
    attn_output = self.projection(attn_output)

    return attn_output, attn_weights
