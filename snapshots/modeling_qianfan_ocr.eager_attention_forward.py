# rule qianfan_ocr.eager-attention: the softmax of eager attention: scores in, probabilities out
# transformers.models.qianfan_ocr.modeling_qianfan_ocr:eager_attention_forward
# transformers/models/qianfan_ocr/modeling_qianfan_ocr.py
# sites: nn_functional_softmax_0

def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float | int = 0.0,
    **kwargs,
):
    key_states = key
    value_states = value

    attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
    if attention_mask is not None:
        attn_weights = attn_weights + attention_mask

    # No upcasting of the attention weights to float32 in this implementation
    attn_weights = __vlm_site__("nn_functional_softmax_0", nn.functional.softmax, attn_weights, dim=-1)
    attn_weights = nn.functional.dropout(attn_weights, p=dropout, training=module.training)
    attn_output = torch.matmul(attn_weights, value_states)
    attn_output = attn_output.transpose(1, 2).contiguous()

    return attn_output, attn_weights
