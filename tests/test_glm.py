"""StandardizedTransformer on tiny GLM-4.1V, GLM-4.6V, GLM-GA and GLM-OCR checkpoints: what is particular to the GLM ViT
and GLM-4's text blocks, exact.

Every expected number comes from outside the code under test: the stock
processor's ``image_grid_thw`` and ``merge_size``, the modules' own weights and
attributes, or a recomputation from other values read in the same trace. The
spec's contracts (the scatter and the mask, the packed stream and every block's
identity, the pattern's per-image reason, ablation, sizes, support, the
text-only load, generation, outputs against the plain model) run on the four
checkpoints in test_vision_contracts.py; this file holds the per-image
attention, the merge (a final norm, a convolution over each merge block, then
the merger) and its order, what the first block receives, and the text blocks'
post-norms.
"""

from __future__ import annotations

import pytest
import torch
from family_inputs import attends_per_image, grid, merge_block_reaches_its_token_alone, prompt

from envoys import StandardizedTransformer
from envoys.testing import noise_image

FAMILIES = ["glm4v", "glm46v", "glmga", "glm_ocr"]
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


def patches_per_image(model, images) -> list[int]:
    return [int(t * h * w) for t, h, w in grid(model, images)]


# -- names -----------------------------------------------------------------------------------------


def test_glm46v_and_glmga_run_glm4v_s_tower_and_text_under_glm46v_s_host(load):
    for name in ("glm46v", "glmga"):
        model = load(name)
        assert type(model._module.model).__name__ == "Glm46VModel"
        assert type(model.vision._module).__name__ == "Glm4vVisionModel"
        assert type(model.layers[0]._module).__name__ == "Glm4vTextDecoderLayer"
    assert type(load("glmga").processor.image_processor).__name__ == "GlmgaImageProcessor"


def test_the_tower_mlp_width_is_read_off_the_mlp(model):
    """GLM-4.1V's release builds its tower MLP ``out_hidden_size`` wide, GLM-OCR's ``intermediate_size``."""
    config, mlp = model.vision.vision_config, model._module.model.visual.blocks[0].mlp
    assert model.vision.intermediate_size == mlp.gate_proj.out_features == mlp.down_proj.in_features
    expected = config.intermediate_size if model.family.model_type == "glm_ocr" else config.out_hidden_size
    assert model.vision.intermediate_size == expected


# -- the per-image attention -----------------------------------------------------------------------


def test_queries_keys_and_values_are_what_each_image_attends_with(model):
    """The last block attends per image: each kernel call is eager attention over its image's slice, at
    ``cu_seqlens``, of the whole queries, keys and values, and the calls joined are attention_head_outputs."""
    attends_per_image(model, TWO)


def test_glm_ocr_queries_and_keys_are_after_their_norms_and_rotary(load):
    """GLM-OCR RMS-norms each head's queries and keys before the 2D rotary embedding: the served queries are the
    rotary embedding applied to q_norm's output."""
    from transformers.models.glm_ocr.modeling_glm_ocr import apply_rotary_pos_emb_vision

    model = load("glm_ocr")
    attention = model.vision.layers[0].self_attn
    with model.trace(prompt(model, TWO), images=TWO):
        cos, sin = attention.inputs[1]["position_embeddings"]
        cos, sin = cos.save(), sin.save()
        normed_q = attention.q_norm.output.save()
        normed_k = attention.k_norm.output.save()
        queries = attention.attention_queries.save()
        keys = attention.attention_keys.save()
    rotated_q, rotated_k = apply_rotary_pos_emb_vision(normed_q, normed_k, cos, sin)
    assert torch.equal(queries, rotated_q.transpose(0, 1).unsqueeze(0))
    assert torch.equal(keys, rotated_k.transpose(0, 1).unsqueeze(0))


@pytest.mark.parametrize("name", ["glm4v", "glm_ocr"])
def test_the_pattern_asks_for_eager_under_sdpa_and_flash_takes_the_head_outputs(tiny_checkpoint, name):
    model = StandardizedTransformer(tiny_checkpoint(name), task="image-text-to-text", attn_implementation="sdpa")
    attention = model.vision.layers[0].self_attn
    assert "runs 'sdpa': load it with attn_implementation='eager'" in model.vision.support()["self_attn.attention_probabilities"][0]
    with model.trace(prompt(model, TWO), images=TWO):
        queries = attention.attention_queries.save()
        heads = attention.attention_head_outputs.save()
    assert heads.shape[1] == queries.shape[2] == sum(patches_per_image(model, TWO))
    config = attention._module.config  # this instance's vision config only; put back below
    saved = config._attn_implementation
    try:
        config._attn_implementation = "flash_attention_2"
        rows = model.vision.support(layer=0)
        assert "flash_attention_2" in rows["self_attn.attention_head_outputs"]
        assert "runs 'flash_attention_2': load it with attn_implementation='eager'" in rows[
            "self_attn.attention_probabilities"]
        assert rows["self_attn.attention_queries"] is None
        assert type(attention).attention_queries._location(attention).endswith(".source.attention_interface_1.input")
    finally:
        config._attn_implementation = saved


