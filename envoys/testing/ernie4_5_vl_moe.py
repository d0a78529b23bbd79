"""A tiny ERNIE-4.5-VL checkpoint (model_type ernie4_5_vl_moe): a packed ViT, a resampler, a mixture-of-experts text
model whose experts are split by modality.

The builder returns a randomly initialised float32 model and the stock
processor (``Ernie4_5_VLMoeProcessor`` over ``Ernie4_5_VLMoeImageProcessor``
and ``Ernie4_5_VLMoeVideoProcessor``, which draws no timestamps here:
``draw_on_frames`` False, so no font file is needed) with small pixel bounds.

Tower (``model.vision_tower``): 2 blocks, width 32, 2 heads of 16, an MLP 64
wide, patch 8 (a linear map of each 3x8x8 patch), ``spatial_merge_size`` 2,
axial 2D rotary embedding; every image's patches run packed, image after
image, each image's in merge-block order, and a final LayerNorm (``ln``).
Resampler (``model.resampler_model``): folds each 2x2 block into one row of
4 * 32, maps it (``spatial_linear``), pairs it with itself (an image has one
frame: ``temporal_merge_size`` 2 duplicates it), maps it again
(``temporal_linear``), then to the text width 32 (``mlp``) and RMS-norms it
(``after_norm``). So a 32x32 image is 16 patches and 4 image tokens, a 64 wide
x 48 high one 48 patches and 12 tokens.

Text: 2 blocks, width 32, 2 query heads / 1 key-value head of 16, M-RoPE
(``mrope_section`` [3, 3, 2], sum 8 = 16 / 2); block 0's MLP dense, 64 wide
(``mlp_layer_types`` ["dense", "sparse"]); block 1's a modality-split mixture:
4 text experts (``text_moe``, 32 wide) and 4 vision experts (``vision_moe``,
16 wide; ``moe_intermediate_size`` [32, 16]), 2 a token, each set with its own
router (``gate``), plus one shared expert 32 wide (``moe_num_shared_experts``
1) on every token. The routers' score-correction bias stays zero (its init),
so each router's choice is the top 2 of its logits; their weights are drawn
from N(0, 1) (the init's 0.02 leaves every token's scores nearly equal). The
processor marks the image tokens and the image start and end tokens as vision
tokens (``moe_mm_token_type_ids`` 1), which the vision experts take.

Pixel bounds: the image processor resizes to multiples of ``f = 2 * patch``
(16) with ``shortest_edge`` ``4 * f**2`` and ``longest_edge`` ``64 * f**2``,
so an image becomes 4 to 64 tokens and the two test images keep their sizes.
Every norm's weight is drawn at random (`randomise_norms`).
"""

from __future__ import annotations

import torch
from transformers import (
    Ernie4_5_VLMoeConfig,
    Ernie4_5_VLMoeForConditionalGeneration,
    Ernie4_5_VLMoeImageProcessor,
    Ernie4_5_VLMoeProcessor,
    Ernie4_5_VLMoeVideoProcessor,
)

from .contract import (
    NO_WINDOWS,
    PER_IMAGE_PATTERN,
    QWEN_VIT_BLOCK,
    SIGLIP,
    Loads,
    MoeRow,
    Reads,
    Row,
    Sizes,
    attention,
    blocks,
    flat,
    packed,
    router,
    scatter,
    text_model,
)
from .norms import randomise_norms
from .rope import rope
from .sizes import text_sizes
from .tokenizer import TokenizersBackend, word_level_tokenizer

PATCH = 8
MERGE = 2
EXPERTS = 4
TOP_K = 2
HALF = [0.5, 0.5, 0.5]
#: Which text blocks' MLP is dense and which a mixture of experts.
MLP_LAYER_TYPES = ["dense", "sparse"]

#: ERNIE-4.5-VL's chat template, shortened: each image between its start and end markers, then the text.
CHAT_TEMPLATE = (
    "<|begin_of_sentence|>"
    "{% for message in messages %}"
    "{% if message['role'] == 'user' %}{{ 'User: ' }}{% else %}{{ 'Assistant: ' }}{% endif %}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for item in message['content'] %}"
    "{% if item['type'] == 'image' %}{{ '<|IMAGE_START|><|IMAGE_PLACEHOLDER|><|IMAGE_END|>' }}"
    "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ 'Assistant: ' }}{% endif %}"
)

_SPECIAL = ["<unk>", "<|begin_of_sentence|>", "</s>", "<|end_of_sentence|>"]
_NAMED = {
    "image_token": "<|IMAGE_PLACEHOLDER|>",
    "image_start_token": "<|IMAGE_START|>",
    "image_end_token": "<|IMAGE_END|>",
    "video_token": "<|VIDEO_PLACEHOLDER|>",
    "video_start_token": "<|VIDEO_START|>",
    "video_end_token": "<|VIDEO_END|>",
}


def _tokenizer() -> TokenizersBackend:
    return word_level_tokenizer(
        special_tokens=_SPECIAL,
        named_tokens=_NAMED,
        chat_template=CHAT_TEMPLATE,
        eos_token="</s>",
        pad_token="<unk>",
        bos_token="<|begin_of_sentence|>",
    )


