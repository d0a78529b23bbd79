# rule deepseek_ocr2.vision-windows: a windowed block's attention output put back on the image's grid, padding cropped
# transformers.models.deepseek_ocr2.modeling_deepseek_ocr2:DeepseekOcr2SamVisionLayer.forward
# transformers/models/deepseek_ocr2/modeling_deepseek_ocr2.py
# sites: self_window_unpartition_0

def forward(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor]:
    residual = hidden_states
    hidden_states = self.layer_norm1(hidden_states)
    # Window partition
    if self.window_size > 0:
        height, width = hidden_states.shape[1], hidden_states.shape[2]
        hidden_states, padding_shape = self.window_partition(hidden_states, self.window_size)

    hidden_states, attn_weights = self.attn(
        hidden_states=hidden_states,
    )
    # Reverse window partition
    if self.window_size > 0:
        hidden_states = __vlm_site__("self_window_unpartition_0", self.window_unpartition, hidden_states, self.window_size, padding_shape, (height, width))

    hidden_states = residual + hidden_states
    layernorm_output = self.layer_norm2(hidden_states)
    hidden_states = hidden_states + self.mlp(layernorm_output)
    return hidden_states
