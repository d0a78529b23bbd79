"""The tiny checkpoints load as their families' users load them, and run."""

from __future__ import annotations

import importlib
import inspect
import json
import math
import pkgutil
import re
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

from envoys import testing
from envoys.families import family_for
from envoys.testing import CONTRACTS, NAMES, build_checkpoint
from envoys.testing.images import ONE_IMAGE_A_PROMPT, chat_prompt, image_prompts, noise_image


def forward_fails(model: Any) -> str | None:
    """Why the model's plain forward cannot run on the installed transformers, or None: its family's known bug is
    present (its own tests check the scatter through the library's forward, which works around it), or transformers
    loaded ``model`` in a state its forward cannot run (the family's load bug)."""
    family = family_for(model.config.model_type)
    broken = family.quirks.load_bug(model)
    if broken is not None:
        return broken
    bug = family.quirks.forward_bug
    return f"{family.model_type}'s plain forward fails: {bug.reason()}" if bug is not None and bug.present() else None


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
    """Every builder of every builder module is gathered, but those of models the installed release lacks."""
    modules = [info.name for info in pkgutil.iter_modules(testing.__path__) if info.name not in testing.ABSENT]
    declared = {name for module in modules for name in getattr(importlib.import_module(f"envoys.testing.{module}"), "BUILDERS", {})}
    assert set(NAMES) == {name for name in declared if absent(name.partition("-")[0]) is None}
    assert set(CONTRACTS) == set(NAMES)


def test_unknown_name(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=f"unknown tiny checkpoint 'no-such-model'; known names: {re.escape(NAMES[0])}, "):
        build_checkpoint("no-such-model", tmp_path)


@pytest.mark.parametrize("name", NAMES)
def test_loads_with_auto_classes(name: str, loaded: Callable[[str], tuple[Any, Any]]) -> None:
    model, processor = loaded(name)
    model_class, processor_class, tokenizer_class = CONTRACTS[name].loads.classes
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
    feature_token = CONTRACTS[name].loads.feature_token
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
    # high-res tower's pixels: high_res_pixel_values; VideoLLaMA 3's per-image merge sizes: image_merge_sizes; a second
    # run's local crops and how many each image has (Step-3.7's), and their grid (Unlimited-OCR's): pixel_values_local,
    # num_local_patches, patches_grid; the patches
    # each image token pools and each image's token grids (Molmo 2's): image_token_pooling, image_grids
    kwargs = {k: inputs[k] for k in ("pixel_values", "pixel_values_images", "image_grid_thw", "image_sizes",
                                     "image_grid_hw", "image_position_ids", "spatial_shapes", "pixel_attention_mask",
                                     "pixel_mask", "high_res_pixel_values", "qformer_input_ids", "qformer_attention_mask",
                                     "image_merge_sizes", "target_sizes", "pixel_values_local", "num_local_patches",
                                     "patches_grid", "image_token_pooling", "image_grids")
              if k in inputs}
    host = _host(model)
    get_image_features = host.get_image_features
    # each image's crops, where the host moves each image's pooling indices past the earlier images' (Molmo 2, 5.25 on)
    kwargs.update({key: inputs[key] for key in ("image_num_crops",)
                   if key in inputs and key in inspect.signature(get_image_features).parameters})
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
    if reason := forward_fails(model):
        pytest.skip(reason)
    prompt = image_prompts(processor, n_images, TEXT)  # one prompt an image where the processor takes one a prompt
    # floating-point inputs in the model's dtype, as transformers' pipeline casts them (Llama 4's pixels are bfloat16)
    row = CONTRACTS[name]
    if row.cross_layers:
        pytest.skip("the image enters through cross-attention: no token holds a feature (the contract suite checks "
                    "that every cross-attention layer reads image_features)")
    inputs = processor(images=row.images[:n_images], text=prompt, return_tensors="pt").to(model.dtype)

    image_positions = inputs["input_ids"] == model.config.image_token_id
    assert int(image_positions.sum()) == sum(row.image_tokens[:n_images])

    features = _image_features(model, inputs)
    assert features.shape[0] == int(image_positions.sum())

    if row.adds_to_embeddings:  # the host adds the features to the image tokens' own embeddings (Molmo 2's)
        with torch.no_grad():
            features = features + model.get_input_embeddings()(inputs["input_ids"])[image_positions]

    changed, rows = _scattered_rows(model, inputs)
    also = torch.tensor(processor.tokenizer.convert_tokens_to_ids(list(row.loads.also_written)), dtype=torch.long)
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
    loads = CONTRACTS[name].loads
    placeholder = loads.placeholder_token or getattr(processor, loads.placeholder or "image_token")
    for n in (1, 2, 3):
        prompt = chat_prompt(processor, n, TEXT)
        assert prompt.count(placeholder) == n
        assert TEXT in prompt


def test_llava_placeholder_count_matches_image_seq_length(loaded: Callable[[str], tuple[Any, Any]]) -> None:
    for name in ("llava-siglip", "llava-clip"):
        model, _ = loaded(name)
        assert CONTRACTS[name].image_tokens == (model.config.image_seq_length,) * 2


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


def test_mrope_sections_cover_the_rotary_dims(tiny_checkpoint: Callable[..., Path]) -> None:
    """Where a checkpoint's text model rotates by M-RoPE sections (the Qwen-VL kin's and others'), the sections
    cover its rotary half-width exactly."""
    sectioned = []
    for name in NAMES:
        text = transformers.AutoConfig.from_pretrained(tiny_checkpoint(name)).get_text_config()
        rope = getattr(text, "rope_parameters", None) or getattr(text, "rope_scaling", None) or {}  # 4.x: rope_scaling
        if "mrope_section" not in rope:
            continue
        head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
        rotary = int(head_dim * rope.get("partial_rotary_factor", getattr(text, "partial_rotary_factor", 1.0)))
        assert sum(rope["mrope_section"]) == rotary // 2, name
        sectioned.append(name)
    assert sectioned, "no checkpoint rotates by M-RoPE sections: the check checked nothing"
