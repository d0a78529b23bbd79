"""The tiny checkpoints load as their families' users load them, and run."""

from __future__ import annotations

import inspect
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import transformers
from safetensors.torch import load_file

try:  # 5.17 on; before, the tower's own get_window_index(grid_thw)
    from transformers.vision_utils import get_vision_window_index
except ImportError:
    get_vision_window_index = None

from conftest import absent

from envoys.tiny import NAMES, build_checkpoint
from envoys.tiny.images import ONE_IMAGE_A_PROMPT, chat_prompt, image_prompts, noise_image

#: (model class, processor class, tokenizer class) each checkpoint loads as.
CLASSES = {
    "llava-siglip": ("LlavaForConditionalGeneration", "LlavaProcessor", "TokenizersBackend"),
    "llava-clip": ("LlavaForConditionalGeneration", "LlavaProcessor", "TokenizersBackend"),
    "vipllava": ("VipLlavaForConditionalGeneration", "LlavaProcessor", "TokenizersBackend"),
    "qwen2_vl": ("Qwen2VLForConditionalGeneration", "Qwen2VLProcessor", "TokenizersBackend"),
    "qwen2_5_vl": ("Qwen2_5_VLForConditionalGeneration", "Qwen2_5_VLProcessor", "TokenizersBackend"),
    "qwen3_vl": ("Qwen3VLForConditionalGeneration", "Qwen3VLProcessor", "TokenizersBackend"),
    "qwen3_vl_moe": ("Qwen3VLMoeForConditionalGeneration", "Qwen3VLProcessor", "TokenizersBackend"),
    "cohere_compass": ("CohereCompassForConditionalGeneration", "CohereCompassProcessor", "TokenizersBackend"),
    "muse_glimmer": ("MuseGlimmerForConditionalGeneration", "MuseGlimmerProcessor", "TokenizersBackend"),
    "qwen3_5": ("Qwen3_5ForConditionalGeneration", "Qwen3VLProcessor", "Qwen3_5Tokenizer"),
    "cosmos3_omni": ("Cosmos3OmniForConditionalGeneration", "Qwen3VLProcessor", "TokenizersBackend"),
    "qwen2_5_omni_thinker": ("Qwen2_5OmniThinkerForConditionalGeneration", "Qwen2_5OmniProcessor", "TokenizersBackend"),
    "qwen3_omni_moe_thinker": (
        "Qwen3OmniMoeThinkerForConditionalGeneration", "Qwen3OmniMoeProcessor", "TokenizersBackend"),
    "hyperclovax_vision_v2": (
        "HyperCLOVAXVisionV2ForConditionalGeneration", "HyperCLOVAXVisionV2Processor", "GPT2Tokenizer"),
    "qwen3_5_moe": ("Qwen3_5MoeForConditionalGeneration", "Qwen3VLProcessor", "Qwen3_5Tokenizer"),
    "mistral3": ("Mistral3ForConditionalGeneration", "PixtralProcessor", "TokenizersBackend"),
    "llava-pixtral": ("LlavaForConditionalGeneration", "PixtralProcessor", "TokenizersBackend"),
    "lighton_ocr": ("LightOnOcrForConditionalGeneration", "LightOnOcrProcessor", "TokenizersBackend"),
    "mistral_large4": ("MistralLarge4ForConditionalGeneration", "PixtralProcessor", "TokenizersBackend"),
    "kimi_k25": ("Kimi_K25ForConditionalGeneration", "Kimi_K25Processor", "TokenizersBackend"),
    "dots3_note": ("Dots3NoteForConditionalGeneration", "Dots3NoteProcessor", "TokenizersBackend"),
    "hunyuan_vl": ("HunYuanVLForConditionalGeneration", "HunYuanVLProcessor", "TokenizersBackend"),
    "llava_next": ("LlavaNextForConditionalGeneration", "LlavaNextProcessor", "TokenizersBackend"),
    "llava_onevision": ("LlavaOnevisionForConditionalGeneration", "LlavaOnevisionProcessor", "TokenizersBackend"),
    "video_llava": ("VideoLlavaForConditionalGeneration", "VideoLlavaProcessor", "TokenizersBackend"),
    "llava_next_video": ("LlavaNextVideoForConditionalGeneration", "LlavaNextVideoProcessor", "TokenizersBackend"),
    "aya_vision": ("AyaVisionForConditionalGeneration", "AyaVisionProcessor", "TokenizersBackend"),
    "cohere2_vision": ("Cohere2VisionForConditionalGeneration", "Cohere2VisionProcessor", "TokenizersBackend"),
    "internvl": ("InternVLForConditionalGeneration", "InternVLProcessor", "TokenizersBackend"),
    "ovis2": ("Ovis2ForConditionalGeneration", "Ovis2Processor", "TokenizersBackend"),
    "qianfan_ocr": ("QianfanOCRForConditionalGeneration", "QianfanOCRProcessor", "TokenizersBackend"),
    "gemma3": ("Gemma3ForConditionalGeneration", "Gemma3Processor", "TokenizersBackend"),
    "idefics2": ("Idefics2ForConditionalGeneration", "Idefics2Processor", "TokenizersBackend"),
    "aria": ("AriaForConditionalGeneration", "AriaProcessor", "TokenizersBackend"),
    "idefics3": ("Idefics3ForConditionalGeneration", "Idefics3Processor", "TokenizersBackend"),
    "smolvlm": ("SmolVLMForConditionalGeneration", "SmolVLMProcessor", "TokenizersBackend"),
    "granite_docling": ("GraniteDoclingForConditionalGeneration", "GraniteDoclingProcessor", "TokenizersBackend"),
    "llama4": ("Llama4ForConditionalGeneration", "Llama4Processor", "TokenizersBackend"),
    "nemotron_h_omni": ("NemotronH_Omni_Reasoning_V3", "NemotronH_Omni_Reasoning_V3Processor", "TokenizersBackend"),
    "gemma4": ("Gemma4ForConditionalGeneration", "Gemma4Processor", "TokenizersBackend"),
    "gemma4_unified": ("Gemma4UnifiedForConditionalGeneration", "Gemma4UnifiedProcessor", "TokenizersBackend"),
    "lfm2_vl": ("Lfm2VlForConditionalGeneration", "Lfm2VlProcessor", "TokenizersBackend"),
    "lfm3_vl": ("Lfm3VlForConditionalGeneration", "Lfm3VlProcessor", "TokenizersBackend"),
    "paligemma": ("PaliGemmaForConditionalGeneration", "PaliGemmaProcessor", "TokenizersBackend"),
    "paligemma-2": ("PaliGemmaForConditionalGeneration", "PaliGemmaProcessor", "TokenizersBackend"),
    "got_ocr2": ("GotOcr2ForConditionalGeneration", "GotOcr2Processor", "TokenizersBackend"),
    "pp_chart2table": ("GotOcr2ForConditionalGeneration", "PPChart2TableProcessor", "TokenizersBackend"),
    "deepseek_vl": ("DeepseekVLForConditionalGeneration", "DeepseekVLProcessor", "TokenizersBackend"),
    "deepseek_vl_hybrid": ("DeepseekVLHybridForConditionalGeneration", "DeepseekVLHybridProcessor", "TokenizersBackend"),
    "janus": ("JanusForConditionalGeneration", "JanusProcessor", "TokenizersBackend"),
    "glm4v": ("Glm4vForConditionalGeneration", "Glm4vProcessor", "TokenizersBackend"),
    "glm46v": ("Glm46VForConditionalGeneration", "Glm46VProcessor", "TokenizersBackend"),
    "glmga": ("Glm46VForConditionalGeneration", "Glm46VProcessor", "TokenizersBackend"),
    "glm_ocr": ("GlmOcrForConditionalGeneration", "Glm46VProcessor", "TokenizersBackend"),
    "blip-2": ("Blip2ForConditionalGeneration", "Blip2Processor", "TokenizersBackend"),
    "instructblip": ("InstructBlipForConditionalGeneration", "InstructBlipProcessor", "TokenizersBackend"),
    "glm4v_moe": ("Glm4vMoeForConditionalGeneration", "Glm4vProcessor", "TokenizersBackend"),
    "paddleocr_vl": ("PaddleOCRVLForConditionalGeneration", "PaddleOCRVLProcessor", "TokenizersBackend"),
    "video_llama_3": ("VideoLlama3ForConditionalGeneration", "VideoLlama3Processor", "TokenizersBackend"),
    "exaone4_5": ("Exaone4_5_ForConditionalGeneration", "Exaone4_5_Processor", "TokenizersBackend"),
    "llava_onevision1_5": ("LlavaOnevision15ForConditionalGeneration", "Exaone4_5_Processor", "TokenizersBackend"),
    "ovis2_5": ("Ovis2_5ForConditionalGeneration", "Ovis2_5Processor", "TokenizersBackend"),
    "minicpmv4_6": ("MiniCPMV4_6ForConditionalGeneration", "MiniCPMV4_6Processor", "TokenizersBackend"),
    "minicpmv4_7": ("MiniCPMV4_7ForConditionalGeneration", "MiniCPMV4_7Processor", "TokenizersBackend"),
    "minicpm_ocr": ("MiniCPMOcrForConditionalGeneration", "MiniCPMOcrProcessor", "TokenizersBackend"),
    "ernie4_5_vl_moe": ("Ernie4_5_VLMoeForConditionalGeneration", "Ernie4_5_VLMoeProcessor", "TokenizersBackend"),
}

