"""Names shared by several families: the common wrapper layout, and the SigLIP / CLIP style encoder block.

A module of this package without a ``FAMILY``: the family modules import these.
"""

#: A wrapper whose inner model holds ``language_model``, ``vision_tower`` and ``multi_modal_projector``.
WRAPPER_RENAME = {
    "model.language_model.embed_tokens": "embed_tokens",
    "model.language_model.layers": "layers",
    "model.language_model.norm": "norm",
    "model.vision_tower": "vision",
    "model.multi_modal_projector": "projector",
}

#: A SigLIP / CLIP style encoder: ``encoder.layers`` of blocks with ``layer_norm1`` before the attention,
#: ``layer_norm2`` before the MLP, ``self_attn.out_proj``, ``mlp.fc1`` / ``mlp.fc2``.
ENCODER_RENAME = {
    "encoder.layers": "layers",
    "embeddings.patch_embedding": "patch_embed",
    "layer_norm1": "input_layernorm",
    "layer_norm2": "post_attention_layernorm",
    "self_attn.out_proj": "self_attn.o_proj",
    "mlp.fc1": "mlp.up_proj",
    "mlp.fc2": "mlp.down_proj",
}
