"""A tiny PerceptionLM checkpoint: timm's Perception Encoder (``vit_pe_core_large_patch14_336``'s architecture, two
blocks of width 32) in a TimmWrapper, the pooling MLP projector, a Llama text model.

The builder returns an unsaved (`PerceptionLMForConditionalGeneration`,
`PerceptionLMProcessor`) pair with random float32 weights (seed the torch
generator first; :func:`envoys.testing.build` does). The image processor cuts
each image into 16 pixel tiles (``thumb+tile``, up to 4 tiles besides the
thumbnail), each an 8x8 grid of 2 pixel patches behind a CLS row (65 rows); the
projector pools each tile's grid 2x2 to 4x4 = 16 image tokens. So a 32x32 image
is a 2x2 canvas and a 64x16 one a 4x1 canvas, each 5 tiles and 80 image tokens. The video processor
resizes every frame to one 16 pixel tile: 16 video tokens a frame.
Needs timm (the test extra installs it).
"""

from __future__ import annotations

import timm  # noqa: F401  (the tower's package: without it this builder is left out, saying so)
import torch
from transformers import (
    PerceptionLMConfig,
    PerceptionLMForConditionalGeneration,
    PerceptionLMProcessor,
    TimmWrapperConfig,
)
from transformers.models.perception_lm.image_processing_perception_lm import PerceptionLMImageProcessor
from transformers.models.perception_lm.video_processing_perception_lm import PerceptionLMVideoProcessor

from .contract import Loads, Reads, Row, Sizes, VideoRow, attention, batched, scatter, text_model
from .deepseek import llama_text
from .norms import randomise_norms
from .tokenizer import TokenizersBackend, word_level_tokenizer

TILE = 16
PATCH = 2
POOLING = 2
MAX_TILES = 4