#: Image tokens for a 32x32 image and a 48 (high) x 64 (wide) one, as documented in the builders.
IMAGE_TOKENS = {
    "llava-siglip": (16, 16),
    "llava-clip": (16, 16),
    "vipllava": (16, 16),  # llava-clip's tower and processor
    "qwen2_vl": (4, 12),
    "qwen2_5_vl": (16, 48),
    "qwen3_vl": (4, 12),
    "qwen3_vl_moe": (4, 12),  # qwen3_vl's tower and processor
    "cohere_compass": (4, 12),  # qwen3_vl's tower, Qwen2-VL's image processor
    "muse_glimmer": (4, 12),  # 16 px cells: 2x2 and 3 high x 4 wide
    "qwen3_5": (4, 12),
    "cosmos3_omni": (4, 12),  # qwen3_vl's tower and processor
    "qwen2_5_omni_thinker": (16, 48),  # qwen2_5_vl's tower and image processor
    "qwen3_omni_moe_thinker": (4, 12),  # qwen3_vl's tower, Qwen2-VL's image processor
    "hyperclovax_vision_v2": (16, 48),  # qwen2_5_vl's tower and image processor
    "qwen3_5_moe": (4, 12),  # qwen3_5's tower and processor
    "mistral3": (16, 48),
    "llava-pixtral": (16, 48),  # no merge: one token per 8 px patch, 4x4 and 6x8
    "lighton_ocr": (16, 48),  # mistral3's sizes: 2x2 merge of 4 px patches, 4x4 and 6x8
    "mistral_large4": (16, 48),  # mistral3's tower and processor
    "kimi_k25": (16, 48),
    "dots3_note": (4, 12),  # 8 px patches merged 2x2: 4x4 patches, 6x8
    "hunyuan_vl": (22, 56),  # h/2 x (w/2 + 1) + 2: the merged grid, a newline column, begin and end rows
    "llava_next": (36, 70),  # base tile 16 + unpadded grid rows and their newline rows: 4x4 + 4, 6x8 + 6
    "llava_onevision": (36, 70),  # base tile 16 + unpadded grid rows and their newline rows: 4x4 + 4, 6x8 + 6
    "video_llava": (16, 16),  # llava-clip's tower and processor sizes
    "llava_next_video": (36, 70),  # llava_next's tiles: base tile 16 + 4x4 + 4, 16 + 6x8 + 6
    "aya_vision": (16, 80),  # 16 tokens a tile: 1 tile; 2x2 tiles + the thumbnail
    "cohere2_vision": (16, 80),
    "internvl": (16, 80),  # 16 tokens a tile: 1 tile; 2x2 tiles + the thumbnail
    "ovis2": (16, 80),  # 16 tokens a tile: 1 tile; the thumbnail + 2x2 tiles
    "qianfan_ocr": (16, 80),  # InternVL's tiles
    "gemma3": (16, 16),
    "idefics2": (4, 4),  # the perceiver's 4 latents an image, whatever its size
    "aria": (4, 4),  # the projector's 4 queries for a 49-patch image
    "idefics3": (20, 20),  # 2 x 2 tiles + the global image, 4 tokens each
    "smolvlm": (20, 20),
    "granite_docling": (4, 20),  # 4 tokens a tile: 1 tile (no thumbnail); 2x2 tiles + the thumbnail
    "llama4": (4, 20),  # 32 px tiles of 4 tokens: 32x32 is 1 tile; 48x64 is padded to 2x2 tiles plus a global one
    "nemotron_h_omni": (4, 12),
    "gemma4": (64, 63),
    "gemma4_unified": (64, 63),  # one token per real merged patch: 8x8 and 7x9
    "lfm2_vl": (16, 79),  # 4x4 blocks of one row; 2x2 tiles of 16 + a 5x3 thumbnail
    "lfm3_vl": (4, 12),  # 2x2 merge blocks of 8 px patches: 4x4 and 6x8 patches
    "paligemma": (16, 16),  # llava-siglip's tower: one token per patch
    "paligemma-2": (16, 16),
    "got_ocr2": (256, 256),  # every image resized to 128x128: a 64x64 grid of patches folded 4x4 by the projector
    "pp_chart2table": (64, 64),  # 64x64: a 32x32 grid folded to 8x8, the tokens written whole by the chat template
    "deepseek_vl": (16, 16),  # every image resized and padded to 32x32: 4x4 patches of 8 px
    "deepseek_vl_hybrid": (16, 16),  # the low-res side's: as deepseek_vl
    "janus": (16, 16),  # every image resized and padded to 32x32: 4x4 patches of 8 px
    "glm4v": (4, 12),  # 8 px patches merged 2x2: 4x4 patches, 6x8
    "glm46v": (4, 12),
    "glmga": (4, 12),
    "glm_ocr": (4, 12),
    "blip-2": (4, 4),  # the Q-Former's 4 queries an image, one image a prompt
    "instructblip": (4, 4),
    "glm4v_moe": (4, 12),  # glm4v's tower and processor
    "paddleocr_vl": (4, 12),  # 8 px patches folded 2x2 by the projector: 4x4 patches, 6x8
    "video_llama_3": (16, 48),  # 8 px patches, images at merge_size 1: one token a patch
    "exaone4_5": (16, 48),  # qwen2_5_vl's tower sizes: 4 px patches merged 2x2, 8x8 and 12x16 patches
    "llava_onevision1_5": (4, 12),  # 8 px patches merged 2x2: 4x4 and 6x8 patches
    "ovis2_5": (4, 12),  # 8 px patches merged 2x2: 4x4 and 6x8 patches
    "minicpmv4_6": (4, 20),  # 16x: 4 tokens a 32x32 unit; the 48x64 image is a source and 2x2 slices, 5 units
    "minicpmv4_7": (4, 20),
    "minicpm_ocr": (16, 60),  # 4x: 16 tokens a 32x32 unit; a 24x32 source and 2x2 slices of 24x32, 12 tokens each
    "ernie4_5_vl_moe": (4, 12),  # 8 px patches folded 2x2 by the resampler: 4x4 patches, 6x8
}

