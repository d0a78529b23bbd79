"""Tiny GLM-V checkpoints: GLM-4.1V (glm4v), GLM-4.6V (glm46v), GLM-GA (glmga) and GLM-OCR (glm_ocr).

Each builder returns a randomly initialised float32 model and the family's
stock processor (its stock image processor and video processor) with small
pixel bounds. The four share one layout: a packed GLM ViT at ``model.visual``
(2 blocks, width 32, 2 heads of 16, patch 8, ``temporal_patch_size`` 2,
``spatial_merge_size`` 2), whose final RMSNorm (``post_layernorm``), 2x2
convolution (``downsample``, to ``out_hidden_size`` 32, the text width) and
merger MLP (``merger``) turn each 2x2 block of patches into one image token;
and a GLM-4 text model of 2 sandwich-normed blocks, width 32, 2 query heads /
1 key-value head of 16, half-rotary M-RoPE (``partial_rotary_factor`` 0.5: 8
rotary dims, ``mrope_section`` [2, 1, 1], sum 4 = 8 / 2), MLP 64 wide. So a
32x32 image is 16 patches and 4 image tokens, a 64 wide x 48 high one 48
patches and 12 tokens.

Pixel bounds: the image processors resize to multiples of ``f = 2 * patch``
(16) with ``shortest_edge`` ``4 * f**2`` and ``longest_edge`` ``128 * f**2``,
counted over the two temporal copies of a still image (GLM's ``smart_resize``
multiplies by ``temporal_patch_size``), so an image becomes 2 to 64 tokens and
the two test images keep their sizes. Norm weights are drawn at random
(`randomise_norms`).

Processors: GLM-4.1V's checkpoints ship ``Glm4vProcessor``; GLM-4.6V's
``Glm46VProcessor``; transformers 5.24 maps neither glmga nor glm_ocr to a
processor class, and their checkpoints name ``Glm46VProcessor`` (GLM-GA with its
own ``GlmgaImageProcessor`` and ``GlmgaVideoProcessor``, GLM-OCR with GLM-4.6V's).
"""

from __future__ import annotations

from typing import Any

from transformers import (
    Glm4vConfig,
    Glm4vForConditionalGeneration,
    Glm4vImageProcessor,
    Glm4vProcessor,
    Glm4vVideoProcessor,
    Glm46VConfig,
    Glm46VForConditionalGeneration,
    Glm46VImageProcessor,
    Glm46VProcessor,
    Glm46VVideoProcessor,
    GlmOcrConfig,
    GlmOcrForConditionalGeneration,
    PreTrainedModel,
    ProcessorMixin,
)

from .contract import (
    NO_WINDOWS,
    PER_IMAGE_PATTERN,
    QWEN_VIT_BLOCK,
    TEXT_BLOCK,
    Loads,
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
from .rope import rope
from .sizes import text_sizes
from .tokenizer import TokenizersBackend, word_level_tokenizer

PATCH = 8
MERGE = 2
OPENAI_CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
OPENAI_CLIP_STD = [0.26862954, 0.26130258, 0.27577711]

#: GLM-4.1V's chat template, shortened: ``[gMASK]<sop>``, role tokens, the image between its begin/end markers.
CHAT_TEMPLATE = (
    "[gMASK]<sop>"
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for item in message['content'] %}"
    "{% if item['type'] == 'image' %}{{ '<|begin_of_image|><|image|><|end_of_image|>' }}"
    "{% elif item['type'] == 'video' %}{{ '<|begin_of_video|><|video|><|end_of_video|>' }}"
    "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}"
)

_SPECIAL = ["<|endoftext|>", "[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>"]
_NAMED = {
    "image_token": "<|image|>",
    "video_token": "<|video|>",
    "image_start_token": "<|begin_of_image|>",
    "image_end_token": "<|end_of_image|>",
    "video_start_token": "<|begin_of_video|>",
    "video_end_token": "<|end_of_video|>",
}


def _tokenizer() -> TokenizersBackend:
    return word_level_tokenizer(
        special_tokens=_SPECIAL,
        named_tokens=_NAMED,
        chat_template=CHAT_TEMPLATE,
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
    )


