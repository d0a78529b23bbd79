# rule muse_spark.vision-attention: the per-image attention kernel calls and what surrounds them
# transformers.models.muse_spark.modeling_muse_spark:MuseSparkVisionAttention.forward
# transformers/models/muse_spark/modeling_muse_spark.py
# sites: attention_interface_1, torch_split_0, attention_interface_2, torch_cat_0

def forward(
    self,
    hidden_states: torch.Tensor,
    cu_seqlens: torch.Tensor,
    position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
    max_seqlen: int | None = None,
    **kwargs,
) -> torch.Tensor:
    seq_length = hidden_states.shape[0]

    query_states = self.q_proj(hidden_states).reshape(1, seq_length, -1, self.head_dim)
    key_states = self.k_proj(hidden_states).reshape(1, seq_length, -1, self.head_dim)
    value_states = self.v_proj(hidden_states).reshape(1, seq_length, -1, self.head_dim)

    cos, sin = position_embeddings
    query_states, key_states = apply_rotary_pos_emb_vision(query_states, key_states, cos, sin)

    query_states = query_states.transpose(2, 1)
    key_states = key_states.transpose(2, 1)
    value_states = value_states.transpose(2, 1)

    attention_interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(
        self.config._attn_implementation, eager_attention_forward
    )

    if is_flash_attention_requested(self.config):
        # Flash Attention: Use cu_seqlens for variable length attention
        max_seqlen = get_max_seqlen(cu_seqlens, self.config, kwargs={"max_seqlen": max_seqlen})
        attn_output, _ = __vlm_site__("attention_interface_1", attention_interface,
            self,
            query_states,
            key_states,
            value_states,
            attention_mask=None,
            scaling=self.scaling,
            dropout=0.0 if not self.training else self.attention_dropout,
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
                attention_mask=None,
                scaling=self.scaling,
                dropout=0.0 if not self.training else self.attention_dropout,
                is_causal=False,
                **kwargs,
            )[0]
            for q, k, v in zip(*splits)
        ]
        attn_output = __vlm_site__("torch_cat_0", torch.cat, attn_outputs, dim=1)

    attn_output = attn_output.reshape(seq_length, -1).contiguous()
    attn_output = self.proj(attn_output)
    return attn_output
