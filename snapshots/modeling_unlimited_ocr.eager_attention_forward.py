# rule unlimited_ocr.eager-attention: the softmax of eager attention: scores in, probabilities out
# transformers.models.unlimited_ocr.modeling_unlimited_ocr:eager_attention_forward
# transformers/models/unlimited_ocr/modeling_unlimited_ocr.py
# sites: nn_functional_softmax_0

def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    **kwargs: Unpack[TransformersKwargs],
):
    attn_weights = torch.matmul(query, key.transpose(-1, -2)) * scaling
    if attention_mask is not None:
        attn_weights = attn_weights + attention_mask
    attn_weights = __vlm_site__("nn_functional_softmax_0", nn.functional.softmax, attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
    attn_weights = nn.functional.dropout(attn_weights, p=dropout, training=module.training)

    attn_output = torch.matmul(attn_weights, value)
    attn_output = attn_output.transpose(1, 2).contiguous()
    return attn_output, attn_weights