def _token_ids(tokenizer: TokenizersBackend) -> dict[str, int]:
    """The top-level config's token ids, read off the tokenizer."""
    return {f"{name}_id": tokenizer.convert_tokens_to_ids(token) for name, token in _NAMED.items()}


def _size() -> dict[str, int]:
    factor = PATCH * MERGE
    return {"shortest_edge": 4 * factor**2, "longest_edge": 128 * factor**2}


def _processing(**extra: Any) -> dict[str, Any]:
    return {"patch_size": PATCH, "merge_size": MERGE, "temporal_patch_size": 2, "image_mean": OPENAI_CLIP_MEAN,
            "image_std": OPENAI_CLIP_STD, "size": _size(), **extra}


def _vision(**extra: Any) -> dict[str, Any]:
    """The tower: 2 blocks, width 32, 2 heads, patch 8, 16 learned positions (``image_size`` 32: a 4x4 grid),
    merged 2x2 to ``out_hidden_size`` 32; the merger's MLP ``intermediate_size`` 64 wide. GLM-4.1V's tower MLP is
    ``out_hidden_size`` wide (the release builds it so), GLM-OCR's ``intermediate_size``."""
    return {
        "depth": 2,
        "hidden_size": 32,
        "num_heads": 2,
        "hidden_act": "silu",
        "image_size": 32,
        "patch_size": PATCH,
        "spatial_merge_size": MERGE,
        "temporal_patch_size": 2,
        "out_hidden_size": 32,
        "intermediate_size": 64,
        "rope_parameters": {"rope_type": "axial", "rope_theta": 10000.0},
        **extra,
    }


def _text(tokenizer: TokenizersBackend) -> dict[str, Any]:
    return text_sizes(
        tokenizer,
        max_position_embeddings=1024,
        bos_token_id=None,
        **rope(10_000.0, partial_rotary_factor=0.5, mrope_section=[2, 1, 1]),
    )


def _built(model: PreTrainedModel, processor: ProcessorMixin) -> tuple[PreTrainedModel, ProcessorMixin]:
    randomise_norms(model)
    return model, processor


def build_glm4v() -> tuple[PreTrainedModel, ProcessorMixin]:
    """Imitates zai-org/GLM-4.1V-9B-Thinking: the module docstring's tower and text model, ``Glm4vProcessor``."""
    tokenizer = _tokenizer()
    config = Glm4vConfig(text_config=_text(tokenizer), vision_config=_vision(), **_token_ids(tokenizer))
    processor = Glm4vProcessor(
        image_processor=Glm4vImageProcessor(**_processing()),
        tokenizer=tokenizer,
        video_processor=Glm4vVideoProcessor(**_processing()),
        chat_template=CHAT_TEMPLATE,
    )
    return _built(Glm4vForConditionalGeneration(config), processor)


def build_glm46v() -> tuple[PreTrainedModel, ProcessorMixin]:
    """Imitates zai-org/GLM-4.6V-Flash: GLM-4.1V's tower and text model under ``Glm46VModel``, ``Glm46VProcessor``."""
    tokenizer = _tokenizer()
    config = Glm46VConfig(text_config=_text(tokenizer), vision_config=_vision(), **_token_ids(tokenizer))
    processor = Glm46VProcessor(
        image_processor=Glm46VImageProcessor(**_processing()),
        tokenizer=tokenizer,
        video_processor=Glm46VVideoProcessor(**_processing()),
        chat_template=CHAT_TEMPLATE,
    )
    return _built(Glm46VForConditionalGeneration(config), processor)


def build_glmga() -> tuple[PreTrainedModel, ProcessorMixin]:
    """Imitates a GLM-GA checkpoint: model_type glmga, which transformers builds as ``Glm46VForConditionalGeneration``
    (GLM-4.1V's tower and text model), with GLM-GA's own image and video processors (``patch_expand_factor`` 1) under
    ``Glm46VProcessor``."""
    from transformers import GlmgaConfig, GlmgaImageProcessor, GlmgaVideoProcessor

    tokenizer = _tokenizer()
    config = GlmgaConfig(text_config=_text(tokenizer), vision_config=_vision(), **_token_ids(tokenizer))
    processor = Glm46VProcessor(
        image_processor=GlmgaImageProcessor(**_processing(patch_expand_factor=1)),
        tokenizer=tokenizer,
        video_processor=GlmgaVideoProcessor(**_processing()),
        chat_template=CHAT_TEMPLATE,
    )
    return _built(Glm46VForConditionalGeneration(config), processor)


