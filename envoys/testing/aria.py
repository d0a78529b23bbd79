"""A tiny Aria checkpoint: Idefics 3's ViT, a cross-attention projector, a mixture-of-experts text model.

The builder returns an unsaved (model, processor) pair with random float32
weights (seed the torch generator first; :func:`envoys.testing.build` does) and
the family's stock processor, `AriaProcessor` with `AriaImageProcessor` (no
image splitting, its default).

Sizes: the image processor takes 490 or 980 for ``max_image_size``, and the
stock processor asks it for 980 (its ``images_kwargs``) unless a call says
otherwise: ``IMAGE`` = 980. Each image is resized, keeping its aspect ratio,
so that its longer side is 980 pixels (its shorter at least the image
processor's ``min_image_size``, 336), and padded with zeros, bottom and
right, to 980x980 (``pixel_mask`` marks the real pixels). Patches of
``PATCH`` = 140 pixels: a 7 x 7 grid of 49 patches per image, a patch real
where any of its pixels is. A 32x32 image fills its grid; a 64 wide x 48
high one becomes 980 wide x 735 high, 6 of the 7 patch rows real (42
patches). The projector turns an image's 49 patches into ``QUERIES`` = 4
image tokens (``projector_patch_to_query_dict`` {49: 4}, the processor's
``size_conversion`` {980: 4}).
"""

from __future__ import annotations

from transformers import AriaConfig, AriaForConditionalGeneration, AriaImageProcessor, AriaProcessor
from transformers.models.aria.configuration_aria import AriaTextConfig
from transformers.models.idefics3.configuration_idefics3 import Idefics3VisionConfig

from .contract import ENCODER_BLOCK, SIGLIP, Loads, MoeRow, PatternRow, Reads, Row, Sizes, attention, batched, blocks, router, scatter, text_model
from .norms import randomise_norms
from .sizes import text_sizes, vision_sizes
from .tokenizer import word_level_tokenizer

IMAGE = 980
PATCH = 140
PATCHES = (IMAGE // PATCH) ** 2  # 49
QUERIES = 4
EXPERTS = 4
TOP_K = 2

#: rhymes-ai/Aria's template: ChatML turns, each image ``<fim_prefix><|img|><fim_suffix>``.
ARIA_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for item in message['content'] %}{% if item['type'] == 'text' %}{{ item['text'] }}"
    "{% elif item['type'] == 'image' %}<fim_prefix><|img|><fim_suffix>{% endif %}{% endfor %}{% endif %}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_aria() -> tuple[AriaForConditionalGeneration, AriaProcessor]:
    """Imitates rhymes-ai/Aria.

    Tower (``Idefics3VisionTransformer``): 2 blocks, width 32, 2 heads, MLP 64
    wide, 980 px images of 140 px patches, ``post_layernorm``. The projector
    reads the last block's output (``vision_feature_layer`` -1, before
    ``post_layernorm``): 4 learned queries cross-attend to an image's real
    patches, then a layer norm and an MLP to the text width. Text model
    (``AriaTextModel``): 2 layers, width 32, 2 query heads / 1 key-value head;
    each block's MLP is a mixture of 4 experts (64 wide), 2 picked per token,
    plus 1 shared expert. Every norm's weight and bias are drawn at random.
    The vocabulary holds ``<|img|>``, ``<fim_prefix>``, ``<fim_suffix>``,
    ``<|im_start|>`` and ``<|im_end|>`` as single tokens.
    """
    tokenizer = word_level_tokenizer(
        special_tokens=["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<fim_prefix>", "<fim_suffix>"],
        named_tokens={"image_token": "<|img|>"},
        chat_template=ARIA_TEMPLATE,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
    )
    processor = AriaProcessor(image_processor=AriaImageProcessor(), tokenizer=tokenizer, chat_template=ARIA_TEMPLATE,
                              size_conversion={IMAGE: QUERIES})
    text = AriaTextConfig(**text_sizes(processor.tokenizer, max_position_embeddings=1024),
                          moe_num_experts=EXPERTS, moe_topk=TOP_K, moe_num_shared_experts=1)
    config = AriaConfig(
        vision_config=Idefics3VisionConfig(**vision_sizes(image_size=IMAGE, patch_size=PATCH)),
        text_config=text,
        projector_patch_to_query_dict={PATCHES: QUERIES},
        image_token_index=processor.tokenizer.convert_tokens_to_ids("<|img|>"),
    )
    model = AriaForConditionalGeneration(config)
    randomise_norms(model)
    return model, processor


#: The checkpoints this module builds, by name.
BUILDERS = {"aria": build_aria}


#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builders' documented
#: configurations above, never off the code under test.
CONTRACTS = {
    # envoys/testing/aria.py: Idefics 3's ViT on 980 px squares of 140 px patches (7x7 = 49 a row), 2 blocks,
    # post_layernorm; 64 wide x 48 high is 980 x 735 padded to the square (42 real patches, the rest masked); the
    # projector reads the last block before the norm and gives 4 queries an image, 4 image tokens.
    "aria": Row(
        loads=Loads(("AriaForConditionalGeneration", "AriaProcessor", "TokenizersBackend")),
        image_tokens=(4, 4),
        sizes=Sizes(num_layers=2, patch_size=140, image_size=980, **SIGLIP),
        stream=batched((1, 49), (1, 49)),
        projected=batched((1, 4), (1, 4)),
        projector_reads=Reads("layer_output", block=-1),
        final_norm=True,
        pattern=PatternRow(padded=True),
        rules=(scatter("aria"), *attention("idefics3", "Idefics3VisionAttention"),
               *attention("aria", "AriaTextAttention"), router("aria", "AriaTextTopKRouter")),
        native={
            "vision": "model.vision_tower", "projector": "model.multi_modal_projector",
            "vision.norm": "model.vision_tower.post_layernorm",
            "vision.patch_embed": "model.vision_tower.embeddings.patch_embedding",
            **blocks("vision.layers", "model.vision_tower.encoder.layers", ENCODER_BLOCK),
            **text_model("model.language_model"),
        },
        # the text model's routers: aria.py: 2 blocks, 4 experts, 2 a token; its router is the MLP's router
        moe=MoeRow(sparse=(0, 1), experts=4, top_k=2, router="router"),
    ),
}
