# rule qwen3_5_moe.gated-deltanet: the gated delta rule kernel calls: queries, keys, values, decays, betas in; output and recurrent state out
# transformers.models.qwen3_5_moe.modeling_qwen3_5_moe:Qwen3_5MoeGatedDeltaNet.forward
# transformers/models/qwen3_5_moe/modeling_qwen3_5_moe.py
# variant: transformers>=5.25: a prompt pass runs the per-token kernel after the chunk call for each token whose state the cache keeps
# sites: torch_recurrent_gated_delta_rule_0, torch_chunk_gated_delta_rule_0, torch_recurrent_gated_delta_rule_1

@force_accelerate_hooks("conv1d")
@deprecate_kwarg("cache_params", "5.40.0", new_name="cache")
def forward(
    self,
    hidden_states: torch.Tensor,
    cache: Cache | None = None,
    attention_mask: torch.Tensor | None = None,
    **kwargs: Unpack[TransformersKwargs],
):
    hidden_states = apply_mask_to_padding_states(hidden_states, attention_mask)

    # Set up dimensions for reshapes later
    batch_size, seq_len, _ = hidden_states.shape
    # Retrieve the recurrent state if there is a cache. It may be None if the layer is not initialized.
    if cache is not None:
        recurrent_state = cache.get_recurrent_state(self.layer_idx, state_idx=0)
    else:
        recurrent_state = None

    mixed_qkv = self.in_proj_qkv(hidden_states)
    mixed_qkv = mixed_qkv.transpose(1, 2)

    z = self.in_proj_z(hidden_states)
    z = z.reshape(batch_size, seq_len, -1, self.head_v_dim)

    b = self.in_proj_b(hidden_states)
    a = self.in_proj_a(hidden_states)

    mixed_qkv = causal_conv1d_forward(
        self.conv1d,
        mixed_qkv,
        cache,
        self.layer_idx,
        activation=self.activation,
        **kwargs,
    )

    mixed_qkv = mixed_qkv.transpose(1, 2)
    query, key, value = torch.split(
        mixed_qkv,
        [
            self.key_dim,
            self.key_dim,
            self.value_dim,
        ],
        dim=-1,
    )

    query = query.reshape(batch_size, seq_len, -1, self.head_k_dim)
    key = key.reshape(batch_size, seq_len, -1, self.head_k_dim)
    value = value.reshape(batch_size, seq_len, -1, self.head_v_dim)

    beta = b.sigmoid()
    # If the model is loaded in fp16, without the .float() here, A might be -inf
    g = -self.A_log.float().exp() * F.softplus(a.float() + self.dt_bias)

    if recurrent_state is not None and seq_len == 1:
        core_attn_out, last_recurrent_state = __vlm_site__("torch_recurrent_gated_delta_rule_0", torch_recurrent_gated_delta_rule,
            query,
            key,
            value,
            g=g,
            beta=beta,
            initial_state=recurrent_state,
            output_final_state=cache is not None,
            use_qk_l2norm_in_kernel=True,
            cu_seqlens=kwargs.pop("cu_seq_lens_q", None),
            **kwargs,
        )
    else:
        num_intermediate_recurrent_states = (
            cache.get_recurrent_states_to_keep(self.layer_idx) if cache is not None else 0
        )
        # Cannot be more than the number of tokens
        num_intermediate_recurrent_states = min(num_intermediate_recurrent_states, seq_len)
        # Since we want the last num_intermediate_recurrent_states, we need to artifically remove them from the chunks, and split the inputs
        effective_sequence_length = seq_len - num_intermediate_recurrent_states
        chunked_query, sequential_query = torch.tensor_split(query, [effective_sequence_length], dim=1)
        chunked_key, sequential_key = torch.tensor_split(key, [effective_sequence_length], dim=1)
        chunked_value, sequential_value = torch.tensor_split(value, [effective_sequence_length], dim=1)
        chunked_beta, sequential_beta = torch.tensor_split(beta, [effective_sequence_length], dim=1)
        chunked_g, sequential_g = torch.tensor_split(g, [effective_sequence_length], dim=1)

        all_outputs = []
        # First, perform the fast chunked computation
        chunked_attn_out, chunked_last_recurrent_state = __vlm_site__("torch_chunk_gated_delta_rule_0", torch_chunk_gated_delta_rule,
            chunked_query,
            chunked_key,
            chunked_value,
            g=chunked_g,
            beta=chunked_beta,
            initial_state=recurrent_state,
            output_final_state=cache is not None,
            use_qk_l2norm_in_kernel=True,
            cu_seqlens=kwargs.pop("cu_seq_lens_q", None),
            **kwargs,
        )
        all_outputs.append(chunked_attn_out)
        # If we need to return intermediate recurrent state, we now do it sequentially after the chunked part
        intermediate_recurrent_states = []
        last_recurrent_state = chunked_last_recurrent_state
        for i in range(num_intermediate_recurrent_states):
            local_attn_out, last_recurrent_state = __vlm_site__("torch_recurrent_gated_delta_rule_1", torch_recurrent_gated_delta_rule,
                sequential_query[:, i : i + 1, ...],
                sequential_key[:, i : i + 1, ...],
                sequential_value[:, i : i + 1, ...],
                g=sequential_g[:, i : i + 1, ...],
                beta=sequential_beta[:, i : i + 1, ...],
                initial_state=last_recurrent_state,
                output_final_state=True,
                use_qk_l2norm_in_kernel=True,
                **kwargs,
            )
            # Combine them
            all_outputs.append(local_attn_out)
            intermediate_recurrent_states.append(last_recurrent_state)

        # Cat all outputs
        core_attn_out = torch.cat(all_outputs, dim=1)

        # In case we needed intermediate states, we return them, otherwise the last one is the chunked one
        last_recurrent_state = (
            intermediate_recurrent_states
            if len(intermediate_recurrent_states) > 0
            else chunked_last_recurrent_state
        )

    # Update cache
    if cache is not None:
        cache.update_recurrent_state(last_recurrent_state, self.layer_idx)

    # reshape input data into 2D tensor
    core_attn_out = core_attn_out.reshape(-1, self.head_v_dim)
    z = z.reshape(-1, self.head_v_dim)
    core_attn_out = self.norm(core_attn_out, z)
    core_attn_out = core_attn_out.reshape(batch_size, seq_len, -1)

    output = self.out_proj(core_attn_out)
    return output
