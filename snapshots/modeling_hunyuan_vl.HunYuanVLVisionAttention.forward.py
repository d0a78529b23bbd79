# rule hunyuan_vl.vision-attention: the per-image attention kernel calls and what surrounds them
# transformers.models.hunyuan_vl.modeling_hunyuan_vl:HunYuanVLVisionAttention.forward
# transformers/models/hunyuan_vl/modeling_hunyuan_vl.py
# sites: attention_interface_1, torch_split_0, attention_interface_2, torch_cat_0

def forward(
    self,
    hidden_states: torch.Tensor,
    cu_seqlens: torch.Tensor,
    max_seqlen: int | None = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    query = self.q_proj(hidden_states)
    key = self.k_proj(hidden_states)
    value = self.v_proj(hidden_states)

    batch_size, seq_len, _ = query.shape

    query_states = query.view(batch_size, seq_len, self.num_heads, self.head_dim).transpose(1, 2)
    key_states = key.view(batch_size, seq_len, self.num_heads, self.head_dim).transpose(1, 2)
    value_states = value.view(batch_size, seq_len, self.num_heads, self.head_dim).transpose(1, 2)

    attention_interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(
        self.config._attn_implementation, eager_attention_forward
    )

    if is_flash_attention_requested(self.config):
        # Flash Attention: Use cu_seqlens for variable length attention
        max_seqlen = get_max_seqlen(cu_seqlens, self.config, kwargs={"max_seqlen": max_seqlen})
        attn_output, attn_weights = __vlm_site__("attention_interface_1", attention_interface,
            self,
            query_states,
            key_states,
            value_states,
            scaling=self.scaling,
            cu_seq_lens_q=cu_seqlens,
            cu_seq_lens_k=cu_seqlens,
            max_length_q=max_seqlen,
            max_length_k=max_seqlen,
            is_causal=False,
            **kwargs,
        )
    else:
        # Other implementations: Process each chunk separately
        lengths = cu_seqlens[1:] - cu_seqlens[:-1]
        splits = [
            __vlm_site__("torch_split_0", torch.split, tensor, lengths.tolist(), dim=2) for tensor in (query_states, key_states, value_states)
        ]

        attn_outputs = [
            __vlm_site__("attention_interface_2", attention_interface,
                self,
                q,
                k,
                v,
                scaling=self.scaling,
                is_causal=False,
                **kwargs,
            )[0]
            for q, k, v in zip(*splits)
        ]
        attn_output = __vlm_site__("torch_cat_0", torch.cat, attn_outputs, dim=1)
        attn_weights = None

    attn_output = attn_output.reshape(batch_size, seq_len, -1).contiguous()
    attn_output = self.o_proj(attn_output)
    return attn_output, attn_weights
