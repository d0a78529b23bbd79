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

#: A SigLIP / CLIP style encoder's tower-level names: ``encoder.layers`` and the patch embedding.
ENCODER_TOWER_RENAME = {
    "encoder.layers": "layers",
    "embeddings.patch_embedding": "patch_embed",
}

#: A SigLIP / CLIP style encoder block: ``layer_norm1`` before the attention, ``layer_norm2`` before the MLP,
#: ``self_attn.out_proj``, ``mlp.fc1`` / ``mlp.fc2``.
ENCODER_BLOCK_RENAME = {
    "layer_norm1": "input_layernorm",
    "layer_norm2": "post_attention_layernorm",
    "self_attn.out_proj": "self_attn.o_proj",
    "mlp.fc1": "mlp.up_proj",
    "mlp.fc2": "mlp.down_proj",
}

#: A SigLIP / CLIP style encoder, both.
ENCODER_RENAME = {**ENCODER_TOWER_RENAME, **ENCODER_BLOCK_RENAME}

#: Where a ``SiglipVisionModel`` / ``CLIPVisionModel`` keeps its encoder, embeddings and final norm on older
#: releases (4.57 to 5.2 at least): one level down, in its ``vision_model`` (a ``*VisionTransformer``); later
#: releases keep them in the tower itself.
VISION_MODEL = "vision_model"


def tower_rooted(names: dict[str, str]) -> dict[str, str]:
    """``names``, keys from a SigLIP / CLIP vision model (``encoder.layers``, ``post_layernorm``), plus the same keys
    under `VISION_MODEL`. A key binds only where it resolves, so the spelling the loaded tower has names the
    standard children, whichever release built it. Only for a family whose tower is such a vision model (under
    ``vision_tower``): elsewhere a ``vision_model`` child would be aliased from its parent."""
    return {**names, **{f"{VISION_MODEL}.{key}": name for key, name in names.items()}}


#: A wrapper like `WRAPPER_RENAME`'s with a SigLIP tower whose ``post_layernorm`` normalises every patch (the tower's
#: ``norm``): Gemma 3, LLaVA-OneVision, Aya Vision, Cohere 2 Vision.
SIGLIP_WRAPPER_RENAME = {
    **WRAPPER_RENAME,
    **tower_rooted({**ENCODER_TOWER_RENAME, "post_layernorm": "norm"}),
    **ENCODER_BLOCK_RENAME,
}
