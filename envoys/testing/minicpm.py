"""Tiny MiniCPM-V checkpoints: MiniCPM-V 4.6 (minicpmv4_6), MiniCPM-V 4.7 (minicpmv4_7) and MiniCPM-OCR (minicpm_ocr).

Each builder returns a randomly initialised float32 model and the family's
stock processor (its stock image processor and video processor) with small
sizes. The three share one layout: a packed SigLIP-NaViT tower at
``model.vision_tower`` (2 blocks, width 32, 2 heads of 16, MLP 64 wide, patch 4,
``image_size`` 32: an 8x8 table of learned positions), whose window-attention
merger (``vit_merger``, 2x2 windows) runs after block 0 (``insert_layer_id``
0) when the model downsamples 16x, its final LayerNorm (``post_layernorm``),
then the merger (``model.merger``: 2x2 blocks of the tower's grid, one MLP, to
the text width 32); and a Qwen3.5 text model of 4 blocks (``layer_types``
linear, linear, linear, full, as Qwen3.5's builder's: width 32, full
attention 2 query heads / 1 key-value head of 32, partial rotary 0.25 with
interleaved M-RoPE sections [2, 1, 1], gated DeltaNet 2 key / 4 value heads of
16), with a byte-level BPE tokenizer.

The image processor resizes an image of at most ``scale_resolution`` (32)
squared pixels to about 32x32 and an image larger than that is also cut into
slices (``slice_mode``): the source image resized to fit 32x32, then a grid
of slices of about 32x32 each (a 64 wide x 48 high image: 2 x 2 slices), every
side a multiple of ``patch * 4`` (16) under 16x, ``patch * 2`` (8) under 4x.
Each source image and slice is a unit of the tower (a row of
``target_sizes``), its patches in raster order, units one after another.

- 16x (MiniCPM-V 4.6 and 4.7): a 32x32 unit is 8x8 = 64 patches, 16 rows after
  the ``vit_merger`` and 4 image tokens; so a 32x32 image is 64 patches, 16
  merged rows and 4 tokens, a 64x48 one 5 units: 320 patches, 80 rows, 20 tokens.
- 4x (MiniCPM-OCR): no ``vit_merger``; the merger folds 2x2 patches, so a 32x32
  image is 64 patches and 16 tokens, a 64x48 one 320 patches and 80 tokens.

Norm weights and the parameters transformers initialises to zero (biases, the
``vit_merger``'s off-diagonal blocks) are drawn at random (`randomise_norms`,
`_randomise_zeros`).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import PreTrainedModel, ProcessorMixin

from .contract import ENCODER_BLOCK, PER_IMAGE_PATTERN, SIGLIP, Loads, Reads, Row, Sizes, blocks, flat, packed, scatter, text_model
from .norms import randomise_norms
from .qwen import QWEN3_5_TEXT_GAPS, QWEN3_5_TEXT_RULES
from .rope import rope
from .sizes import text_sizes, vision_sizes
from .tokenizer import TokenizersBackend, byte_level_tokenizer

PATCH = 4
#: The largest side, in pixels, an image is resized towards before it is sliced.
SCALE_RESOLUTION = 32

#: MiniCPM-V's chat template, shortened: ChatML, each image a placeholder the processor expands.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for item in message['content'] %}"
    "{% if item['type'] == 'image' %}{{ '<|image_pad|>' }}"
    "{% elif item['type'] == 'video' %}{{ '<|video_pad|>' }}"
    "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
_NAMED = {
    "image_token": "<|image_pad|>",
    "video_token": "<|video_pad|>",
    "image_start_token": "<image>",
    "image_end_token": "</image>",
    "slice_start_token": "<slice>",
    "slice_end_token": "</slice>",
    "image_id_start_token": "<image_id>",
    "image_id_end_token": "</image_id>",
}


def _tokenizer() -> TokenizersBackend:
    return byte_level_tokenizer(
        special_tokens=_SPECIAL,
        named_tokens=_NAMED,
        chat_template=CHAT_TEMPLATE,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
    )


def _text(tokenizer: TokenizersBackend) -> dict[str, Any]:
    """The Qwen3.5 text model: Qwen3.5's builder's (4 blocks, 3 gated DeltaNet then 1 full attention)."""
    return {
        "model_type": "qwen3_5_text",
        **text_sizes(
            tokenizer,
            num_hidden_layers=4,
            head_dim=32,
            max_position_embeddings=1024,
            layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"],
            linear_conv_kernel_dim=4,
            linear_key_head_dim=16,
            linear_value_head_dim=16,
            linear_num_key_heads=2,
            linear_num_value_heads=4,
            **rope(10_000_000.0, partial_rotary_factor=0.25, mrope_section=[2, 1, 1], mrope_interleaved=True),
        ),
    }


def _vision() -> dict[str, Any]:
    """The tower: 2 blocks, width 32, 2 heads, MLP 64, patch 4, an 8x8 table of positions (``image_size`` 32)."""
    return vision_sizes(patch_size=PATCH, image_size=32, hidden_act="gelu_pytorch_tanh", window_kernel_size=[2, 2])


def _processing(downsample_mode: str) -> dict[str, Any]:
    return {"patch_size": PATCH, "scale_resolution": SCALE_RESOLUTION, "max_slice_nums": 9,
            "downsample_mode": downsample_mode}


def _randomise_zeros(model: torch.nn.Module) -> None:
    """Draw every parameter entry transformers initialises to exactly zero from N(0, 0.02) (none on the meta device,
    where a parameter has no entries to read: `envoys.testing.build_empty`)."""
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.is_meta:
                continue
            zero = parameter == 0
            if zero.any():
                parameter[zero] = torch.randn(int(zero.sum())) * 0.02


def _built(model: PreTrainedModel, processor: ProcessorMixin) -> tuple[PreTrainedModel, ProcessorMixin]:
    _randomise_zeros(model)
    randomise_norms(model)
    return model, processor


def _config(config_class: type, tokenizer: TokenizersBackend, **extra: Any) -> Any:
    return config_class(
        text_config=_text(tokenizer),
        vision_config=_vision(),
        insert_layer_id=0,
        image_token_id=tokenizer.convert_tokens_to_ids(_NAMED["image_token"]),
        video_token_id=tokenizer.convert_tokens_to_ids(_NAMED["video_token"]),
        **extra,
    )


def build_minicpmv4_6() -> tuple[PreTrainedModel, ProcessorMixin]:
    """Imitates openbmb/MiniCPM-V-4.6: the module docstring's tower (16x: the ``vit_merger`` after block 0) and
    text model, ``MiniCPMV4_6Processor``."""
    from transformers import (
        MiniCPMV4_6Config,
        MiniCPMV4_6ForConditionalGeneration,
        MiniCPMV4_6ImageProcessor,
        MiniCPMV4_6Processor,
        MiniCPMV4_6VideoProcessor,
    )

    tokenizer = _tokenizer()
    config = _config(MiniCPMV4_6Config, tokenizer, downsample_mode="16x")
    processor = MiniCPMV4_6Processor(
        image_processor=MiniCPMV4_6ImageProcessor(**_processing("16x")),
        video_processor=MiniCPMV4_6VideoProcessor(**_processing("16x")),
        tokenizer=tokenizer,
        chat_template=CHAT_TEMPLATE,
    )
    return _built(MiniCPMV4_6ForConditionalGeneration(config), processor)


def build_minicpmv4_7() -> tuple[PreTrainedModel, ProcessorMixin]:
    """Imitates openbmb/MiniCPM-V-4.7-1B: 4.6's tower and text model (16x), canvas M-RoPE (the marker tokens' ids in
    the config, the newline the byte-level ``Ċ``), ``MiniCPMV4_7Processor`` with 4.6's image and video processors."""
    from transformers import (
        MiniCPMV4_6ImageProcessor,
        MiniCPMV4_6VideoProcessor,
        MiniCPMV4_7Config,
        MiniCPMV4_7ForConditionalGeneration,
        MiniCPMV4_7Processor,
    )

    tokenizer = _tokenizer()
    ids = {f"{name}_id": tokenizer.convert_tokens_to_ids(_NAMED[f"{name}_token"])
           for name in ("image_start", "image_end", "slice_start", "slice_end")}
    config = _config(MiniCPMV4_7Config, tokenizer, downsample_mode="16x", newline_id=tokenizer.convert_tokens_to_ids("Ċ"),
                     **ids)
    processor = MiniCPMV4_7Processor(
        image_processor=MiniCPMV4_6ImageProcessor(**_processing("16x")),
        video_processor=MiniCPMV4_6VideoProcessor(**_processing("16x")),
        tokenizer=tokenizer,
        chat_template=CHAT_TEMPLATE,
    )
    return _built(MiniCPMV4_7ForConditionalGeneration(config), processor)