#: The processor attribute naming the prompt's image placeholder, where it is not ``image_token``. (Gemma 3's is
#: its begin-of-image token, which some releases also call image_token and older ones do not. Qianfan-OCR's prompt
#: writes <image>, which its processor expands into the image tokens.)
PLACEHOLDERS = {"gemma3": "boi_token", "qianfan_ocr": "image_placeholder_token"}
#: The placeholder token itself, where the processor names none: PP-Chart2Table's expands nothing, and its template
#: writes each image's tokens whole after one <img>.
PLACEHOLDER_TOKENS = {"pp_chart2table": "<img>"}

#: Where the config's image token is not the processor's image_token: the token the features go to.
#: (Llama 4's prompt marks each image with one <|image|>, and the features go to its <|patch|> tokens; InternVL's
#: and Qianfan-OCR's tokenizers name their image token context_image_token, as their processors read it.)
FEATURE_TOKENS = {"llama4": "<|patch|>", "internvl": "<IMG_CONTEXT>", "qianfan_ocr": "<IMG_CONTEXT>"}
#: (BLIP-2's and InstructBLIP's tokenizers name no image token, as on the hub: their processors add <image>.)
FEATURE_TOKENS.update({"blip-2": "<image>", "instructblip": "<image>"})
#: (Ovis2's tokenizer's image token is the prompt's placeholder, <image>; the processor writes <IMG_ATOM> for it.)
FEATURE_TOKENS.update({"ovis2": "<IMG_ATOM>"})