def build_glm_ocr() -> tuple[PreTrainedModel, ProcessorMixin]:
    """Imitates zai-org/GLM-OCR: a tower without learned position embeddings or post-convolution norm, q/k RMSNorms in
    its attention and biases on its projections, its MLP ``intermediate_size`` 64 wide (the merger's
    ``out_hidden_size * in_channels`` = 96); the text attention without biases; ``Glm46VProcessor``."""
    tokenizer = _tokenizer()
    config = GlmOcrConfig(text_config=_text(tokenizer), vision_config=_vision(attention_bias=True),
                          **_token_ids(tokenizer))
    processor = Glm46VProcessor(
        image_processor=Glm46VImageProcessor(**_processing()),
        tokenizer=tokenizer,
        video_processor=Glm46VVideoProcessor(**_processing()),
        chat_template=CHAT_TEMPLATE,
    )
    return _built(GlmOcrForConditionalGeneration(config), processor)


#: The checkpoints this module builds, by name.
BUILDERS = {
    "glm4v": build_glm4v,
    "glm46v": build_glm46v,
    "glmga": build_glmga,
    "glm_ocr": build_glm_ocr,
}


#: The native names of every GLM checkpoint here (Row.native): the GLM ViT, its merger, the sandwich-norm text blocks.
NATIVE = {
    "vision": "model.visual", "projector": "model.visual.merger", "vision.norm": "model.visual.post_layernorm",
    "vision.patch_embed": "model.visual.patch_embed",
    **blocks("vision.layers", "model.visual.blocks", {**QWEN_VIT_BLOCK, "mlp.up_proj": "mlp.up_proj", "mlp.down_proj": "mlp.down_proj"}),
    **text_model("model.language_model", {**TEXT_BLOCK, "attention_output_norm": "post_self_attn_layernorm",
                                          "mlp_output_norm": "post_mlp_layernorm"}),
}

#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builders' documented
#: configurations above, never off the code under test.
CONTRACTS = {
    # envoys/testing/glm.py: the GLM ViT, packed, 8 px patches merged 2x2: 32x32 is 16 patches and 4 tokens, 48x64 is 48
    # and 12; a final norm (post_layernorm); a convolution folds each merge block before the merger (the projector),
    # so the projector does not read a tower value as it is (tests/test_glm.py says how); 2 blocks, width 32, 2 heads
    # of 16; GLM-4.1V's tower MLP is out_hidden_size (32) wide, GLM-OCR's intermediate_size (64).
    **{name: Row(
        loads=Loads((model_class, processor_class, "TokenizersBackend")),
        image_tokens=(4, 12),
        sizes=Sizes(num_layers=2, vision_hidden_size=32, num_heads=2, head_dim=16, intermediate_size=width, patch_size=8,
                    image_size="image_grid_thw"),
        stream=packed(16, 48),
        projected=flat((1, 4), (1, 12)),
        projector_reads=None,
        final_norm=True,
        pattern=PER_IMAGE_PATTERN,
        vision_unavailable=NO_WINDOWS,
        rules=(scatter(host), f"{tower}.vision-attention", *attention(name if name == "glm_ocr" else "glm4v", text)),
        native=NATIVE,
    ) for name, model_class, processor_class, host, tower, text, width in (
        ("glm4v", "Glm4vForConditionalGeneration", "Glm4vProcessor", "glm4v", "glm4v", "Glm4vTextAttention", 32),
        ("glm46v", "Glm46VForConditionalGeneration", "Glm46VProcessor", "glm46v", "glm4v", "Glm4vTextAttention", 32),
        ("glmga", "Glm46VForConditionalGeneration", "Glm46VProcessor", "glm46v", "glm4v", "Glm4vTextAttention", 32),
        ("glm_ocr", "GlmOcrForConditionalGeneration", "Glm46VProcessor", "glm_ocr", "glm_ocr", "GlmOcrTextAttention",
         64),
    )},
}