def build_minicpm_ocr() -> tuple[PreTrainedModel, ProcessorMixin]:
    """Imitates openbmb/MiniCPM-OCR-1.0: 4.6's tower and text model downsampling 4x (no ``vit_merger`` run), tied
    embeddings, ``MiniCPMOcrProcessor`` with its own image and video processors (``small_image_upsize`` "always")."""
    from transformers import (
        MiniCPMOcrConfig,
        MiniCPMOcrForConditionalGeneration,
        MiniCPMOcrImageProcessor,
        MiniCPMOcrProcessor,
        MiniCPMOcrVideoProcessor,
    )

    tokenizer = _tokenizer()
    config = _config(MiniCPMOcrConfig, tokenizer, downsample_mode="4x")
    processor = MiniCPMOcrProcessor(
        image_processor=MiniCPMOcrImageProcessor(**_processing("4x")),
        video_processor=MiniCPMOcrVideoProcessor(**_processing("4x")),
        tokenizer=tokenizer,
        chat_template=CHAT_TEMPLATE,
    )
    return _built(MiniCPMOcrForConditionalGeneration(config), processor)


#: The checkpoints this module builds, by name.
BUILDERS = {
    "minicpmv4_6": build_minicpmv4_6,
    "minicpmv4_7": build_minicpmv4_7,
    "minicpm_ocr": build_minicpm_ocr,
}


