"""A tiny Cosmos3-Omni checkpoint: Qwen3-VL's tower, DeepStack and text model under NVIDIA's model_type.

``Cosmos3OmniForConditionalGeneration`` is Qwen3-VL's wrapper (transformers
builds its tower and text model from ``qwen3_vl_vision`` and ``qwen3_vl_text``
configs), so the checkpoint is the tiny Qwen3-VL's (`envoys.testing.qwen`,
`qwen3_vl_settings`) under a ``Cosmos3OmniConfig``. Its checkpoints ship
Qwen3-VL's processor: transformers maps ``cosmos3_omni`` to no processor class
of its own, but to Qwen3-VL's parts (``Qwen2VLImageProcessor``,
``Qwen3VLVideoProcessor``, the Qwen2 tokenizer), and its model's example
loads ``Qwen3VLProcessor``; so does this builder.
"""

from __future__ import annotations

from transformers import Cosmos3OmniConfig, Cosmos3OmniForConditionalGeneration, Qwen3VLProcessor

from .contract import (
    NO_WINDOWS,
    PER_IMAGE_PATTERN,
    QWEN_VIT_BLOCK,
    SIGLIP,
    Loads,
    Reads,
    Row,
    Sizes,
    attention,
    blocks,
    flat,
    packed,
    scatter,
    text_model,
)
from .norms import randomise_norms
from .qwen import QWEN3_VL_PATCH, _qwen3_processor, _tokenizer, qwen3_vl_settings


def build_cosmos3_omni() -> tuple[Cosmos3OmniForConditionalGeneration, Qwen3VLProcessor]:
    """Imitates nvidia/Cosmos3-Nano (its reasoner: the generator, sound and action towers of the unified
    checkpoint are not part of the transformers model).

    The tiny Qwen3-VL (`envoys.testing.qwen.build_qwen3_vl`): tower of 3 blocks,
    width 32, 2 heads, patch 8, 16 learned position embeddings, DeepStack taps
    after blocks 0 and 1 (``deepstack_visual_indexes`` [0, 1]); text of 4
    layers, width 32, head_dim 16, interleaved M-RoPE sections [4, 2, 2], tied
    embeddings. Every norm's weight (and LayerNorm bias) is drawn
    (`randomise_norms`). 32x32 image: 16 patches, 4 tokens; 48x64: 48 patches,
    12 tokens.
    """
    tokenizer = _tokenizer()
    model = Cosmos3OmniForConditionalGeneration(Cosmos3OmniConfig(**qwen3_vl_settings(tokenizer)))
    randomise_norms(model)
    return model, _qwen3_processor(QWEN3_VL_PATCH, tokenizer)


#: The checkpoints this module builds, by name.
BUILDERS = {"cosmos3_omni": build_cosmos3_omni}


#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builders' documented
#: configurations above, never off the code under test.
CONTRACTS = {
    # envoys/testing/cosmos3_omni.py: the tiny Qwen3-VL under Cosmos3-Omni's host: 3 blocks, patch 8; DeepStack taps
    # after text blocks 0 and 1 of 4.
    "cosmos3_omni": Row(
        loads=Loads(("Cosmos3OmniForConditionalGeneration", "Qwen3VLProcessor", "TokenizersBackend")),
        image_tokens=(4, 12),
        sizes=Sizes(num_layers=3, patch_size=8, image_size="image_grid_thw", **SIGLIP),
        stream=packed(16, 48),
        projected=flat((1, 4), (1, 12)),
        projector_reads=Reads("layer_output", block=-1, unbatched=True),
        pattern=PER_IMAGE_PATTERN,
        deepstack_taps=2,
        vision_unavailable=NO_WINDOWS,
        text_gaps={"deepstack_output": (2, 3)},
        rules=(scatter("cosmos3_omni"), "qwen3_vl.vision-attention", "qwen3_vl.deepstack",
               *attention("qwen3_vl", "Qwen3VLTextAttention")),
        native={
            "vision": "model.visual", "projector": "model.visual.merger",
            "vision.patch_embed": "model.visual.patch_embed",
            **blocks("vision.layers", "model.visual.blocks", {**QWEN_VIT_BLOCK, "mlp.down_proj": "mlp.linear_fc2"}),
            **text_model("model.language_model"),
        },
    ),
}
