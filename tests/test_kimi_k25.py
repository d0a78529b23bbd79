"""StandardizedTransformer on a tiny Kimi K2.5 checkpoint: what is particular to MoonViT, its projector after the
tower, and the DeepSeek-V3 text model's sparse blocks, exact.

Every expected number comes from outside the code under test: the stock
processor's ``image_grid_thw``, the modules' own weights and attributes, or a
recomputation from other values read in the same trace. The spec's contracts
(the scatter and the mask, the packed stream and every block's identity, the
pattern's per-image reason, ablation, sizes, support, the text-only load,
generation, outputs against the plain model) run in test_vision_contracts.py,
the router in test_moe_router.py; this file holds the per-image attention,
what the first block receives, the merge (a final norm, each 2x2 block of
patches gathered, then the projector) and its order, and the sparse block's
output.
"""

from __future__ import annotations

import torch
from family_inputs import attends_per_image, grid, merge_block_reaches_its_token_alone, prompt
from transformers.models.kimi_k25.modeling_kimi_k25 import apply_rotary_pos_emb_vision

from envoys import StandardizedTransformer
from envoys.testing import noise_image

ONE = [noise_image(32, 32, seed=0)]
TWO = [noise_image(32, 32, seed=0), noise_image(64, 48, seed=1)]  # 64 wide, 48 high: a 12x16 grid of 4 px patches


CHECKPOINT = "kimi_k25"


# -- names -----------------------------------------------------------------------------------------


def test_the_text_model_is_deepseek_v3s_and_the_towers_sizes(model):
    assert type(model._module.model.language_model).__name__ == "DeepseekV3Model"
    assert model.vision.spatial_merge_size == 2 and model.vision.num_heads == 2


# -- the per-image attention -----------------------------------------------------------------------


def test_queries_keys_and_values_are_what_each_image_attends_with(model):
    """The last block attends per image: each kernel call is eager attention over its image's slice, at
    ``cu_seqlens``, of the whole queries, keys and values, and the calls joined are attention_head_outputs."""
    assert attends_per_image(model, TWO) == [64, 192]


def test_queries_and_keys_are_after_the_rotary_embedding(model):
    attention = model.vision.layers[0].self_attn
    with model.trace(prompt(model, TWO), images=TWO):
        cos, sin = attention.inputs[1]["position_embeddings"]
        cos, sin = cos.save(), sin.save()
        q = attention.q_proj.output.save()
        k = attention.k_proj.output.save()
        queries = attention.attention_queries.save()
        keys = attention.attention_keys.save()
    head_dim = attention._module.head_dim
    rotated_q, rotated_k = apply_rotary_pos_emb_vision(
        q.reshape(1, q.shape[0], -1, head_dim), k.reshape(1, k.shape[0], -1, head_dim), cos, sin)
    assert torch.equal(queries, rotated_q.transpose(2, 1)) and torch.equal(keys, rotated_k.transpose(2, 1))
    assert not torch.equal(queries, q.reshape(1, q.shape[0], -1, head_dim).transpose(2, 1))


def test_the_pattern_asks_for_eager_under_sdpa(tiny_checkpoint):
    model = StandardizedTransformer(tiny_checkpoint("kimi_k25"), task="image-text-to-text", attn_implementation="sdpa")
    reasons = model.vision.support()["self_attn.attention_probabilities"]
    assert set(reasons) == {0, 1} and "runs 'sdpa': load it with attn_implementation='eager'" in reasons[0]
    with model.trace(prompt(model, TWO), images=TWO):
        queries = model.vision.layers[0].self_attn.attention_queries.save()
        heads = model.vision.layers[0].self_attn.attention_head_outputs.save()
    assert heads.shape[1] == queries.shape[2] == 64 + 192


# -- the stream's ends: what the first block receives, the merge -----------------------------------


