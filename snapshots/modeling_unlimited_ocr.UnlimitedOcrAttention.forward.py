# rule unlimited_ocr.UnlimitedOcrAttention: the attention kernel call: queries, keys, values in, head outputs out
# transformers.models.unlimited_ocr.modeling_unlimited_ocr:UnlimitedOcrAttention.forward
# transformers/models/unlimited_ocr/modeling_unlimited_ocr.py
# sites: attention_interface_1

def forward(
    self,
    hidden_states: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    **kwargs: Unpack[TransformersKwargs],
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Input shape: Batch x Time x Channel"""

    input_shape = hidden_states.shape[:-1]

    hidden_shape = (*input_shape, -1, self.head_dim)
    queries = self.q_proj(hidden_states)
    keys = self.k_proj(hidden_states)
    values = self.v_proj(hidden_states)

    queries = queries.view(hidden_shape).transpose(1, 2)
    keys = keys.view(hidden_shape).transpose(1, 2)
    values = values.view(hidden_shape).transpose(1, 2)

    attention_interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(
        self.config._attn_implementation, eager_attention_forward
    )

    attn_output, attn_weights = __vlm_site__("attention_interface_1", attention_interface,
        self,
        queries,
        keys,
        values,
        attention_mask,
        scaling=self.scale,
        dropout=0.0 if not self.training else self.dropout,
        **kwargs,
    )

    attn_output = attn_output.reshape(*input_shape, -1).contiguous()
    attn_output = self.out_proj(attn_output)

    return attn_output, attn_weights