def build_ernie4_5_vl_moe() -> tuple[Ernie4_5_VLMoeForConditionalGeneration, Ernie4_5_VLMoeProcessor]:
    """Imitates baidu/ERNIE-4.5-VL-28B-A3B-PT: the module docstring's tower, resampler and text model."""
    tokenizer = _tokenizer()
    ids = {f"{name}_id": tokenizer.convert_tokens_to_ids(token) for name, token in _NAMED.items()}
    config = Ernie4_5_VLMoeConfig(
        text_config=text_sizes(
            tokenizer, head_dim=16, max_position_embeddings=1024, moe_num_experts=EXPERTS, moe_k=TOP_K,
            moe_intermediate_size=[32, 16], moe_num_shared_experts=1, mlp_layer_types=MLP_LAYER_TYPES,
            **rope(500_000.0, mrope_section=[3, 3, 2]),
        ),
        vision_config={
            "depth": 2, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "patch_size": PATCH,
            "spatial_merge_size": MERGE, "rope_parameters": {"rope_type": "axial", "rope_theta": 10000.0},
        },
        **ids,
    )
    factor = PATCH * MERGE
    pixels = {"shortest_edge": 4 * factor**2, "longest_edge": 64 * factor**2}
    processor = Ernie4_5_VLMoeProcessor(
        image_processor=Ernie4_5_VLMoeImageProcessor(
            patch_size=PATCH, merge_size=MERGE, image_mean=HALF, image_std=HALF, size=pixels,
        ),
        tokenizer=tokenizer,
        video_processor=Ernie4_5_VLMoeVideoProcessor(
            patch_size=PATCH, merge_size=MERGE, image_mean=HALF, image_std=HALF, size=pixels,
            draw_on_frames=False, do_sample_frames=False,
        ),
        chat_template=CHAT_TEMPLATE,
    )
    model = Ernie4_5_VLMoeForConditionalGeneration(config)
    with torch.no_grad():
        for layer in model.model.language_model.layers:
            for experts in ("text_moe", "vision_moe"):
                part = getattr(layer.mlp, experts, None)
                if part is not None:  # a sparse block's two routers; a dense block's MLP has none
                    part.gate.weight.normal_(0.0, 1.0)
    randomise_norms(model)
    return model, processor


#: The checkpoints this module builds, by name.
BUILDERS = {"ernie4_5_vl_moe": build_ernie4_5_vl_moe}


#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builders' documented
#: configurations above, never off the code under test.
CONTRACTS = {
    # envoys/testing/ernie4_5_vl_moe.py: a packed ViT of 8 px patches in merge-block order, 2 blocks, a final LayerNorm
    # (ln); the resampler (outside the tower) reads tower_output and folds 2x2 patches: 32x32 is 16 patches and 4
    # tokens, 48x64 is 48 and 12. Text block 0 dense, block 1 a modality-split mixture of experts.
    "ernie4_5_vl_moe": Row(
        loads=Loads(("Ernie4_5_VLMoeForConditionalGeneration", "Ernie4_5_VLMoeProcessor", "TokenizersBackend")),
        image_tokens=(4, 12),
        sizes=Sizes(num_layers=2, patch_size=8, image_size="image_grid_thw", **SIGLIP),
        stream=packed(16, 48),
        projected=flat((1, 4), (1, 12)),
        projector_reads=Reads("tower_output", unbatched=True),
        final_norm=True,
        pattern=PER_IMAGE_PATTERN,
        vision_unavailable=NO_WINDOWS,
        text_gaps={"mlp.router_logits": (0,)},
        rules=(scatter("ernie4_5_vl_moe"), "ernie4_5_vl_moe.vision-attention",
               *attention("ernie4_5_vl_moe", "Ernie4_5_VLMoeTextAttention"), router("ernie4_5_vl_moe", "Ernie4_5_VLMoeMoeTopKRouter")),
        native={
            "vision": "model.vision_tower", "projector": "model.resampler_model",
            "vision.norm": "model.vision_tower.ln", "vision.patch_embed": "model.vision_tower.patch_embed",
            **blocks("vision.layers", "model.vision_tower.blocks", {**QWEN_VIT_BLOCK, "mlp.up_proj": "mlp.fc1",
                "mlp.down_proj": "mlp.fc2"}),
            **text_model("model.language_model"),
            "layers.1.mlp.text_moe.gate": "model.language_model.layers.1.mlp.text_moe.gate",
            "layers.1.mlp.vision_moe.gate": "model.language_model.layers.1.mlp.vision_moe.gate",
        },
        # the text model's routers: block 1's experts split by modality, each set with its own router (4 experts a
        # modality, 2 a token): router_logits is the block's assembled logits, read-only (test_ernie4_5_vl_moe.py)
        moe=MoeRow(sparse=(1,), experts=4, top_k=2, router="text_moe.gate", split=True),
    ),
}
