# rule blip_2.Blip2QFormerMultiHeadAttention: the attention kernel call: queries, keys, values in, head outputs out
# transformers.models.blip_2.modeling_blip_2:Blip2QFormerMultiHeadAttention.forward
# transformers/models/blip_2/modeling_blip_2.py
# sites: attention_interface_1

def forward(
    self,
    hidden_states,
    attention_mask=None,
    encoder_hidden_states=None,
    encoder_attention_mask=None,
    **kwargs: Unpack[TransformersKwargs],
):
    # If this is instantiated as a cross-attention module, the keys
    # and values come from an encoder; the attention mask needs to be
    # such that the encoder's padding tokens are not attended to.
    is_cross_attention = encoder_hidden_states is not None

    input_shape = hidden_states.shape[:-1]
    hidden_shape = (*input_shape, -1, self.attention_head_size)

    if is_cross_attention:
        current_states = encoder_hidden_states
        attention_mask = encoder_attention_mask
    else:
        current_states = hidden_states

    kv_shape = (*current_states.shape[:-1], -1, self.attention_head_size)
    query_layer = self.query(hidden_states).view(hidden_shape).transpose(1, 2)
    key_layer = self.key(current_states).view(kv_shape).transpose(1, 2)
    value_layer = self.value(current_states).view(kv_shape).transpose(1, 2)

    attention_interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(
        self.config._attn_implementation, eager_attention_forward
    )

    attn_output, attn_weights = __vlm_site__("attention_interface_1", attention_interface,
        self,
        query_layer,
        key_layer,
        value_layer,
        attention_mask,
        dropout=0.0 if not self.training else self.attention_dropout,
        scaling=self.scaling,
        **kwargs,
    )

    # NOTE: KV has a different bsz than Q so we take the broadcasted shapes instead of the input shape
    attn_output = attn_output.reshape(*attn_output.shape[:2], -1).contiguous()
    return attn_output, attn_weights
