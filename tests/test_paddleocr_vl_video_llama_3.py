"""StandardizedTransformer on tiny PaddleOCR-VL and VideoLLaMA 3 checkpoints: what is particular to their packed
SigLIP-shaped towers, exact.

Every expected number comes from outside the code under test: the stock
processor's ``image_grid_thw``, the modules' own weights and attributes, or a
recomputation from other values read in the same trace. The spec's contracts
(the scatter and the mask, the packed stream and every block's identity, the
pattern's per-image reason, ablation, sizes, support, the text-only load,
generation, outputs against the plain model) run on both checkpoints in
test_vision_contracts.py; this file holds the names, the per-image attention,
what the first block receives, and what each host does between
``tower_output`` and ``image_features`` (PaddleOCR-VL's projector folding 2x2
raster blocks, VideoLLaMA 3's resampling of each image's grid).
"""

from __future__ import annotations

import importlib

import pytest
import torch
from family_inputs import attends_per_image, grid, prompt

from envoys import StandardizedTransformer
from envoys.testing import noise_image

FAMILIES = ["paddleocr_vl", "video_llama_3"]
ONE = [noise_image(32, 32, seed=0)]
TWO = [noise_image(32, 32, seed=0), noise_image(64, 48, seed=1)]  # 64 wide, 48 high: a 6x8 patch grid


@pytest.fixture(scope="module")
def load(tiny_checkpoint):
    """Each family's model, loaded once for this module (eager, float32, with its processor)."""
    loaded: dict[str, StandardizedTransformer] = {}

    def get(name: str) -> StandardizedTransformer:
        if name not in loaded:
            loaded[name] = StandardizedTransformer(
                tiny_checkpoint(name), task="image-text-to-text", device="cpu", attn_implementation="eager"
            )
        return loaded[name]

    return get


@pytest.fixture(scope="module", params=FAMILIES)
def model(request, load):
    return load(request.param)


def tower_of(model):
    """The native module holding the tower's embeddings, blocks and final norm."""
    inner = model._module.model
    return inner.visual.vision_model if model.family.model_type == "paddleocr_vl" else inner.vision_model


# -- the per-image attention -----------------------------------------------------------------------


def test_queries_keys_and_values_are_what_each_image_attends_with(model):
    """The last block attends per image: each kernel call is eager attention over its image's slice, at
    ``cu_seqlens``, of the whole queries, keys and values, and the calls joined are attention_head_outputs."""
    assert attends_per_image(model, TWO) == [16, 48]


def test_queries_and_keys_are_after_the_rotary_embedding(model):
    """The served queries and keys are the projections rotated by the tower's 2D rotary embedding."""
    attention = model.vision.layers[0].self_attn
    rotate = importlib.import_module(type(attention._module).__module__).apply_rotary_pos_emb_vision
    with model.trace(prompt(model, TWO), images=TWO):
        cos, sin = attention.inputs[1]["position_embeddings"]
        cos, sin = cos.save(), sin.save()
        q = attention.q_proj.output.save()
        k = attention.k_proj.output.save()
        queries = attention.attention_queries.save()
        keys = attention.attention_keys.save()
    heads, width = attention._module.num_heads, attention._module.head_dim
    rotated_q, rotated_k = rotate(q.view(-1, heads, width), k.view(-1, heads, width), cos, sin)
    assert torch.equal(queries, rotated_q.transpose(0, 1).unsqueeze(0))
    assert torch.equal(keys, rotated_k.transpose(0, 1).unsqueeze(0))
    assert not torch.equal(queries, q.view(-1, heads, width).transpose(0, 1).unsqueeze(0))


def test_the_pattern_asks_for_eager_under_sdpa(tiny_checkpoint):
    model = StandardizedTransformer(tiny_checkpoint("paddleocr_vl"), task="image-text-to-text",
                                    attn_implementation="sdpa")
    rows = model.vision.support(layer=0)
    assert "runs 'sdpa': load it with attn_implementation='eager'" in rows["self_attn.attention_probabilities"]
    attention = model.vision.layers[0].self_attn
    with model.trace(prompt(model, TWO), images=TWO):
        queries = attention.attention_queries.save()
        heads = attention.attention_head_outputs.save()
    assert heads.shape[1] == queries.shape[2] == 64


# -- the stream's ends -----------------------------------------------------------------------------


