# rule opt.OPTAttention: the attention kernel call: queries, keys, values in, head outputs out
# transformers.models.opt.modeling_opt:OPTAttention.forward
# transformers/models/opt/modeling_opt.py
# sites: attention_interface_1

@deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
def forward(
    self,
    hidden_states: torch.Tensor,
    cache: Cache | None = None,
    attention_mask: torch.Tensor | None = None,
    output_attentions: bool = False,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor | None, Cache | None]:
    """Input shape: Batch x Time x Channel"""
    bsz, tgt_len, _ = hidden_states.size()

    # Scaling is susceptible to floating point arithmetics' imprecisions
    # which can lead to different results (this is dependent from model
    # to model, e.g. whisper is one such case). We therefore keep the
    # original order of scaling to follow the original implementation
    # and enforce no scaling (1.0) in the attention call below.
    query_states = self.q_proj(hidden_states) * self.scaling
    query_states = query_states.view(bsz, -1, self.num_heads, self.head_dim).transpose(1, 2)

    key_states = self.k_proj(hidden_states)
    value_states = self.v_proj(hidden_states)
    key_states = key_states.view(bsz, -1, self.num_heads, self.head_dim).transpose(1, 2)
    value_states = value_states.view(bsz, -1, self.num_heads, self.head_dim).transpose(1, 2)

    if cache is not None:
        # save all key/value_states to cache to be re-used for fast auto-regressive generation
        key_states, value_states = cache.update(key_states, value_states, self.layer_idx, kwargs=kwargs)

    attention_interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(
        self.config._attn_implementation, eager_attention_forward
    )

    attn_output, attn_weights = __vlm_site__("attention_interface_1", attention_interface,
        self,
        query_states,
        key_states,
        value_states,
        attention_mask,
        dropout=0.0 if not self.training else self.dropout,
        scaling=1.0,
        **kwargs,
    )

    attn_output = attn_output.reshape(bsz, tgt_len, -1).contiguous()
    attn_output = self.out_proj(attn_output)

    return attn_output, attn_weights