#: Llama 3's turns as PerceptionLM's template writes them, an image as ``<|image|>`` before the text.
TEMPLATE = (
    "{{ '<|begin_of_text|>' }}"
    "{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for item in message['content'] %}"
    "{% if item['type'] == 'image' %}{{ '<|image|>' }}"
    "{% elif item['type'] == 'video' %}{{ '<|video|>' }}"
    "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '<|eot_id|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)


def perception_tokenizer() -> TokenizersBackend:
    """Llama 3's special tokens, ``<|image|>`` and ``<|video|>`` (PerceptionLM's placeholders)."""
    return word_level_tokenizer(
        special_tokens=["<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>", "<|finetune_right_pad_id|>"],
        named_tokens={"image_token": "<|image|>", "video_token": "<|video|>"},
        chat_template=TEMPLATE,
        eos_token="<|eot_id|>",
        pad_token="<|finetune_right_pad_id|>",
        bos_token="<|begin_of_text|>",
    )


def perception_encoder() -> TimmWrapperConfig:
    """timm's PE-Core architecture as PerceptionLM configures it (PE-Lang's: layer scale, no final norm, no pooling
    head), tiny: 2 blocks of width 32, 2 heads, an MLP 64 wide (``mlp_ratio`` 2), 16 pixel tiles of 2 pixel patches,
    the rotary embedding on the 8x8 grid."""
    return TimmWrapperConfig(
        architecture="vit_pe_core_large_patch14_336",
        model_args={"embed_dim": 32, "depth": 2, "num_heads": 2, "mlp_ratio": 2.0, "img_size": TILE,
                    "patch_size": PATCH, "ref_feat_shape": (TILE // PATCH, TILE // PATCH), "init_values": 0.1,
                    "use_post_transformer_norm": False, "global_pool": ""},
        do_pooling=False,
    )


def randomise_embeddings(model: torch.nn.Module) -> None:
    """Draw the tower's CLS token, position embedding and layer scales (a constant 0.1 at init), and every norm's
    weight and bias."""
    tower = model.model.vision_tower.timm_model
    with torch.no_grad():
        tower.cls_token.normal_(0.0, 0.5)
        tower.pos_embed.normal_(0.0, 0.5)
        for block in tower.blocks:
            block.gamma_1.uniform_(0.5, 1.5)
            block.gamma_2.uniform_(0.5, 1.5)
    randomise_norms(model)


def build_perception_lm() -> tuple[PerceptionLMForConditionalGeneration, PerceptionLMProcessor]:
    """Imitates facebook/Perception-LM-1B (448 pixel tiles of 14 pixel patches, up to 36 tiles, pooling ratio 2).

    `perception_encoder`; the projector maps width 32 to the text width 32 and
    pools 2x2; Llama text model (`envoys.testing.deepseek.llama_text`). The
    stock processor, its image processor at 16 pixel tiles, up to 4 of them.
    """
    tokenizer = perception_tokenizer()
    config = PerceptionLMConfig(
        vision_config=perception_encoder(), text_config=llama_text(tokenizer), projector_pooling_ratio=POOLING,
        image_token_id=tokenizer.image_token_id, video_token_id=tokenizer.video_token_id,
    )
    model = PerceptionLMForConditionalGeneration(config)
    randomise_embeddings(model)
    images = PerceptionLMImageProcessor(tile_size=TILE, max_num_tiles=MAX_TILES, vision_input_type="thumb+tile")
    videos = PerceptionLMVideoProcessor(size={"height": TILE, "width": TILE})
    return model, PerceptionLMProcessor(video_processor=videos, image_processor=images, tokenizer=tokenizer,
                                        patch_size=PATCH, pooling_ratio=POOLING, chat_template=TEMPLATE)


#: The checkpoints this module builds, by name.
BUILDERS = {"perception_lm": build_perception_lm}

#: The Perception Encoder block's standard names, native within a block.
PE_BLOCK = {"self_attn": "attn", "self_attn.o_proj": "attn.proj", "input_layernorm": "norm1",
            "post_attention_layernorm": "norm2", "mlp": "mlp", "mlp.up_proj": "mlp.fc1", "mlp.down_proj": "mlp.fc2"}

#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builder's documented
#: configuration above, never off the code under test.
CONTRACTS = {
    # envoys/testing/perception_lm.py: 16 px tiles of 2 px patches, 8x8 = 64 patches and a CLS row a tile (65); the
    # 32x32 image a 2x2 canvas, the 64x16 one 4x1, each with its thumbnail 5 tiles; the projector pools each tile's
    # 8x8 to 4x4 = 16 tokens, 80 an image; the host drops the CLS row before the projector; no final norm. The video
    # processor resizes each of the video's 4 frames to one 16 px tile: 4 rows of 65, 16 tokens a frame, 64 a video.
    "perception_lm": Row(
        loads=Loads(("PerceptionLMForConditionalGeneration", "PerceptionLMProcessor", "TokenizersBackend")),
        image_tokens=(80, 80),
        sizes=Sizes(num_layers=2, vision_hidden_size=32, num_heads=2, head_dim=16, intermediate_size=64, patch_size=2,
                    image_size=16),
        stream=batched((5, 65), (5, 65)),
        projected=batched((5, 16), (5, 16)),
        projector_reads=Reads("tower_output", drop_first=1),
        second_image=(64, 16),
        prefix=1,
        video=VideoRow(tokens=64, stream=(4, 65, 32), grid=(4, 4, 4)),
        rules=(scatter("perception_lm"), "timm.rope-attention", *attention("llama", "LlamaAttention")),
        native={
            "vision": "model.vision_tower", "projector": "model.multi_modal_projector",
            "vision.patch_embed": "model.vision_tower.timm_model.patch_embed",
            "vision.norm": "model.vision_tower.timm_model.norm",
            "vision.layers": "model.vision_tower.timm_model.blocks",
            **{f"vision.layers.*.{name}": f"model.vision_tower.timm_model.blocks.*.{path}" for name, path in PE_BLOCK.items()},
            **text_model("model.language_model"),
        },
    ),
}
