"""Medium random checkpoints for the benchmark, built locally from the tiny ones' configs and processors.

- ``llava``: LLaVA with an 8-block SigLIP tower (width 256, 4 heads, patch 16
  on 224-pixel images: 196 image tokens) on an 8-block Qwen2 (width 256,
  4 query heads, 2 key-value heads).
- ``qwen3_vl``: Qwen3-VL with an 8-block ViT (width 256, 4 heads, patch 16,
  DeepStack taps after blocks 1, 3 and 5) and 8 text blocks (width 256,
  head_dim 64); a 224-pixel image is 196 patches, 49 tokens.

The tokenizer and chat template are the tiny checkpoint's; the image
processor is the family's stock class at the medium sizes. Random float32
weights from a seed, eager attention.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import (
    LlavaForConditionalGeneration,
    LlavaProcessor,
    Qwen2VLImageProcessor,
    Qwen3VLForConditionalGeneration,
    Qwen3VLProcessor,
    SiglipImageProcessor,
)

from envoys.testing import build

WIDTH = 256
BLOCKS = 8
IMAGE = 224
PATCH = 16


def _text_sizes(config) -> None:
    config.hidden_size = WIDTH
    config.intermediate_size = 4 * WIDTH
    config.num_hidden_layers = BLOCKS
    config.num_attention_heads = 4
    config.num_key_value_heads = 2
    if getattr(config, "layer_types", None) is not None:
        config.layer_types = [config.layer_types[0]] * BLOCKS


def llava(seed: int = 0):
    """The medium LLaVA (SigLIP tower, Qwen2 text) and its processor, in memory."""
    tiny, processor = build("llava-siglip", seed)
    config = tiny.config
    vision = config.vision_config
    vision.hidden_size, vision.intermediate_size = WIDTH, 4 * WIDTH
    vision.num_hidden_layers, vision.num_attention_heads = BLOCKS, 4
    vision.image_size, vision.patch_size = IMAGE, PATCH
    _text_sizes(config.text_config)
    config.image_seq_length = (IMAGE // PATCH) ** 2
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlavaForConditionalGeneration(config)
    medium = LlavaProcessor(
        image_processor=SiglipImageProcessor(
            size={"height": IMAGE, "width": IMAGE}, image_mean=[0.5] * 3, image_std=[0.5] * 3
        ),
        tokenizer=processor.tokenizer,
        patch_size=PATCH,
        vision_feature_select_strategy="full",
        num_additional_image_tokens=0,
        chat_template=processor.chat_template,
    )
    return model, medium


def qwen3_vl(seed: int = 0):
    """The medium Qwen3-VL and its processor, in memory."""
    tiny, processor = build("qwen3_vl", seed)
    config = tiny.config
    vision = config.vision_config
    vision.hidden_size, vision.intermediate_size, vision.num_heads = WIDTH, 4 * WIDTH, 4
    vision.depth, vision.patch_size, vision.out_hidden_size = BLOCKS, PATCH, WIDTH
    vision.num_position_embeddings = 256  # a 16 x 16 grid, interpolated to the image's
    vision.deepstack_visual_indexes = [1, 3, 5]
    text = config.text_config
    _text_sizes(text)
    text.head_dim = 64
    text.rope_parameters = {**text.rope_parameters, "mrope_section": [16, 8, 8]}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen3VLForConditionalGeneration(config)
    factor = PATCH * 2
    medium = Qwen3VLProcessor(
        image_processor=Qwen2VLImageProcessor(
            patch_size=PATCH, merge_size=2, temporal_patch_size=2, image_mean=[0.5] * 3, image_std=[0.5] * 3,
            min_pixels=4 * factor**2, max_pixels=64 * factor**2,
        ),
        tokenizer=processor.tokenizer,
        video_processor=processor.video_processor,
        chat_template=processor.chat_template,
    )
    return model, medium


BUILDERS = {"llava": llava, "qwen3_vl": qwen3_vl}


def build_medium(name: str, directory: str | Path, seed: int = 0) -> Path:
    """Save the medium checkpoint ``name`` (float32, eager attention written into its config) into ``directory``."""
    model, processor = BUILDERS[name](seed)
    model = model.to(torch.float32).eval()
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    processor.save_pretrained(path)
    config_file = path / "config.json"
    config = json.loads(config_file.read_text())
    config["attn_implementation"] = "eager"
    config_file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return path
