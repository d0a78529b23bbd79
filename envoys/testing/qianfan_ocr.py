"""A tiny Qianfan-OCR checkpoint: InternVL's tower and host (stochastic depth in the tower), a Qwen3 text model.

The builder returns an unsaved (`QianfanOCRForConditionalGeneration`,
`QianfanOCRProcessor`) pair with random float32 weights (seed the torch
generator first; :func:`envoys.testing.build` does). The tower, the tiles and
the tokens are the InternVL builder's (`envoys.testing.internvl`): 32 pixel tiles
of 4 pixel patches, 65 tower rows a tile (CLS first), 16 image tokens a tile;
a 32x32 image is 1 tile (16 tokens), a 64 wide x 48 high one 2x2 tiles + the
thumbnail (80). What differs: the tower's blocks sit at ``layers`` and pass
each scaled sublayer output through a drop-path module (``drop_path_rate``
0.1: an identity on block 0, a ``QianfanOCRDropPath`` on block 1, both
identities in eval), the attention projections have biases, the text model is
Qwen3, and the chat template writes each image as ``<image>``, which the
processor expands into ``<img>``, the tiles' ``<IMG_CONTEXT>`` tokens and
``</img>``.
"""

from __future__ import annotations

from transformers import (
    QianfanOCRConfig,
    QianfanOCRForConditionalGeneration,
    QianfanOCRProcessor,
    QianfanOCRVisionConfig,
    Qwen3Config,
)

from .contract import SIGLIP, Loads, Row, Sizes, attention, batched, blocks, scatter, text_model
from .internvl import IMAGE_TOKENS, internvit, internvl_tokenizer, randomise_internvit
from .norms import randomise_norms
from .sizes import text_sizes
from .tiles import DOWNSAMPLE, TOKENS_PER_TILE, gotocr2_tiles

#: The placeholder Qianfan-OCR's chat template writes for an image (the processor's ``image_placeholder_token``).
PLACEHOLDER = "<image>"


def build_qianfan_ocr() -> tuple[QianfanOCRForConditionalGeneration, QianfanOCRProcessor]:
    """Imitates baidu/Qianfan-OCR (InternViT tiles of 448 pixels, 256 tokens a tile, a Qwen3 text model).

    InternViT tower as InternVL's builder makes it (`envoys.testing.internvl.internvit`),
    with Qianfan-OCR's attention biases and stochastic depth (``drop_path_rate``
    0.1). Qwen3 text model: 2 blocks of width 32, 2 query heads / 1 key-value
    head of 16, untied embeddings. The layer scales, the CLS token, the position
    embeddings and every norm's weight and bias are drawn at random.
    """
    tokenizer = internvl_tokenizer(PLACEHOLDER)
    config = QianfanOCRConfig(
        vision_config=internvit(QianfanOCRVisionConfig, attention_bias=True, drop_path_rate=0.1),
        text_config=Qwen3Config(**text_sizes(tokenizer, head_dim=16, tie_word_embeddings=False)),
        image_token_id=tokenizer.convert_tokens_to_ids(IMAGE_TOKENS["context_image_token"]),
        image_seq_length=TOKENS_PER_TILE,
        downsample_ratio=1 / DOWNSAMPLE,
        vision_feature_layer=-1,
        vision_feature_select_strategy="default",
        tie_word_embeddings=False,
    )
    processor = QianfanOCRProcessor(
        image_processor=gotocr2_tiles(),
        tokenizer=tokenizer,
        image_seq_length=TOKENS_PER_TILE,
        chat_template=tokenizer.chat_template,
        image_placeholder_token=PLACEHOLDER,
    )
    model = QianfanOCRForConditionalGeneration(config)
    randomise_internvit(model.model.vision_tower)
    randomise_norms(model)
    return model, processor


#: The checkpoints this module builds, by name.
BUILDERS = {"qianfan_ocr": build_qianfan_ocr}


#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builders' documented
#: configurations above, never off the code under test.
CONTRACTS = {
    # envoys/testing/qianfan_ocr.py: InternVL's tower, tiles and tokens (1 + 64 rows a tile, 16 tokens; 1 tile and 2x2 +
    # the thumbnail), drop-path modules in its blocks; a Qwen3 text model.
    "qianfan_ocr": Row(
        loads=Loads(("QianfanOCRForConditionalGeneration", "QianfanOCRProcessor", "TokenizersBackend"),
                    placeholder="image_placeholder_token", feature_token="<IMG_CONTEXT>"),
        image_tokens=(16, 80),
        sizes=Sizes(num_layers=2, patch_size=4, image_size=32, **SIGLIP),
        stream=batched((1, 65), (5, 65)),
        projected=batched((1, 16), (5, 16)),
        projector_reads=None,
        prefix=1,
        rules=(scatter("qianfan_ocr"), *attention("qianfan_ocr", "QianfanOCRVisionAttention"),
               *attention("qwen3", "Qwen3Attention")),
        native={
            "vision": "model.vision_tower", "projector": "model.multi_modal_projector",
            "vision.patch_embed": "model.vision_tower.embeddings.patch_embeddings.projection",
            **blocks("vision.layers", "model.vision_tower.layers", {"self_attn": "attention",
                "self_attn.o_proj": "attention.projection_layer", "input_layernorm": "layernorm_before",
                "post_attention_layernorm": "layernorm_after", "mlp": "mlp", "mlp.up_proj": "mlp.fc1",
                "mlp.down_proj": "mlp.fc2"}),
            **text_model("model.language_model"),
        },
    ),
}
