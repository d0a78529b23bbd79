# rule unlimited_ocr.vision-attention: the inline kernel's softmax: the scores in, the probabilities out
# transformers.models.unlimited_ocr.modeling_unlimited_ocr:UnlimitedOcrSamVisionAttention.forward
# transformers/models/unlimited_ocr/modeling_unlimited_ocr.py
# sites: torch_nn_functional_softmax_0

def forward(self, hidden_states: torch.Tensor, output_attentions=None) -> tuple[torch.Tensor, torch.Tensor]:
    batch_size, height, width, _ = hidden_states.shape
    # qkv with shape (3, batch_size, nHead, height * width, channel)
    qkv = (
        self.qkv(hidden_states)
        .reshape(batch_size, height * width, 3, self.num_attention_heads, -1)
        .permute(2, 0, 3, 1, 4)
    )
    # q, k, v with shape (batch_size * nHead, height * width, channel)
    query, key, value = qkv.reshape(3, batch_size * self.num_attention_heads, height * width, -1).unbind(0)

    attn_weights = (query * self.scale) @ key.transpose(-2, -1)

    if self.use_rel_pos:
        decomposed_rel_pos = self.get_decomposed_rel_pos(
            query, self.rel_pos_h, self.rel_pos_w, (height, width), (height, width)
        )
        decomposed_rel_pos = decomposed_rel_pos.reshape_as(attn_weights)
        attn_weights = attn_weights + decomposed_rel_pos

    attn_weights = __vlm_site__("torch_nn_functional_softmax_0", torch.nn.functional.softmax, attn_weights, dtype=torch.float32, dim=-1).to(query.dtype)

    attn_probs = nn.functional.dropout(attn_weights, p=self.dropout, training=self.training)

    attn_output = (attn_probs @ value).reshape(batch_size, self.num_attention_heads, height, width, -1)
    attn_output = attn_output.permute(0, 2, 3, 1, 4).reshape(batch_size, height, width, -1)

    attn_output = self.proj(attn_output)
    return attn_output, attn_weights
