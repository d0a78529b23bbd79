"""A tiny DeepSeek-VL checkpoint: a SigLIP tower, the two-layer aligner, a Llama text model.

The builder returns an unsaved (`DeepseekVLForConditionalGeneration`,
`DeepseekVLProcessor`) pair with random float32 weights (seed the torch
generator first; :func:`envoys.testing.build` does): `llava.siglip_tower` (2
blocks, width 32, 8 px patches on 32x32 images, no pooling head), a Llama text
model of `sizes.text_sizes`, and the stock processor with its stock image
processor (`DeepseekVLImageProcessor`), which resizes an image so its longer
side is 32 and pads it to 32x32 with its mean colour: 16 patches and 16 image
tokens an image, whatever its size. Its tokenizer and text model are
`envoys.testing.deepseek`'s.
"""

from __future__ import annotations

from transformers import (
    DeepseekVLConfig,
    DeepseekVLForConditionalGeneration,
    DeepseekVLImageProcessor,
    DeepseekVLProcessor,
)

from .contract import LLAMA_ATTENTION, SIGLIP, SIGLIP_ATTENTION, Loads, Reads, Row, Sizes, batched, encoder_tower, scatter, text_model
from .deepseek import DEEPSEEK_TEMPLATE, deepseek_tokenizer, llama_text
from .llava import IMAGE_SIZE, IMAGE_TOKENS, siglip_tower
from .norms import randomise_norms


def build_deepseek_vl() -> tuple[DeepseekVLForConditionalGeneration, DeepseekVLProcessor]:
    """Imitates deepseek-community/deepseek-vl-1.3b-chat.

    SigLIP tower (`llava.siglip_tower`: 2 blocks, width 32, 2 heads, 8 px
    patches on 32x32 images, no CLS, no pooling head, ``post_layernorm`` over
    the patches); the aligner maps each of the 16 patches of
    ``last_hidden_state`` to the text width 32; a Llama text model (2 blocks,
    width 32) with tied embeddings, as the config's default. The processor
    writes ``num_image_tokens`` = 16 image tokens an image. Norm weights and
    biases are drawn at random (`norms.randomise_norms`), so the tower's final
    norm is not a plain standardisation.
    """
    tokenizer = deepseek_tokenizer()
    config = DeepseekVLConfig(
        vision_config=siglip_tower().to_dict(),
        text_config=llama_text(tokenizer).to_dict(),
        image_token_id=tokenizer.image_token_id,
    )
    model = DeepseekVLForConditionalGeneration(config)
    randomise_norms(model)
    processor = DeepseekVLProcessor(
        image_processor=DeepseekVLImageProcessor(size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}),
        tokenizer=tokenizer,
        chat_template=DEEPSEEK_TEMPLATE,
        num_image_tokens=IMAGE_TOKENS,
    )
    return model, processor


#: The checkpoints this module builds, by name.
BUILDERS = {"deepseek_vl": build_deepseek_vl}


#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builders' documented
#: configurations above, never off the code under test.
CONTRACTS = {
    # envoys/testing/deepseek_vl.py: llava-siglip's SigLIP tower (32x32 images of 8 px patches, 16 patches, no CLS, 2
    # blocks, post_layernorm); every image resized and padded to 32x32; the aligner reads tower_output (after the
    # norm), patch by patch: 16 image tokens an image.
    "deepseek_vl": Row(
        loads=Loads(("DeepseekVLForConditionalGeneration", "DeepseekVLProcessor", "TokenizersBackend")),
        image_tokens=(16, 16),
        sizes=Sizes(num_layers=2, patch_size=8, image_size=32, **SIGLIP),
        stream=batched((1, 16), (1, 16)),
        projected=batched((1, 16), (1, 16)),
        projector_reads=Reads("tower_output"),
        final_norm=True,
        rules=(scatter("deepseek_vl"), *SIGLIP_ATTENTION, *LLAMA_ATTENTION),
        native={
            **encoder_tower("model.vision_model"), "projector": "model.aligner", **text_model("model.language_model"),
        },
    ),
}
