# rule radio.vision-attention: the whole queries, keys and values (transpose_0..2), the per-image split (torch_split_0) and the kernel calls: dense (_1), flash (_2), per image (_3)
# transformers.models.radio.modeling_radio:RadioAttention.forward
# transformers/models/radio/modeling_radio.py
# sites: transpose_0, transpose_1, transpose_2, attention_interface_1, attention_interface_2, torch_split_0, attention_interface_3

def forward(
    self,
    hidden_states: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    cu_seqlens: torch.Tensor | None = None,
    **kwargs: Unpack[TransformersKwargs],
) -> tuple[torch.Tensor, torch.Tensor | None]:
    r"""
    cu_seqlens (`torch.Tensor` of shape `(num_images + 1,)`, *optional*):
        Boundaries of the image sequences packed into `hidden_states`; each image only attends to itself.
    """
    input_shape = hidden_states.shape[:-1]
    hidden_shape = (*input_shape, -1, self.head_dim)

    query_states = __vlm_site__("transpose_0", self.q_proj(hidden_states).view(hidden_shape).transpose, 1, 2)
    key_states = __vlm_site__("transpose_1", self.k_proj(hidden_states).view(hidden_shape).transpose, 1, 2)
    value_states = __vlm_site__("transpose_2", self.v_proj(hidden_states).view(hidden_shape).transpose, 1, 2)

    attention_interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(
        self.config._attn_implementation, eager_attention_forward
    )
    attention_kwargs = {"dropout": 0.0 if not self.training else self.attention_dropout, "scaling": self.scaling}

    if cu_seqlens is None:
        attn_output, attn_weights = __vlm_site__("attention_interface_1", attention_interface,
            self, query_states, key_states, value_states, attention_mask, **attention_kwargs, **kwargs
        )
    elif is_flash_attention_requested(self.config):
        max_seqlen = get_max_seqlen(cu_seqlens, self.config, kwargs)
        attn_output, attn_weights = __vlm_site__("attention_interface_2", attention_interface,
            self,
            query_states,
            key_states,
            value_states,
            attention_mask=None,
            cu_seq_lens_q=cu_seqlens,
            cu_seq_lens_k=cu_seqlens,
            max_length_q=max_seqlen,
            max_length_k=max_seqlen,
            **attention_kwargs,
            **kwargs,
        )
    else:
        # without a varlen kernel, attend within each image separately
        lengths = cu_seqlens[1:] - cu_seqlens[:-1]
        splits = [
            __vlm_site__("torch_split_0", torch.split, tensor, lengths.tolist(), dim=2) for tensor in (query_states, key_states, value_states)
        ]
        outputs = [
            __vlm_site__("attention_interface_3", attention_interface, self, query, key, value, attention_mask=None, **attention_kwargs, **kwargs)
            for query, key, value in zip(*splits)
        ]
        attn_output = torch.cat([output[0] for output in outputs], dim=1)
        attn_weights = None
        # eager returns per-image probabilities; lay them out block-diagonally over the packed sequence
        if outputs[0][1] is not None:
            total_length = query_states.shape[2]
            attn_weights = query_states.new_zeros(
                query_states.shape[0], self.num_attention_heads, total_length, total_length
            )
            start = 0
            for _, weights in outputs:
                end = start + weights.shape[-1]
                attn_weights[..., start:end, start:end] = weights
                start = end

    attn_output = attn_output.reshape(*input_shape, -1).contiguous()
    attn_output = self.o_proj(attn_output)

    return attn_output, attn_weights
