"""A tiny LFM3-VL checkpoint (model_type lfm3_vl): a packed hybrid tower (gated 2D convolutions and attention per
image), a projector over 2x2 patch blocks, an LFM3 hybrid text model.

The builder returns a randomly initialised float32 model and the stock
processor (``Lfm3VlProcessor`` over Qwen2-VL's image processor and Qwen3-VL's
video processor, as transformers' auto classes pair them) with small pixel
bounds. The tower (``model.vision_tower``) embeds each patch of 8 x 8 pixels,
two frames deep (``temporal_patch_size`` 2), with a linear layer, RMS-norms it
(``embedding_norm``) and runs 2 blocks of width 32: block 0 attention (2 query
heads, 1 key-value head, of 16; q/k RMS-normed, a 2D axial rotary embedding),
block 1 a gated depthwise 3 x 3 convolution over each image's patch grid
(``layer_types`` ["full_attention", "conv"]), each with a SwiGLU MLP 64 wide;
no final norm. Every image's patches run packed, image after image, each in
merge-block order (each 2 x 2 block's patches consecutive). The projector
(``model.multi_modal_projector``) LayerNorms each patch, folds each 2 x 2 block
into one row of 4 * 32 and maps it to the text width 32 with two linear layers
(32 wide). The text model: 3 LFM3 blocks of width 32, a gated short
convolution (kernel 3), sliding-window attention (window 8) and full attention
(``layer_types`` ["conv", "sliding_attention", "full_attention"]), attention
with 2 query heads / 1 key-value head of 16 and a sigmoid output gate per head,
each block sandwich-normed (``use_sandwich_norm``), a SwiGLU MLP 64 wide, tied
embeddings.

Pixel bounds: the image processor resizes to multiples of ``f = 2 * patch``
(16) with ``min_pixels`` ``4 * f**2`` and ``max_pixels`` ``64 * f**2``, so a
32x32 image is 16 patches and 4 image tokens, a 64 wide x 48 high one 48
patches and 12 tokens. Every norm's weight (and the projector norm's bias) is
drawn at random (`randomise_norms`).
"""

from __future__ import annotations

from transformers import (
    Lfm3Config,
    Lfm3VlConfig,
    Lfm3VlForConditionalGeneration,
    Lfm3VlProcessor,
    PreTrainedModel,
    ProcessorMixin,
    Qwen3VLVideoProcessor,
)
from transformers.models.lfm3_vl.configuration_lfm3_vl import Lfm3VlVisionConfig

from .contract import NO_WINDOWS, PER_IMAGE_PATTERN, SIGLIP, Loads, Reads, Row, Sizes, attention, blocks, flat, packed, scatter, text_model
from .norms import randomise_norms
from .qwen import CHAT_TEMPLATE, HALF, MERGE, _image_processor, _video_processor
from .sizes import text_sizes, vision_sizes
from .tokenizer import TokenizersBackend, word_level_tokenizer

PATCH = 8
#: The tower's blocks: attention, then a gated 2D convolution.
VISION_LAYER_TYPES = ["full_attention", "conv"]
#: The text blocks: a short convolution, sliding-window attention, full attention.
TEXT_LAYER_TYPES = ["conv", "sliding_attention", "full_attention"]

#: LFM3-VL's turns: ``<|startoftext|>``, then ChatML with Qwen-VL's vision markers.
LFM3_VL_TEMPLATE = "{{ bos_token }}" + CHAT_TEMPLATE

#: The tokens the processor reads, by the names it reads them under (its defaults).
_NAMED = {
    "image_token": "<|image_pad|>",
    "video_token": "<|video_pad|>",
    "vision_start_token": "<|vision_start|>",
    "vision_end_token": "<|vision_end|>",
}


def _tokenizer() -> TokenizersBackend:
    """LFM's tokenizer, reduced: ``<|pad|>``, ``<|startoftext|>`` (BOS), ``<|im_start|>``, ``<|im_end|>`` (EOS) and
    the vision tokens."""
    return word_level_tokenizer(
        special_tokens=["<|pad|>", "<|startoftext|>", "<|im_start|>", "<|im_end|>"],
        named_tokens=_NAMED,
        chat_template=LFM3_VL_TEMPLATE,
        bos_token="<|startoftext|>",
        eos_token="<|im_end|>",
        pad_token="<|pad|>",
    )