#: Tokens whose embeddings the host replaces beside the image tokens' (Ovis2's indicator tokens, each by a row of its
#: visual embedding table), so the forward changes their rows too.
ALSO_WRITTEN = {"ovis2": ("<IMG_START>", "<IMG_GRID>", "<IMG_COL>", "<IMG_ROW>", "<IMG_END>")}
#: (Ovis2.5's helper writes its indicator words' rows at each image's start and end tokens.)
ALSO_WRITTEN.update({"ovis2_5": ("<|image_start|>", "<|image_end|>")})

#: Checkpoints whose plain transformers forward fails on every call while their family's known bug is present
#: (`envoys.core.bugs`), and where that is covered instead.
FORWARD_FAILS = {
    "llama4": "Llama4ForConditionalGeneration.forward raises AttributeError on its last line on this transformers; "
    "the scatter is checked in tests/test_llama4.py::test_the_plain_forward_scatters_one_feature_per_patch_token",
}


def forward_fails(name: str, model: Any) -> str | None:
    """Why ``name``'s plain forward cannot run on the installed transformers, or None: its family's known bug is
    present, or transformers loaded ``model`` in a state its forward cannot run (the family's load bug)."""
    from envoys.families import family_for

    family = family_for(model.config.model_type)
    broken = family.quirks.load_bug(model)
    if broken is not None:
        return broken
    bug = family.quirks.forward_bug
    return FORWARD_FAILS[name] if name in FORWARD_FAILS and bug is not None and bug.present() else None

