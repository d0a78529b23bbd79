# rule dots3_note.Dots3NoteTextAttention: the attention kernel call: queries, keys, values in, head outputs out
# transformers.models.dots3_note.modeling_dots3_note:Dots3NoteTextAttention.forward
# transformers/models/dots3_note/modeling_dots3_note.py
# sites: attention_interface_1

@deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
def forward(
    self,
    hidden_states: torch.Tensor,
    position_embeddings: tuple[torch.Tensor, torch.Tensor],
    attention_mask: torch.Tensor | None,
    cache: Cache | None = None,
    **kwargs: Unpack[TransformersKwargs],
) -> tuple[torch.Tensor, torch.Tensor | None, tuple[torch.Tensor] | None]:
    batch_size, seq_length = hidden_states.shape[:-1]
    query_shape = (batch_size, seq_length, -1, self.qk_head_dim)

    q_resid = self.q_a_layernorm(self.q_a_proj(hidden_states))
    # Dots rescales the normalized Q/KV latents before projection, including the indexer's query input.
    q_resid = q_resid * self.q_lora_scale
    q_states = self.q_b_proj(q_resid).view(query_shape).transpose(1, 2)
    q_pass, q_rot = torch.split(q_states, [self.qk_nope_head_dim, self.qk_rope_head_dim], dim=-1)

    compressed_kv = self.kv_a_proj_with_mqa(hidden_states)
    kv_pass, k_rot = torch.split(compressed_kv, [self.kv_lora_rank, self.qk_rope_head_dim], dim=-1)
    k_pass = self.kv_a_layernorm(kv_pass.contiguous()).view(batch_size, 1, seq_length, self.kv_lora_rank)
    k_pass = k_pass * self.kv_lora_scale

    # Dots additionally normalizes the shared K-RoPE head before applying interleaved RoPE.
    k_rot = k_rot.view(batch_size, 1, seq_length, self.qk_rope_head_dim)
    k_rot = self.k_rope_only_layernorm(k_rot)

    cos, sin = position_embeddings
    q_dtype, k_dtype = q_rot.dtype, k_rot.dtype
    q_rot, k_rot = apply_rotary_pos_emb_interleave(q_rot, k_rot, cos, sin)
    q_rot, k_rot = q_rot.to(q_dtype), k_rot.to(k_dtype)

    if cache is not None:
        k_pass, k_rot = cache.update(k_pass, k_rot, self.layer_idx, kwargs=kwargs)

    query_states = torch.cat((q_pass, q_rot), dim=-1)
    key_states, value_states = self.expand_kv(k_pass, k_rot)

    sparse_indices = None
    if self.indexer is not None:
        topk_indices = self.indexer(
            hidden_states,
            q_resid,
            position_embeddings,
            attention_mask[:, 0],
            position_ids=None,  # Unused backward-compatibility argument in the shared indexer.
            cache=cache,
        )
        if self.config._attn_implementation in ("eager", "sdpa"):
            index_mask = (
                topk_indices.new_ones((batch_size, seq_length, key_states.shape[-2]), dtype=torch.bool)
                .scatter(-1, topk_indices.long(), False)
                .unsqueeze(1)
            )
            if attention_mask.dtype == torch.bool:
                attention_mask = attention_mask & ~index_mask
            else:
                attention_mask = attention_mask.masked_fill(index_mask, torch.finfo(hidden_states.dtype).min)
        else:
            sparse_indices = topk_indices

    attention_interface = ALL_ATTENTION_FUNCTIONS.get_interface(
        self.config._attn_implementation, eager_attention_forward
    )
    attn_output, attn_weights = __vlm_site__("attention_interface_1", attention_interface,
        self,
        query_states,
        key_states,
        value_states,
        attention_mask,
        dropout=self.attention_dropout if self.training else 0.0,
        scaling=self.scaling,
        sliding_window=self.sliding_window,
        indices=sparse_indices,
        **kwargs,
    )

    # Dots applies a per-head sigmoid gate before the output projection.
    gate = self.g_proj(hidden_states).view(batch_size, seq_length, -1, 1)
    attn_output = attn_output * gate.sigmoid()

    attn_output = attn_output.reshape(batch_size, seq_length, -1)
    attn_output = self.o_proj(attn_output)
    return attn_output, attn_weights
