# rule mistral_large4.MistralLarge4TextAttention: the attention kernel call: queries, keys, values in, head outputs out
# transformers.models.mistral_large4.modeling_mistral_large4:MistralLarge4TextAttention.forward
# transformers/models/mistral_large4/modeling_mistral_large4.py
# sites: attention_interface_1

@deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
def forward(
    self,
    hidden_states: torch.Tensor,
    position_embeddings: tuple[torch.Tensor, torch.Tensor],
    attention_mask: torch.Tensor,
    shared_kv_states: KVSharingDict,
    position_ids: torch.Tensor,
    cache: Cache | None = None,
    prev_topk_indices: torch.Tensor | None = None,
    **kwargs: Unpack[TransformersKwargs],
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    batch_size, seq_length = hidden_states.shape[:-1]
    query_shape = (batch_size, seq_length, -1, self.qk_head_dim)

    q_states = self.q_proj(hidden_states).view(query_shape).transpose(1, 2)
    q_pass, q_rot = torch.split(q_states, [self.qk_nope_head_dim, self.qk_rope_head_dim], dim=-1)

    # Either the layer computes it's own cache or it loads it from shared_kv_states
    if self.is_kv_shared_layer:
        k_pass, k_rot = shared_kv_states["rope" if self.use_rope else "nope"]
    else:
        compressed_kv = self.kv_a_proj_with_mqa(hidden_states)
        kv_pass, k_rot = torch.split(compressed_kv, [self.kv_lora_rank, self.qk_rope_head_dim], dim=-1)
        # Both latents are viewed as single-head, 4D tensors, as expected by `expand_kv`
        k_pass = self.kv_a_layernorm(kv_pass).view(batch_size, 1, seq_length, self.kv_lora_rank)
        k_rot = k_rot.view(batch_size, 1, seq_length, self.qk_rope_head_dim)

    # Apply LeRoPE to the queries and the keys, except if this is a no_rope layer
    if self.use_rope:
        cos, sin = position_embeddings
        # For layers with cache sharing, only rotate the queries: the keys were already rotated by the source layer
        if self.is_kv_shared_layer:
            q_rot, _ = apply_rotary_pos_emb_interleave(q_rot, None, cos, sin)
        else:
            q_rot, k_rot = apply_rotary_pos_emb_interleave(q_rot, k_rot, cos, sin)

    # Update the cache while latent KV is still compressed
    if cache is not None and not self.is_kv_shared_layer:
        k_pass, k_rot = cache.update(k_pass, k_rot, self.layer_idx, kwargs=kwargs)
    # If the layer takes part in cache sharing and computes its own cache, store a copy in shared_kv_states
    if self.store_full_length_kv:
        shared_kv_states["rope" if self.use_rope else "nope"] = (k_pass, k_rot)

    # Recompose and apply softmax-scaling to the queries
    query_states = torch.cat((q_pass, q_rot), dim=-1)
    query_states = self.softmax_scaling(query_states, position_ids, head_dim_first=True)

    key_states, value_states = self.expand_kv(k_pass, k_rot)

    # DSA: select this layer's top-k tokens, or reuse the previous full layer's on `"shared"` layers.
    if self.indexer is not None:
        topk_indices = self.indexer(
            hidden_states,
            position_embeddings,
            attention_mask[:, 0, :, :],
            position_ids,  # Kept for BC
            cache=cache,
        )  # [B, S, topk]
    else:
        if prev_topk_indices is None:
            raise ValueError("Shared DSA layers require top-k indices from a previous full indexer layer.")
        topk_indices = prev_topk_indices

    sparse_indices = None
    if self.config._attn_implementation in ("eager", "sdpa"):
        index_mask = (
            topk_indices.new_ones((batch_size, seq_length, key_states.shape[2]), dtype=torch.bool)
            .scatter(-1, topk_indices.long(), False)
            .unsqueeze(1)
        )

        if attention_mask.dtype == torch.bool:
            attention_mask = attention_mask & ~index_mask
        else:
            attention_mask = attention_mask.masked_fill(index_mask, torch.finfo(hidden_states.dtype).min)
    else:
        sparse_indices = topk_indices

    attention_interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(
        self.config._attn_implementation, eager_attention_forward
    )
    attn_output, attn_weights = __vlm_site__("attention_interface_1", attention_interface,
        self,
        query_states,
        key_states,
        value_states,
        attention_mask,
        dropout=0.0 if not self.training else self.attention_dropout,
        scaling=self.scaling,
        indices=sparse_indices,  # consumed by flash_mla_with_kvcache; ignored by eager / SDPA
        position_ids=position_ids,
        **kwargs,
    )

    attn_output = attn_output.reshape(batch_size, seq_length, -1).contiguous()
    attn_output = self.o_proj(attn_output)
    return attn_output, attn_weights, topk_indices
