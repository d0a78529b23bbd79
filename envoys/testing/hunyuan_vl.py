"""A tiny HunYuanVL (HunyuanOCR) checkpoint: a packed ViT attending per image, its patch merger run once per image
inside the tower, on a dense HunYuan text model with XD-RoPE.

The builder returns an unsaved (`HunYuanVLForConditionalGeneration`,
`HunYuanVLProcessor`) pair with random float32 weights. The tower
(``model.vision_tower``) has 2 blocks of width 32, 2 heads of 16, an MLP 64
wide, patch 4, learned positions on a 16x16 grid (``max_image_size`` 64)
resampled to each image's grid, no final norm; its merger
(``vision_tower.patch_merger``) RMS-norms an image's patches, folds each 2x2
block with a convolution, appends a learned newline column to each row of the
merged grid, maps the rows to the text width and puts a learned begin and end
row around them. The image processor (``HunYuanVLImageProcessor``, patch 4,
merge 2, resized to multiples of 8 px between 16 and 4096 tokens' worth of
pixels) lays each image's patches out in raster order: a 32x32 image is 8x8 =
64 patches and 4 x (4 + 1) + 2 = 22 image tokens, a 48 (high) x 64 (wide)
one 12x16 = 192 patches and 6 x (8 + 1) + 2 = 56 tokens.

The text model is HunYuan's dense one: 2 blocks of width 32, 2 query heads /
1 key-value head of 16 with query and key RMSNorms, XD-RoPE over 4 position
axes (``mrope_section`` [2, 2, 2, 2]), a gated MLP 64 wide, tied embeddings.
Every norm's weight is drawn (`randomise_norms`), and the merger's newline,
begin and end rows (uninitialised by the model) from N(0, 1). The tokenizer
is word-level (`envoys.testing.tokenizer`), with HunYuan's image markers.
"""

from __future__ import annotations

import torch
from transformers import (
    HunYuanVLConfig,
    HunYuanVLForConditionalGeneration,
    HunYuanVLImageProcessor,
    HunYuanVLProcessor,
)

from .contract import ENCODER_BLOCK, NO_WINDOWS, PER_IMAGE_PATTERN, SIGLIP, Loads, Reads, Row, Sizes, attention, blocks, packed, scatter, text_model
from .norms import randomise_norms
from .sizes import text_sizes
from .tokenizer import TokenizersBackend, word_level_tokenizer

PATCH = 4
MERGE = 2

#: HunyuanOCR's chat template, shortened: role markers, each image between its begin and end markers.
CHAT_TEMPLATE = (
    "<｜hy_begin▁of▁sentence｜>"
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}{{ '<｜hy_Assistant｜>' }}{% else %}{{ '<｜hy_User｜>' }}{% endif %}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for item in message['content'] %}"
    "{% if item['type'] == 'image' %}{{ '<｜hy_place▁holder▁no▁100｜><｜hy_place▁holder▁no▁102｜>"
    "<｜hy_place▁holder▁no▁101｜>' }}"
    "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<｜hy_Assistant｜>' }}{% endif %}"
)

_SPECIAL = ["<｜hy_begin▁of▁sentence｜>", "<｜hy_end▁of▁sentence｜>", "<｜hy_User｜>", "<｜hy_Assistant｜>",
            "<｜hy_pad｜>"]
_NAMED = {
    "image_start_token": "<｜hy_place▁holder▁no▁100｜>",
    "image_end_token": "<｜hy_place▁holder▁no▁101｜>",
    "image_token": "<｜hy_place▁holder▁no▁102｜>",
    "image_newline_token": "<｜hy_place▁holder▁no▁103｜>",
}


def _tokenizer() -> TokenizersBackend:
    return word_level_tokenizer(special_tokens=_SPECIAL, named_tokens=_NAMED, chat_template=CHAT_TEMPLATE,
                                eos_token="<｜hy_end▁of▁sentence｜>", pad_token="<｜hy_pad｜>",
                                bos_token="<｜hy_begin▁of▁sentence｜>")


def build_hunyuan_vl() -> tuple[HunYuanVLForConditionalGeneration, HunYuanVLProcessor]:
    """Imitates tencent/HunyuanOCR: the module docstring's tower, merger and text model, ``HunYuanVLProcessor``."""
    tokenizer = _tokenizer()
    ids = {name: tokenizer.convert_tokens_to_ids(token) for name, token in _NAMED.items()}
    text = text_sizes(
        tokenizer,
        head_dim=16,
        max_position_embeddings=1024,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 2, 2, 2]},
        tie_word_embeddings=True,
    )
    vision = {
        "hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 2, "num_hidden_layers": 2,
        "patch_size": PATCH, "spatial_merge_size": MERGE, "max_image_size": 64, "min_image_size": 16,
        "out_hidden_size": 32,
    }
    config = HunYuanVLConfig(
        text_config=text,
        vision_config=vision,
        image_token_id=ids["image_token"],
        im_start_id=ids["image_start_token"],
        im_end_id=ids["image_end_token"],
        im_newline_id=ids["image_newline_token"],
        tie_word_embeddings=True,
    )
    model = HunYuanVLForConditionalGeneration(config)
    merger = model.model.vision_tower.patch_merger
    with torch.no_grad():
        for row in (merger.image_newline, merger.image_begin, merger.image_end, merger.image_sep):
            row.normal_(0.0, 1.0)
    randomise_norms(model)
    factor = PATCH * MERGE
    processor = HunYuanVLProcessor(
        image_processor=HunYuanVLImageProcessor(
            patch_size=PATCH, merge_size=MERGE, size={"shortest_edge": 4 * factor**2, "longest_edge": 4096 * factor**2}),
        tokenizer=tokenizer,
        chat_template=CHAT_TEMPLATE,
    )
    return model, processor


#: The checkpoints this module builds, by name.
BUILDERS = {"hunyuan_vl": build_hunyuan_vl}


#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builders' documented
#: configurations above, never off the code under test.
CONTRACTS = {
    # envoys/testing/hunyuan_vl.py: packed, 4 px patches in raster order, no final norm: 32x32 is 64 patches, 48x64 192;
    # the merger (the projector) runs once per image on its rows of the last block's stream, giving h/2 x (w/2 + 1) + 2
    # tokens (a newline column, begin and end rows): 22 and 56; 2 blocks, width 32, 2 heads of 16, MLP 64.
    "hunyuan_vl": Row(
        loads=Loads(("HunYuanVLForConditionalGeneration", "HunYuanVLProcessor", "TokenizersBackend")),
        image_tokens=(22, 56),
        sizes=Sizes(num_layers=2, patch_size=4, image_size="image_grid_thw", **SIGLIP),
        stream=packed(64, 192),
        projected=packed(22, 56),
        projector_reads=Reads("layer_output", block=-1),
        projector_per_image=True,
        pattern=PER_IMAGE_PATTERN,
        vision_unavailable=NO_WINDOWS,
        rules=(scatter("hunyuan_vl"), "hunyuan_vl.vision-attention",
               *attention("hunyuan_vl", "HunYuanVLDenseV1Attention")),
        native={
            "vision": "model.vision_tower", "projector": "model.vision_tower.patch_merger",
            "vision.patch_embed": "model.vision_tower.embeddings.patch_embedding",
            **blocks("vision.layers", "model.vision_tower.layers", {**ENCODER_BLOCK,
                "self_attn.o_proj": "self_attn.o_proj"}),
            **text_model("model.language_model"),
        },
    ),
}
