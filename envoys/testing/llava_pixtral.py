"""A tiny Llava-Pixtral checkpoint: a LLaVA (model_type llava) with a Pixtral tower and a Mistral text model.

The builder returns an unsaved (`LlavaForConditionalGeneration`,
`PixtralProcessor`) pair with random float32 weights (seed the torch
generator first; :func:`envoys.testing.build` does). Its tokenizer and chat
template are the tiny Mistral 3's (`envoys.testing.pixtral`).

Images keep their own size: the Pixtral image processor scales an image down
only when its longest side is over ``longest_edge`` (64 px), then rounds each
side up to a multiple of the patch (8 px; there is no merge, so the
processor's patch is the tower's). Each patch is one image token: a 32x32
image is 4x4 = 16 patches and 16 image tokens; a 48 (high) x 64 (wide) image
is 6x8 = 48. The processor writes ``[IMG]`` per image token, ``[IMG_BREAK]``
after each row of them and ``[IMG_END]`` in place of the last break.
"""

from __future__ import annotations

from transformers import (
    LlavaConfig,
    LlavaForConditionalGeneration,
    MistralConfig,
    PixtralProcessor,
)

from .contract import MISTRAL_ATTENTION, PIXTRAL_ATTENTION, PIXTRAL_BLOCK, SIGLIP, Loads, Reads, Row, Sizes, blocks, packed, scatter, text_model
from .pixtral import mistral_tokenizer, pixtral_processor, pixtral_tower
from .sizes import text_sizes

PATCH_SIZE = 8


def build_llava_pixtral() -> tuple[LlavaForConditionalGeneration, PixtralProcessor]:
    """Imitates mistral-community/pixtral-12b.

    Pixtral tower: 2 blocks, width 32, 2 heads (head_dim 16), gated SiLU MLP 64
    wide, patch 8, 2D axial rotary positions, no final norm; ``image_size`` 64
    is the longest side the processor keeps. LLaVA's projector (two linears
    with biases around a GELU) reads the last block's stream
    (``vision_feature_layer`` -1) with every patch kept (strategy ``"full"``).
    Mistral text model: 2 layers, width 32, 2 query heads / 1 key-value head
    of dim 16, untied head.
    """
    tokenizer = mistral_tokenizer()
    vision = pixtral_tower(PATCH_SIZE)
    text = MistralConfig(**text_sizes(tokenizer, head_dim=16, sliding_window=None, tie_word_embeddings=False))
    config = LlavaConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=tokenizer.image_token_id,
        vision_feature_layer=-1,
        vision_feature_select_strategy="full",
        projector_hidden_act="gelu",
        tie_word_embeddings=False,
    )
    return LlavaForConditionalGeneration(config), pixtral_processor(tokenizer, PATCH_SIZE, merge=1)


#: The checkpoints this module builds, by name.
BUILDERS = {"llava-pixtral": build_llava_pixtral}


#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builders' documented
#: configurations above, never off the code under test.
CONTRACTS = {
    # envoys/testing/llava_pixtral.py: Pixtral, packed, 8 px patches and no merge: 32x32 is 16 patches and tokens,
    # 48 high x 64 wide 48; no final norm; LLaVA's projector reads the last block, every patch.
    "llava-pixtral": Row(
        loads=Loads(("LlavaForConditionalGeneration", "PixtralProcessor", "TokenizersBackend")),
        image_tokens=(16, 48),
        sizes=Sizes(num_layers=2, patch_size=8, image_size="image_sizes", **SIGLIP),
        stream=packed(16, 48),
        projected=packed(16, 48),
        projector_reads=Reads("layer_output", block=-1),
        rules=(scatter("llava"), *PIXTRAL_ATTENTION, *MISTRAL_ATTENTION),
        native={
            "vision": "model.vision_tower", "projector": "model.multi_modal_projector",
            "vision.patch_embed": "model.vision_tower.patch_conv",
            **blocks("vision.layers", "model.vision_tower.transformer.layers", PIXTRAL_BLOCK),
            **text_model("model.language_model"),
        },
    ),
}
