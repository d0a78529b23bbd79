"""A tiny InternVL checkpoint: an InternViT tower on tiles, the host's pixel shuffle, a Qwen2 text model.

The builder returns an unsaved (`InternVLForConditionalGeneration`,
`InternVLProcessor`) pair with random float32 weights (seed the torch
generator first; :func:`envoys.testing.build` does). Tiles are 32 pixels (the
vision config's ``image_size``, ``[32, 32]``) with patches of 4 (``[4, 4]``),
so 64 patches (8x8) a tile after the CLS token: 65 tower rows a tile. The
host drops the CLS and pixel-shuffles each tile (``downsample_ratio`` 0.5),
folding each 2x2 block of patches into one image token: 16 tokens a tile
(``image_seq_length``). The image processor (GotOcr2's, ``crop_to_patches``,
Aya Vision's tiles: `envoys.testing.tiles.gotocr2_tiles`) picks a canvas of
up to 4 tiles for the image's aspect ratio and appends a thumbnail when there
are several: a 32x32 image is 1 tile (16 tokens), a 64 wide x 48 high one 2x2
tiles + the thumbnail (80), a 64 wide x 32 high one 2x1 + the thumbnail (48).
"""

from __future__ import annotations

import torch
from transformers import (
    InternVLConfig,
    InternVLForConditionalGeneration,
    InternVLProcessor,
    InternVLVideoProcessor,
    InternVLVisionConfig,
)

from .contract import SIGLIP, Loads, Row, Sizes, attention, batched, blocks, scatter, text_model
from .llava import INTERLEAVE_TEMPLATE, qwen2_text
from .norms import randomise_norms
from .sizes import vision_sizes
from .tiles import DOWNSAMPLE, PATCH, TILE, TOKENS_PER_TILE, gotocr2_tiles
from .tokenizer import TokenizersBackend, word_level_tokenizer

#: The tokens InternVL's tokenizer names for its processor: each image is ``<img>``, its tiles' ``<IMG_CONTEXT>``
#: tokens, ``</img>``; ``<video>`` is the video placeholder.
IMAGE_TOKENS = {
    "start_image_token": "<img>",
    "end_image_token": "</img>",
    "context_image_token": "<IMG_CONTEXT>",
    "video_token": "<video>",
}


def internvl_tokenizer(placeholder: str = IMAGE_TOKENS["context_image_token"]) -> TokenizersBackend:
    """InternVL3-hf's tokenizer, reduced: Qwen2's ChatML turns, each image ``placeholder`` on its own line (the
    processor expands it), and the image tokens under the names its processor reads."""
    return word_level_tokenizer(
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        named_tokens=IMAGE_TOKENS,
        chat_template=INTERLEAVE_TEMPLATE.replace("<image>", placeholder),
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
    )


def internvit(config_class: type = InternVLVisionConfig, **particular) -> InternVLVisionConfig:
    """The InternViT tower: 2 blocks, width 32, 2 heads, MLP 64 wide, patch 4 on 32x32 tiles (both lists), CLS
    first, mean pooling (no final norm: ``layernorm`` is an identity)."""
    return config_class(**vision_sizes(image_size=[TILE, TILE], patch_size=[PATCH, PATCH], **particular))


def randomise_internvit(tower: torch.nn.Module) -> None:
    """Draw the parameters InternViT starts at constants: the layer scales ``lambda_1`` / ``lambda_2`` (0.1 at
    init) from U(0.5, 1.5), the CLS token and the position embeddings (zeros) from N(0, 1)."""
    with torch.no_grad():
        for name, parameter in tower.named_parameters():
            if name.rpartition(".")[2] in ("lambda_1", "lambda_2"):
                parameter.uniform_(0.5, 1.5)
            elif name.endswith(("cls_token", "position_embeddings")):
                parameter.normal_(0.0, 1.0)


def build_internvl() -> tuple[InternVLForConditionalGeneration, InternVLProcessor]:
    """Imitates OpenGVLab/InternVL3-1B-hf (448 pixel tiles of 14 pixel patches, 256 tokens a tile, up to 12 tiles).

    InternViT tower (`internvit`): 65 rows a tile, CLS first. The host reads
    the tower's ``last_hidden_state`` (``vision_feature_layer`` -1; no final
    norm, so the last block's output), drops the CLS (strategy "default"),
    pixel-shuffles each tile to 16 rows of 128 features, and the projector
    layer-norms them and maps them to 32 (two linear layers, GELU). Qwen2 text
    model: `envoys.testing.llava.qwen2_text`. The layer scales, the CLS token, the
    position embeddings and every norm's weight and bias are drawn at random.
    """
    tokenizer = internvl_tokenizer()
    config = InternVLConfig(
        vision_config=internvit(),
        text_config=qwen2_text(tokenizer),
        image_token_id=tokenizer.convert_tokens_to_ids(IMAGE_TOKENS["context_image_token"]),
        image_seq_length=TOKENS_PER_TILE,
        downsample_ratio=1 / DOWNSAMPLE,
        vision_feature_layer=-1,
        vision_feature_select_strategy="default",
        tie_word_embeddings=True,
    )
    processor = InternVLProcessor(
        image_processor=gotocr2_tiles(),
        tokenizer=tokenizer,
        video_processor=InternVLVideoProcessor(size={"height": TILE, "width": TILE}),
        image_seq_length=TOKENS_PER_TILE,
        chat_template=tokenizer.chat_template,
    )
    model = InternVLForConditionalGeneration(config)
    randomise_internvit(model.model.vision_tower)
    randomise_norms(model)
    return model, processor


#: The checkpoints this module builds, by name.
BUILDERS = {"internvl": build_internvl}


#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builders' documented
#: configurations above, never off the code under test.
CONTRACTS = {
    # envoys/testing/internvl.py: InternViT on 32 px tiles of 4 px patches, CLS first (1 + 64 rows a tile), 2 blocks, no
    # final norm (mean pooling); 16 tokens a tile: a 32x32 image is 1 tile, a 64 wide, 48 high one 2x2 tiles + the
    # thumbnail (80); the host drops the CLS and pixel-shuffles before the projector, [tiles, 16, hidden] out of it.
    "internvl": Row(
        loads=Loads(("InternVLForConditionalGeneration", "InternVLProcessor", "TokenizersBackend"), feature_token="<IMG_CONTEXT>"),
        image_tokens=(16, 80),
        sizes=Sizes(num_layers=2, patch_size=4, image_size=32, **SIGLIP),
        stream=batched((1, 65), (5, 65)),
        projected=batched((1, 16), (5, 16)),
        projector_reads=None,
        prefix=1,
        rules=(scatter("internvl"), *attention("internvl", "InternVLVisionAttention"),
               *attention("qwen2", "Qwen2Attention")),
        native={
            "vision": "model.vision_tower", "projector": "model.multi_modal_projector",
            "vision.patch_embed": "model.vision_tower.embeddings.patch_embeddings.projection",
            **blocks("vision.layers", "model.vision_tower.encoder.layer", {"self_attn": "attention",
                "self_attn.o_proj": "attention.projection_layer", "input_layernorm": "layernorm_before",
                "post_attention_layernorm": "layernorm_after", "mlp": "mlp", "mlp.up_proj": "mlp.fc1",
                "mlp.down_proj": "mlp.fc2"}),
            **text_model("model.language_model"),
        },
    ),
}
