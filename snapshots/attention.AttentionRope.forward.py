# rule timm.rope-attention: the queries and keys after the rotary embedding (torch_cat_0, _1) and, on the eager branch, the scores (maybe_add_mask_0) and the probabilities (attn_softmax_0)
# timm.layers.attention:AttentionRope.forward
# timm/layers/attention.py
# sites: torch_cat_0, torch_cat_1, maybe_add_mask_0, attn_softmax_0

def forward(
        self,
        x,
        rope: Optional[torch.Tensor] = None,
        attn_mask: Optional[torch.Tensor] = None,
        is_causal: bool = False,
):
    """Forward pass for the attention module.

    Args:
        x: Input tensor of shape (batch_size, sequence_length, embedding_dim)
        rope: Rotary position embeddings tensor for position-aware attention
        attn_mask: Optional attention mask to apply during attention computation
        is_causal: If True, use causal (autoregressive) masking

    Returns:
        Tensor of shape (batch_size, sequence_length, dim_out)
    """
    B, N, C = x.shape
    gate = self.gate(x).sigmoid() if self.gate is not None else None

    if self.qkv is not None:
        qkv = self.qkv(x)
        qkv = qkv.reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)  # B, num_heads, N, head_dim
    else:
        q = self.q_proj(x).reshape(B, N, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).reshape(B, N, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).reshape(B, N, self.num_kv_heads, self.head_dim).transpose(1, 2)

    q, k = self.q_norm(q), self.k_norm(k)

    if rope is not None:
        npt = self.num_prefix_tokens
        half = getattr(self, 'rotate_half', False)
        q = __vlm_site__("torch_cat_0", torch.cat, [q[:, :, :npt, :], apply_rot_embed_cat(q[:, :, npt:, :], rope, half=half)], dim=2).type_as(v)
        k = __vlm_site__("torch_cat_1", torch.cat, [k[:, :, :npt, :], apply_rot_embed_cat(k[:, :, npt:, :], rope, half=half)], dim=2).type_as(v)

    if self.num_kv_groups > 1:
        # Expand K/V heads to match Q heads for grouped-query attention. Done after norm + rope so the
        # (cheaper) per-kv-head ops run once. repeat_interleave keeps the group -> head mapping identical
        # to reference impls that tile kv heads (head h uses kv head h // num_kv_groups).
        k = k.repeat_interleave(self.num_kv_groups, dim=1)
        v = v.repeat_interleave(self.num_kv_groups, dim=1)

    if self.fused_attn:
        x = F.scaled_dot_product_attention(
            q, k, v,
            attn_mask=attn_mask,
            dropout_p=self.attn_drop.p if self.training else 0.,
            is_causal=is_causal,
        )
    else:
        q = q * self.scale
        attn = q @ k.transpose(-2, -1)
        attn_bias = resolve_self_attn_mask(N, attn, attn_mask, is_causal)
        attn = __vlm_site__("maybe_add_mask_0", maybe_add_mask, attn, attn_bias)
        attn = __vlm_site__("attn_softmax_0", attn.softmax, dim=-1)

        attn = self.attn_drop(attn)
        x = attn @ v

    x = x.transpose(1, 2).reshape(B, N, self.attn_dim)
    x = self.norm(x)
    if gate is not None:
        x = x * gate
    x = self.proj(x)
    x = self.proj_drop(x)
    return x