def test_patch_embeddings_are_the_convolution_of_each_patch(model):
    """One packed row of the convolution's output, patch after patch as the processor cut them."""
    inputs = model.processor(text=[prompt(model, TWO)], images=TWO, return_tensors="pt")
    convolution = tower_of(model).embeddings.patch_embedding
    pixels = inputs["pixel_values"].reshape(-1, 3, model.vision.patch_size, model.vision.patch_size)
    with model.trace(prompt(model, TWO), images=TWO):
        patches = model.vision.patch_embeddings.save()
    with torch.no_grad():
        expected = convolution(pixels).flatten(1)
    assert patches.shape == (1, 64, model.vision.vision_hidden_size)
    assert torch.equal(patches[0], expected)


def test_what_the_first_block_receives(model):
    """PaddleOCR-VL's tower adds its learned positions, resampled to each image's grid, to the patch embeddings;
    VideoLLaMA 3's adds none (its positions are the attention's rotary embedding)."""
    vision = model.vision
    with model.trace(prompt(model, TWO), images=TWO):
        patches = vision.patch_embeddings.save()
        first = vision.layers[0].layer_input.save()
    if model.family.model_type == "video_llama_3":
        assert torch.equal(first, patches)
    else:
        assert first.shape == patches.shape and not torch.equal(first, patches)


def test_writing_patch_embeddings_reaches_the_first_block(model):
    vision = model.vision
    with model.trace(prompt(model, ONE), images=ONE):
        clean = vision.layers[0].layer_input.save()
    with model.trace(prompt(model, ONE), images=ONE):
        vision.patch_embeddings[:] = 0  # in place, through the [1, patches, width] view
        edited = vision.layers[0].layer_input.save()
    assert not torch.equal(edited, clean)
    if model.family.model_type == "video_llama_3":
        assert torch.equal(edited, torch.zeros_like(edited))


def test_paddleocr_vl_s_projector_folds_each_2x2_raster_block(load):
    """The projector LayerNorms tower_output, then gathers each 2x2 block of each image's raster patch grid into one
    row (the block's four patches side by side) and maps it: one image token per block, in raster order."""
    model = load("paddleocr_vl")
    with model.trace(prompt(model, TWO), images=TWO):
        tower = model.vision.tower_output.save()
        received = model.projector.input.save()
        projected = model.projector.output.save()
        features = model.vision.image_features.save()
    projector = model._module.model.projector  # the loaded one (the first trace loaded the weights)
    assert torch.equal(received, tower[0])
    rows = []
    with torch.no_grad():
        for (_, h, w), part in zip(grid(model, TWO).tolist(), tower[0].split([16, 48])):
            normed = projector.pre_norm(part).view(h // 2, 2, w // 2, 2, -1)
            blocks = normed.permute(0, 2, 1, 3, 4).reshape((h // 2) * (w // 2), -1)
            rows.append(projector.linear_2(projector.act(projector.linear_1(blocks))))
    assert torch.equal(projected, torch.cat(rows)) and torch.equal(projected, features)


def test_video_llama_3_s_tower_resamples_each_image_to_its_merged_grid(load):
    """After its final norm (tower_output) VideoLLaMA 3's tower puts each image's patches in raster order and
    resamples the grid by 1 / merge_size, inside its forward; images run at merge_size 1, so the projector receives
    tower_output as it is, and its output, token by token, is image_features."""
    model = load("video_llama_3")
    inputs = model.processor(text=[prompt(model, TWO)], images=TWO, return_tensors="pt")
    assert inputs["image_merge_sizes"].tolist() == [1, 1]
    with model.trace(prompt(model, TWO), images=TWO):
        last = model.vision.layers[-1].layer_output.save()
        tower = model.vision.tower_output.save()
        received = model.projector.input.save()
        projected = model.projector.output.save()
        features = model.vision.image_features.save()
    with torch.no_grad():
        assert torch.equal(tower[0], tower_of(model).post_layernorm(last[0]))
    assert torch.equal(received, tower[0])
    assert torch.equal(projected, features)


def test_an_edit_of_tower_output_reaches_image_features(model):
    """tower_output is what the host's features are made from: zeroing one image's rows changes only its tokens."""
    with model.trace(prompt(model, TWO), images=TWO):
        clean = model.vision.image_features.save()
    with model.trace(prompt(model, TWO), images=TWO):
        model.vision.tower_output[:, 16:] = 0  # the second image's patches
        edited = model.vision.image_features.save()
    first = 4 if model.family.model_type == "paddleocr_vl" else 16
    assert torch.equal(clean[:first], edited[:first]) and not torch.equal(clean[first:], edited[first:])