TEXT = "Describe the image."


def _images(n: int) -> list[Any]:
    """1 image: 32x32; 2 images: 32x32 then 48 high x 64 wide."""
    return [noise_image(32, 32, seed=0), noise_image(64, 48, seed=1)][:n]


@pytest.fixture(scope="module")
def loaded(tiny_checkpoint: Callable[..., Path]) -> Callable[[str], tuple[Any, Any]]:
    """``loaded(name)``: (model, processor) loaded from the saved checkpoint, once per module."""
    cache: dict[str, tuple[Any, Any]] = {}

    def get(name: str) -> tuple[Any, Any]:
        if name not in cache:
            path = tiny_checkpoint(name)
            processor = transformers.AutoProcessor.from_pretrained(path)
            model = transformers.AutoModelForImageTextToText.from_pretrained(path, attn_implementation="eager")
            cache[name] = (model.eval(), processor)
        return cache[name]

    return get


def test_names() -> None:
    # every builder is gathered (but those of models the installed release lacks), and every one is checked below
    assert set(NAMES) == {name for name in CLASSES if absent(name.partition("-")[0]) is None}
    assert {name for name in ("llava-siglip", "llava-clip", "qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5")
            if absent(name.partition("-")[0]) is None} <= set(NAMES)


def test_unknown_name(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown tiny checkpoint 'no-such-model'; known names: .*llava-siglip"):
        build_checkpoint("no-such-model", tmp_path)


@pytest.mark.parametrize("name", NAMES)
def test_loads_with_auto_classes(name: str, loaded: Callable[[str], tuple[Any, Any]]) -> None:
    model, processor = loaded(name)
    model_class, processor_class, tokenizer_class = CLASSES[name]
    assert type(model).__name__ == model_class
    assert type(processor).__name__ == processor_class
    if tokenizer_class == "TokenizersBackend" and not hasattr(transformers, "TokenizersBackend"):
        # 4.x has no TokenizersBackend: the generic fast tokenizer, or the family's own where its processor wants it
        assert isinstance(processor.tokenizer, transformers.PreTrainedTokenizerFast)
    else:
        assert type(processor.tokenizer).__name__ == tokenizer_class
    assert model.dtype == torch.float32
    assert model.config._attn_implementation == "eager"
    assert model.config.get_text_config().vocab_size >= len(processor.tokenizer)
    # The token at the image positions: the tokenizer's image token, or the family's feature token. (The
    # processor's own image_token_id is the prompt's placeholder, which on Gemma 3 is the begin-of-image token.)
    feature_token = FEATURE_TOKENS.get(name)
    expected = processor.tokenizer.convert_tokens_to_ids(feature_token) if feature_token else processor.tokenizer.image_token_id
    assert expected == model.config.image_token_id


def _reads_a_saved_attn_implementation() -> bool:
    """Whether the installed transformers takes ``attn_implementation`` from a saved config (older releases,
    4.57.6 to 5.2.0, overwrite it with the loading call's argument, None when not given)."""
    return transformers.PretrainedConfig.from_dict({"attn_implementation": "eager"})._attn_implementation == "eager"


@pytest.mark.parametrize("name", NAMES)
def test_saved_config_defaults_to_eager(name: str, tiny_checkpoint: Callable[..., Path]) -> None:
    saved = json.loads((tiny_checkpoint(name) / "config.json").read_text())
    assert saved["attn_implementation"] == "eager"
    if not _reads_a_saved_attn_implementation():
        pytest.skip(f"transformers {transformers.__version__} ignores a saved attn_implementation when loading; "
                    "a load there passes attn_implementation='eager'")
    model = transformers.AutoModelForImageTextToText.from_pretrained(tiny_checkpoint(name))
    implementations = {
        sub.config._attn_implementation for sub in model.modules() if isinstance(sub, transformers.PreTrainedModel)
    }
    assert implementations == {"eager"}


def _host(model: Any) -> Any:
    """The module whose forward scatters: the inner model, or the root where it scatters itself (Nemotron-H Omni)."""
    return getattr(model, "model", model)


def _scattered_rows(model: Any, inputs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the forward; return (rows of the text model's input that differ from the token
    embeddings of input_ids, those rows), i.e. where and what the model scattered."""
    seen: dict[str, torch.Tensor] = {}

    def grab(_module: Any, _args: Any, kwargs: dict[str, Any]) -> None:
        seen["embeds"] = kwargs["inputs_embeds"].detach().clone()

    decoder = model.get_decoder()
    decoder = getattr(decoder, "text_model", decoder)  # 4.x's get_decoder gives Idefics 3's whole inner model
    handle = decoder.register_forward_pre_hook(grab, with_kwargs=True)
    try:
        with torch.no_grad():
            out = model(**inputs)
    finally:
        handle.remove()
    assert out.logits.shape[:2] == inputs["input_ids"].shape
    assert torch.isfinite(out.logits).all()
    with torch.no_grad():
        plain = model.get_input_embeddings()(inputs["input_ids"])
    changed = (seen["embeds"] != plain).any(dim=-1)
    return changed, seen["embeds"][changed]


def _image_features(model: Any, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """The projected image features, all images concatenated in order."""
    # Video-LLaVA's image processor names the pixels pixel_values_images (its get_image_features takes either name);
    # the padded pixels' masks: pixel_attention_mask (LFM2-VL, Idefics 2), pixel_mask (Aria); DeepSeek-VL-Hybrid's
    # high-res tower's pixels: high_res_pixel_values; VideoLLaMA 3's per-image merge sizes: image_merge_sizes
    kwargs = {k: inputs[k] for k in ("pixel_values", "pixel_values_images", "image_grid_thw", "image_sizes",
                                     "image_grid_hw", "image_position_ids", "spatial_shapes", "pixel_attention_mask",
                                     "pixel_mask", "high_res_pixel_values", "qformer_input_ids", "qformer_attention_mask",
                                     "image_merge_sizes", "target_sizes")
              if k in inputs}
    host = _host(model)
    get_image_features = host.get_image_features
    configs = (model.config, getattr(model.config, "vision_config", None))
    for name, parameter in inspect.signature(get_image_features).parameters.items():
        if parameter.default is inspect.Parameter.empty and name not in kwargs:
            # some releases require what the forward reads off the config (Llama 4's select strategy, before 5.18)
            found = [getattr(c, name) for c in configs if hasattr(c, name)]
            if found:
                kwargs[name] = found[0]
    with torch.no_grad():
        features = get_image_features(**kwargs)
        # an output with pooler_output on recent releases; a tensor, or a tuple or list of tensors, on older ones
        pooled = getattr(features, "pooler_output", features)
        if "self.multi_modal_projector(vision_flat)" in inspect.getsource(type(host).forward):
            # Llama 4 before 5.18: get_image_features gives the tower's output, which the forward projects itself
            tower = getattr(features, "last_hidden_state", features)
            pooled = host.multi_modal_projector(tower.reshape(-1, tower.shape[-1]))
    features = pooled
    if isinstance(features, tuple) and features and isinstance(features[0], (tuple, list)):
        features = features[0]  # Qwen3-VL on 4.x: (each image's features, the DeepStack features)
    features = [features] if isinstance(features, torch.Tensor) else features
    return torch.cat([f.reshape(-1, f.shape[-1]) for f in features])


@pytest.mark.parametrize("n_images", [1, 2])
@pytest.mark.parametrize("name", NAMES)
def test_forward_scatters_one_feature_per_image_token(
    name: str, n_images: int, loaded: Callable[[str], tuple[Any, Any]]
) -> None:
    model, processor = loaded(name)
    if reason := forward_fails(name, model):
        pytest.skip(reason)
    prompt = image_prompts(processor, n_images, TEXT)  # one prompt an image where the processor takes one a prompt
    # floating-point inputs in the model's dtype, as transformers' pipeline casts them (Llama 4's pixels are bfloat16)
    inputs = processor(images=_images(n_images), text=prompt, return_tensors="pt").to(model.dtype)

    image_positions = inputs["input_ids"] == model.config.image_token_id
    assert int(image_positions.sum()) == sum(IMAGE_TOKENS[name][:n_images])

    features = _image_features(model, inputs)
    assert features.shape[0] == int(image_positions.sum())

    changed, rows = _scattered_rows(model, inputs)
    also = torch.tensor(processor.tokenizer.convert_tokens_to_ids(list(ALSO_WRITTEN.get(name, ()))), dtype=torch.long)
    assert torch.equal(changed, image_positions | torch.isin(inputs["input_ids"], also))
    torch.testing.assert_close(rows[image_positions[changed]], features)


@pytest.mark.parametrize("name", NAMES)
def test_same_seed_same_weights(name: str, tiny_checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    first = load_file(tiny_checkpoint(name) / "model.safetensors")
    again = load_file(build_checkpoint(name, tmp_path / "again", seed=0) / "model.safetensors")
    other = load_file(build_checkpoint(name, tmp_path / "other", seed=1) / "model.safetensors")
    assert first.keys() == again.keys() == other.keys()
    assert all(torch.equal(first[k], again[k]) for k in first)
    assert not all(torch.equal(first[k], other[k]) for k in first)
    # every float is float32; an index buffer stays an integer (RADIO's summary_idxs)
    assert all(t.dtype == torch.float32 for t in first.values() if t.is_floating_point())


def test_noise_image_is_deterministic_noise() -> None:
    image = noise_image(48, 32, seed=3)
    assert image.mode == "RGB" and image.size == (48, 32)
    pixels = np.asarray(image)
    assert np.array_equal(pixels, np.asarray(noise_image(48, 32, seed=3)))
    assert not np.array_equal(pixels, np.asarray(noise_image(48, 32, seed=4)))
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 100


@pytest.mark.parametrize("name", NAMES)
def test_chat_prompt_has_one_placeholder_per_image(name: str, loaded: Callable[[str], tuple[Any, Any]]) -> None:
    _, processor = loaded(name)
    if type(processor).__name__ in ONE_IMAGE_A_PROMPT:  # no placeholder: the processor writes the tokens, once a prompt
        for n in (1, 2, 3):
            prompts = image_prompts(processor, n, TEXT)
            assert len(prompts) == n and all(TEXT in p and "<image>" not in p for p in prompts)
        ids = processor(text=prompts[:1], images=_images(1))["input_ids"][0]
        assert ids[: processor.num_query_tokens] == [processor.tokenizer.convert_tokens_to_ids("<image>")] * processor.num_query_tokens
        return
    placeholder = PLACEHOLDER_TOKENS.get(name) or getattr(processor, PLACEHOLDERS.get(name, "image_token"))
    for n in (1, 2, 3):
        prompt = chat_prompt(processor, n, TEXT)
        assert prompt.count(placeholder) == n
        assert TEXT in prompt


def test_llava_placeholder_count_matches_image_seq_length(loaded: Callable[[str], tuple[Any, Any]]) -> None:
    for name in ("llava-siglip", "llava-clip"):
        model, _ = loaded(name)
        assert IMAGE_TOKENS[name] == (model.config.image_seq_length,) * 2


def test_qwen2_5_vl_has_windowed_and_full_blocks_with_several_windows(
    loaded: Callable[[str], tuple[Any, Any]],
) -> None:
    model, processor = loaded("qwen2_5_vl")
    vision = model.config.vision_config
    assert 0 < len(vision.fullatt_block_indexes) < vision.depth
    for image in _images(2):
        grid = processor.image_processor(images=[image], return_tensors="pt")["image_grid_thw"]
        if get_vision_window_index is None:
            _, cu_windows = model.model.visual.get_window_index(grid)
        else:
            _, cu_windows = get_vision_window_index(
                grid, spatial_merge_size=vision.spatial_merge_size, window_size=vision.window_size,
                patch_size=vision.patch_size,
            )  # fmt: skip
        window_lengths = torch.as_tensor(cu_windows).unique_consecutive().diff()
        assert len(window_lengths) > 1
        assert int(window_lengths.sum()) == int(grid.prod())


def test_qwen3_vl_deepstack_taps_leave_blocks_after_them(loaded: Callable[[str], tuple[Any, Any]]) -> None:
    model, processor = loaded("qwen3_vl")
    vision = model.config.vision_config
    taps = vision.deepstack_visual_indexes
    assert len(taps) == 2 and max(taps) < vision.depth - 1
    assert model.config.text_config.num_hidden_layers > len(taps) + 1
    assert math.isqrt(vision.num_position_embeddings) ** 2 == vision.num_position_embeddings
    inputs = processor(images=_images(2), text=chat_prompt(processor, 2, TEXT), return_tensors="pt")
    with torch.no_grad():
        out = model.model.get_image_features(inputs["pixel_values"], inputs["image_grid_thw"])
    deepstack = out.deepstack_features if hasattr(out, "deepstack_features") else out[1]  # 4.57: (features, taps)
    assert len(deepstack) == len(taps)


@pytest.mark.parametrize("name", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5", "qwen2_5_omni_thinker", "qwen3_omni_moe_thinker"])
def test_qwen_mrope_sections_cover_the_rotary_dims(name: str, loaded: Callable[[str], tuple[Any, Any]]) -> None:
    model, _ = loaded(name)
    text = model.config.text_config
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    rope = getattr(text, "rope_parameters", None) or text.rope_scaling  # transformers 4.x: rope_scaling
    rotary = int(head_dim * rope.get("partial_rotary_factor", 1.0))
    assert sum(rope["mrope_section"]) == rotary // 2


def test_qwen3_5_mixes_layer_types_and_its_tokenizer_round_trips(
    loaded: Callable[[str], tuple[Any, Any]],
) -> None:
    model, processor = loaded("qwen3_5")
    assert set(model.config.text_config.layer_types) == {"linear_attention", "full_attention"}
    tokenizer = processor.tokenizer
    text = chat_prompt(processor, 2, "Compare the two images: zebra, élan, 42?")
    ids = tokenizer(text)["input_ids"]
    assert tokenizer.decode(ids) == text
    tokens = tokenizer.convert_ids_to_tokens(ids)
    assert tokens.count("<|image_pad|>") == 2 and tokens[0] == "<|im_start|>"
    assert "Ġthe" in tokens and "Ġimages" in tokens  # the trained merges survived the rebuild