# -- the stream's ends: what the first block receives, the merge -----------------------------------


def test_what_the_first_block_receives(model):
    """GLM-4.1V's tower norms the patch embeddings (post_conv_layernorm) and adds its resampled learned positions
    (embeddings) before the first block; GLM-OCR's first block receives the patch embeddings as they are."""
    vision = model.vision
    with model.trace(prompt(model, TWO), images=TWO):
        patches = vision.patch_embeddings.save()
        if model.family.model_type != "glm_ocr":
            normed_in = vision.post_conv_layernorm.input.save()
            normed = vision.post_conv_layernorm.output.save()
            positioned = vision.embeddings.output.save()
        first = vision.layers[0].layer_input.save()
    if model.family.model_type == "glm_ocr":
        assert torch.equal(first, patches)
        return
    assert torch.equal(normed_in, patches[0]) and torch.equal(first[0], positioned)
    assert not torch.equal(positioned, normed)  # the positions were added


def test_writing_patch_embeddings_reaches_the_first_block(model):
    vision = model.vision
    with model.trace(prompt(model, ONE), images=ONE):
        clean = vision.layers[0].layer_input.save()
    with model.trace(prompt(model, ONE), images=ONE):
        vision.patch_embeddings[:] = 0  # in place, through the [1, patches, width] view
        edited = vision.layers[0].layer_input.save()
    assert not torch.equal(edited, clean)
    if model.family.model_type == "glm_ocr":
        assert torch.equal(edited, torch.zeros_like(edited))


def test_the_merger_reads_the_convolution_of_each_merge_block(model):
    """tower_output is the final norm's output, read before the projector; each run of merge**2 consecutive rows
    (one merge block) is folded by the convolution into one row, which is what the merger reads, one per image
    token in order; the merger's output is image_features as it is."""
    visual, merge = model._module.model.visual, model.vision.spatial_merge_size
    with model.trace(prompt(model, TWO), images=TWO):
        last = model.vision.layers[-1].layer_output.save()
        tower = model.vision.tower_output.save()
        received = model.projector.input.save()
        projected = model.projector.output.save()
        features = model.vision.image_features.save()
    assert torch.equal(tower[0], visual.post_layernorm(last[0]))
    with torch.no_grad():
        blocks = tower[0].view(-1, merge, merge, tower.shape[-1]).permute(0, 3, 1, 2)
        folded = visual.downsample(blocks).view(-1, visual.config.out_hidden_size)
    tokens = sum(patches_per_image(model, TWO)) // merge**2
    assert received.shape == (tokens, visual.config.out_hidden_size) and torch.equal(received, folded)
    assert torch.equal(projected, features)


def test_a_merge_block_of_tower_output_reaches_its_image_token_alone(model):
    """The merger's order: zeroing one 2x2 block of image 1's patch grid in tower_output changes the image token at
    that block's cell of image 1's merged grid, and no other image token."""
    merge_block_reaches_its_token_alone(model, TWO, merged=(3, 4))  # the 64x48 image: 8 px patches, 2x2 merge: a 6x8 patch grid


# -- the text blocks -------------------------------------------------------------------------------


def test_the_text_blocks_add_their_post_normed_sublayers(model):
    """GLM-4's block norms each sublayer's output before adding it: attention_output is post_self_attn_layernorm's
    output and mlp_output post_mlp_layernorm's, not the sublayers' own outputs."""
    block = model.layers[0]
    native = block._module
    with model.trace(prompt(model, ONE), images=ONE):
        raw_attention = block.self_attn.output[0].save()
        attention = block.attention_output.save()
        on_attention = block.self_attn.attention_output.save()
        raw_mlp = block.mlp.output.save()
        mlp = block.mlp_output.save()
        on_mlp = block.mlp.mlp_output.save()
    with torch.no_grad():
        assert torch.equal(attention, native.post_self_attn_layernorm(raw_attention))
        assert torch.equal(mlp, native.post_mlp_layernorm(raw_mlp))
    assert torch.equal(on_attention, attention) and torch.equal(on_mlp, mlp)
    assert not torch.equal(attention, raw_attention) and not torch.equal(mlp, raw_mlp)


def test_zeroing_attention_output_leaves_the_stream_plus_the_mlp(model):
    block = model.layers[0]
    with model.trace(prompt(model, ONE), images=ONE):
        layer_input = block.layer_input.save()
        block.attention_output[:] = 0
        mlp = block.mlp_output.save()
        output = block.layer_output.save()
    assert torch.equal(output, layer_input + mlp)