def test_patch_embeddings_are_the_convolution_before_the_positions(model):
    """patch_embeddings is the convolution's output, one row per patch; the first block receives it plus the learned
    positions resampled to each image's grid (pos_emb's output)."""
    vision = model.vision
    with model.trace(prompt(model, TWO), images=TWO):
        convolved = vision.patch_embed.proj.output.save()
        patches = vision.patch_embeddings.save()
        positioned = vision.patch_embed.pos_emb.output.save()
        first = vision.layers[0].layer_input.save()
    assert patches.shape == (1, 64 + 192, 32)
    assert torch.equal(patches[0], convolved.view(convolved.shape[0], -1))
    assert torch.equal(first[0], positioned) and not torch.equal(positioned, patches[0])


def test_writing_patch_embeddings_reaches_the_first_block(model):
    """Zeroed patch embeddings: the first block receives the resampled positions alone, what the position embedding
    adds to zeros on this image's grid."""
    vision = model.vision
    with model.trace(prompt(model, ONE), images=ONE):
        clean = vision.layers[0].layer_input.save()
    with model.trace(prompt(model, ONE), images=ONE):
        vision.patch_embeddings[:] = 0  # in place, through the [1, patches, width] view
        edited = vision.layers[0].layer_input.save()
    assert not torch.equal(edited, clean)
    with torch.no_grad():
        positions = model._module.model.vision_tower.patch_embed.pos_emb(torch.zeros_like(edited[0]), grid(model, ONE))
    assert torch.equal(edited[0], positions)


def test_the_projector_reads_each_merge_block_of_tower_output(model):
    """tower_output is the final norm's output; the tower gathers each 2x2 block of every image's raster grid (its
    four patches in raster order) into one row of the projector's input, blocks in raster order over the merged grid,
    image after image; the projector's output, one row a token, is image_features."""
    tower = model._module.model.vision_tower
    with model.trace(prompt(model, TWO), images=TWO):
        last = model.vision.layers[-1].layer_output.save()
        output = model.vision.tower_output.save()
        received = model.projector.input.save()
        projected = model.projector.output.save()
        features = model.vision.image_features.save()
    with torch.no_grad():
        assert torch.equal(output[0], tower.final_layernorm(last[0]))
    blocks, start = [], 0
    for _, h, w in grid(model, TWO).tolist():
        rows = output[0, start:start + h * w].reshape(h // 2, 2, w // 2, 2, -1)
        blocks.append(rows.permute(0, 2, 1, 3, 4).reshape(-1, 4, rows.shape[-1]))
        start += h * w
    assert received.shape == (16 + 48, 4, 32) and torch.equal(received, torch.cat(blocks))
    assert projected.shape == (16 + 48, 1, model.hidden_size) and torch.equal(projected[:, 0], features)


def test_a_merge_block_of_tower_output_reaches_its_image_token_alone(model):
    """The merge's order: zeroing one 2x2 block of image 1's patch grid in tower_output changes the image token at
    that block's cell of image 1's merged grid, and no other image token."""
    merge_block_reaches_its_token_alone(model, TWO, merged=(6, 8))  # the 64x48 image: 4 px patches, 2x2 merge: a 12x16 patch grid


# -- the text blocks -------------------------------------------------------------------------------


def test_the_sparse_block_adds_its_routed_and_shared_experts(model):
    """Block 1's MLP is DeepSeek-V3's MoE: mlp_output is its whole output, the routed experts' weighted sum plus the
    shared experts' output, what the block adds to the stream; block 0's is a dense MLP."""
    block = model.layers[1]
    native = block.mlp._module
    assert type(native).__name__ == "DeepseekV3MoE" and type(model.layers[0].mlp._module).__name__ == "DeepseekV3MLP"
    with model.trace(prompt(model, ONE), images=ONE):
        received = block.mlp.input.save()
        routed = block.mlp.experts.output.save()
        shared = block.mlp.shared_experts.output.save()
        mlp = block.mlp_output.save()
        on_mlp = block.mlp.mlp_output.save()
    assert torch.equal(mlp, on_mlp)
    assert torch.equal(mlp, routed.view(received.shape) + shared)
