# rule lfm3_vl.vision-attention: the per-image attention kernel calls and what surrounds them
# transformers.models.lfm3_vl.modeling_lfm3_vl:Lfm3VlVisionAttention.forward
# transformers/models/lfm3_vl/modeling_lfm3_vl.py
# sites: attention_interface_1, torch_split_0, attention_interface_2, torch_cat_0

def forward(
    self,
    hidden_states: torch.Tensor,
    cu_seqlens: torch.Tensor,
    position_embeddings: tuple[torch.Tensor, torch.Tensor],
    max_seqlen: int | None = None,
    attention_mask: torch.Tensor | None = None,
    **kwargs,
) -> torch.Tensor:
    input_shape = hidden_states.shape[:-1]
    hidden_shape = (*input_shape, -1, self.head_dim)
    # diff -> separate grouped-query projections with RMSNorm on the query and key heads instead of a fused qkv
    query_states = self.q_norm(self.q_proj(hidden_states).view(hidden_shape))
    key_states = self.k_norm(self.k_proj(hidden_states).view(hidden_shape))
    value_states = self.v_proj(hidden_states).view(hidden_shape)

    cos, sin = position_embeddings
    query_states, key_states = apply_rotary_pos_emb_vision(query_states, key_states, cos, sin)

    query_states = query_states.transpose(0, 1).unsqueeze(0)
    key_states = key_states.transpose(0, 1).unsqueeze(0)
    value_states = value_states.transpose(0, 1).unsqueeze(0)

    attention_interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(
        self.config._attn_implementation, eager_attention_forward
    )

    if is_flash_attention_requested(self.config):
        # Flash Attention 2: Use cu_seqlens for variable length attention
        max_seqlen = get_max_seqlen(cu_seqlens, self.config, kwargs={"max_seqlen": max_seqlen})
        attn_output, attn_weights = __vlm_site__("attention_interface_1", attention_interface,
            self,
            query_states,
            key_states,
            value_states,
            attention_mask=attention_mask,
            scaling=self.scaling,
            dropout=0.0,
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

        attn_outputs, attn_weights = [], []
        for q, k, v in zip(*splits):
            attn_output, attn_weight = __vlm_site__("attention_interface_2", attention_interface,
                self,
                q,
                k,
                v,
                attention_mask=attention_mask,
                scaling=self.scaling,
                dropout=0.0,
                is_causal=False,
                **kwargs,
            )
            attn_outputs.append(attn_output)
            attn_weights.append(attn_weight)

        attn_output = __vlm_site__("torch_cat_0", torch.cat, attn_outputs, dim=1)
        # frames of different shapes have differently sized maps: one entry per frame, or None under sdpa
        attn_weights = None if attn_weights[0] is None else tuple(attn_weights)

    attn_output = attn_output.reshape(*input_shape, -1).contiguous()
    attn_output = self.out_proj(attn_output)

    return attn_output, attn_weights