#: The native names of every MiniCPM checkpoint here (Row.native): the tower's (its vit_merger too, which MiniCPM-OCR's
#: tower holds but does not run), the merger outside it, and the Qwen3.5 text model's (blocks 0 to 2 linear attention,
#: block 3 full attention).
NATIVE = {
    "vision": "model.vision_tower", "projector": "model.merger", "vision.norm": "model.vision_tower.post_layernorm",
    "vision.patch_embed": "model.vision_tower.embeddings.patch_embedding", "vision.vit_merger": "model.vision_tower.vit_merger",
    **blocks("vision.layers", "model.vision_tower.encoder.layers", ENCODER_BLOCK),
    **text_model("model.language_model", {"mlp": "mlp", "input_layernorm": "input_layernorm",
                                          "post_attention_layernorm": "post_attention_layernorm"}),
    **{f"layers.{block}.linear_attn": f"model.language_model.layers.{block}.linear_attn" for block in (0, 1, 2)},
    "layers.3.self_attn": "model.language_model.layers.3.self_attn",
}

#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builders' documented
#: configurations above, never off the code under test.
CONTRACTS = {
    # envoys/testing/minicpm.py: a packed SigLIP-NaViT tower, 4 px patches, 2 blocks, width 32, 2 heads of 16, MLP 64; the
    # processor makes a 32x32 image one 32x32 unit, a 64x48 one a 32x32 source and 2x2 slices of 32x32 (5 units); 16x:
    # 64 patches a unit, the vit_merger folds them to 16 rows after block 0, the merger (the projector, outside the
    # tower, a list of one tensor per unit) to 4 tokens; post_layernorm is tower_output, what the merger reads.
    # Qwen3.5 text: blocks linear, linear, linear, full attention.
    **{name: Row(
        loads=Loads((f"{cls}ForConditionalGeneration", f"{cls}Processor", "TokenizersBackend")),
        image_tokens=(4, 20),
        sizes=Sizes(num_layers=2, patch_size=4, image_size="target_sizes", **SIGLIP),
        stream=packed(64, 320),
        merged_after=(0, packed(16, 80)),
        projected=flat((1, 4), (5, 4)),
        projector_reads=Reads("tower_output"),
        projector_list=True,
        final_norm=True,
        pattern=PER_IMAGE_PATTERN,
        text_gaps=QWEN3_5_TEXT_GAPS,
        rules=(scatter(name), f"{name}.vision-attention", f"{name}.eager-attention", *QWEN3_5_TEXT_RULES),
        native=NATIVE,
    ) for name, cls in (("minicpmv4_6", "MiniCPMV4_6"), ("minicpmv4_7", "MiniCPMV4_7"))},
    # envoys/testing/minicpm.py, build_minicpm_ocr: the same tower downsampling 4x (no vit_merger): a 32x32 image is one
    # unit of 64 patches and 16 tokens; a 64x48 one a 24x32 source and 2x2 slices of 24x32 (5 units of 48 patches, 12
    # tokens each).
    "minicpm_ocr": Row(
        loads=Loads(("MiniCPMOcrForConditionalGeneration", "MiniCPMOcrProcessor", "TokenizersBackend")),
        image_tokens=(16, 60),
        sizes=Sizes(num_layers=2, patch_size=4, image_size="target_sizes", **SIGLIP),
        stream=packed(64, 240),
        projected=flat((1, 16), (5, 12)),
        projector_reads=Reads("tower_output"),
        projector_list=True,
        final_norm=True,
        pattern=PER_IMAGE_PATTERN,
        text_gaps=QWEN3_5_TEXT_GAPS,
        rules=(scatter("minicpm_ocr"), "minicpm_ocr.vision-attention", "minicpm_ocr.eager-attention", *QWEN3_5_TEXT_RULES),
        native=NATIVE,
    ),
}
