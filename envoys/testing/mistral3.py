"""A tiny Mistral 3 checkpoint: the Pixtral tower, a patch-merging projector, a Mistral text model.

The builder returns an unsaved (`Mistral3ForConditionalGeneration`,
`PixtralProcessor`) pair with random float32 weights (seed the torch
generator first; :func:`envoys.testing.build` does).

Images keep their own size: the Pixtral image processor scales an image down
only when its longest side is over ``longest_edge`` (64 px), then rounds each
side up to a multiple of its patch size, which is the vision patch (4 px) times
``spatial_merge_size`` (2), as the processor passes it, so every image's patch
grid is even and the projector's 2x2 merge tiles it. A 32x32 image is 8x8 = 64
patches and 4x4 = 16 image tokens; a 48 (high) x 64 (wide) image is 12x16 =
192 patches and 6x8 = 48 image tokens. The processor writes ``[IMG]`` per
image token, ``[IMG_BREAK]`` after each row of them and ``[IMG_END]`` in place
of the last break.
"""

from __future__ import annotations

from transformers import Mistral3Config, Mistral3ForConditionalGeneration, MistralConfig, PixtralProcessor

from .contract import MISTRAL_ATTENTION, PIXTRAL_ATTENTION, PIXTRAL_BLOCK, SIGLIP, Loads, Reads, Row, Sizes, blocks, flat, packed, scatter, text_model
from .pixtral import PATCH_SIZE, WRAPPER, mistral_tokenizer, pixtral_processor, pixtral_tower
from .sizes import text_sizes


def build_mistral3() -> tuple[Mistral3ForConditionalGeneration, PixtralProcessor]:
    """Imitates mistralai/Mistral-Small-3.1-24B-Instruct-2503.

    Pixtral tower: 2 blocks, width 32, 2 heads (head_dim 16), gated SiLU MLP 64
    wide, patch 4, 2D axial rotary positions, no final norm; ``image_size`` 64
    is the longest side the processor keeps. Projector: RMSNorm, a 2x2 patch
    merger (``spatial_merge_size`` 2), two linears to the text width, reading
    the last block (``vision_feature_layer`` -1). Mistral text model: 2 layers,
    width 32, 2 query heads / 1 key-value head of dim 16, untied head.
    """
    tokenizer = mistral_tokenizer()
    vision = pixtral_tower(PATCH_SIZE)
    text = MistralConfig(**text_sizes(
        tokenizer,
        head_dim=16,
        max_position_embeddings=1024,
        sliding_window=None,
        tie_word_embeddings=False,
    ))
    config = Mistral3Config(vision_config=vision, text_config=text, image_token_index=tokenizer.image_token_id,
                            **WRAPPER)
    return Mistral3ForConditionalGeneration(config), pixtral_processor(tokenizer)


#: The checkpoints this module builds, by name.
BUILDERS = {"mistral3": build_mistral3}


#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builders' documented
#: configurations above, never off the code under test.
CONTRACTS = {
    # envoys/testing/mistral3.py: Pixtral, packed, 4 px patches, 2x2 merge: 32x32 is 64 patches and 16 tokens, 48 high x
    # 64 wide 192 patches and 48 tokens; the projector (its merger inside) takes the last block's packed row.
    "mistral3": Row(
        loads=Loads(("Mistral3ForConditionalGeneration", "PixtralProcessor", "TokenizersBackend")),
        image_tokens=(16, 48),
        sizes=Sizes(num_layers=2, patch_size=4, image_size="image_sizes", **SIGLIP),
        stream=packed(64, 192),
        projected=flat((1, 16), (1, 48)),
        projector_reads=Reads("layer_output", block=-1, unbatched=True),
        rules=(scatter("mistral3"), *PIXTRAL_ATTENTION, *MISTRAL_ATTENTION),
        native={
            "vision": "model.vision_tower", "projector": "model.multi_modal_projector",
            "vision.patch_embed": "model.vision_tower.patch_conv",
            **blocks("vision.layers", "model.vision_tower.transformer.layers", PIXTRAL_BLOCK),
            **text_model("model.language_model"),
        },
    ),
}