def build_lfm3_vl() -> tuple[PreTrainedModel, ProcessorMixin]:
    """Imitates LiquidAI/LFM3-VL-2B: the module docstring's tower, projector and text model."""
    tokenizer = _tokenizer()
    ids = {f"{name}_id": tokenizer.convert_tokens_to_ids(token) for name, token in _NAMED.items()}
    config = Lfm3VlConfig(
        vision_config=Lfm3VlVisionConfig(**vision_sizes(
            num_key_value_heads=1, patch_size=PATCH, spatial_merge_size=MERGE, temporal_patch_size=2,
            layer_types=VISION_LAYER_TYPES,
        )),
        text_config=Lfm3Config(**text_sizes(
            tokenizer, num_hidden_layers=len(TEXT_LAYER_TYPES), head_dim=16, layer_types=TEXT_LAYER_TYPES,
            conv_L_cache=3, sliding_window=8, tie_word_embeddings=True,
        )),
        projector_hidden_size=32,
        tie_word_embeddings=True,
        **ids,
    )
    processor = Lfm3VlProcessor(
        image_processor=_image_processor(PATCH, HALF, HALF),
        tokenizer=tokenizer,
        video_processor=_video_processor(Qwen3VLVideoProcessor, PATCH, HALF, HALF),
        chat_template=LFM3_VL_TEMPLATE,
    )
    model = Lfm3VlForConditionalGeneration(config)
    randomise_norms(model)
    return model, processor


#: The checkpoints this module builds, by name.
BUILDERS = {"lfm3_vl": build_lfm3_vl}


#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builders' documented
#: configurations above, never off the code under test.
CONTRACTS = {
    # envoys/testing/lfm3_vl.py: packed, patch 8, 2x2 merge blocks: 32x32 is 16 patches and 4 tokens, 64 wide x 48 high
    # 48 patches and 12; tower block 0 attention, block 1 a gated 2D convolution, no final norm; the projector reads
    # tower_output. Text blocks: a short convolution, sliding-window attention, full attention.
    "lfm3_vl": Row(
        loads=Loads(("Lfm3VlForConditionalGeneration", "Lfm3VlProcessor", "TokenizersBackend")),
        image_tokens=(4, 12),
        sizes=Sizes(num_layers=2, patch_size=8, image_size="image_grid_thw", **SIGLIP),
        stream=packed(16, 48),
        projected=flat((1, 4), (1, 12)),
        projector_reads=Reads("tower_output", unbatched=True),
        pattern=PER_IMAGE_PATTERN,
        vision_unavailable=NO_WINDOWS,
        tower_mixers={1: "conv"},
        text_gaps={"attention_output": (0,), "self_attn.": (0,)},
        rules=(scatter("lfm3_vl"), "lfm3_vl.vision-attention", "lfm3_vl.eager-attention", *attention("lfm3", "Lfm3Attention")),
        native={
            "vision": "model.vision_tower", "projector": "model.multi_modal_projector",
            "vision.patch_embed": "model.vision_tower.patch_embed",
            **blocks("vision.layers", "model.vision_tower.layers", {"input_layernorm": "operator_norm",
                "post_attention_layernorm": "ffn_norm", "mlp": "feed_forward"}),
            **text_model("model.language_model", {"mlp": "feed_forward", "input_layernorm": "operator_norm",
                "post_attention_layernorm": "ffn_norm", "attention_output_norm": "post_operator_norm",
                "mlp_output_norm": "post_ffn_norm"}, norm="embedding_norm"),
            "vision.layers.0.self_attn": "model.vision_tower.layers.0.self_attn",
            "vision.layers.0.self_attn.o_proj": "model.vision_tower.layers.0.self_attn.out_proj",
            "layers.1.self_attn": "model.language_model.layers.1.self_attn",
            "layers.2.self_attn": "model.language_model.layers.2.self_attn",
            "vision.embedding_norm": "model.vision_tower.embedding_norm",
            "vision.layers.1.conv": "model.vision_tower.layers.1.conv",
        },
    ),
}
