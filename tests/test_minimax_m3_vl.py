"""StandardizedTransformer on a tiny MiniMax M3 VL checkpoint: what is particular to its packed CLIP-shaped tower, its
projector after the tower, and the text model's indexed sparse attention and mixture of experts, exact.

Every expected number comes from outside the code under test: the stock
processor's ``image_grid_thw`` and ``pixel_values``, the configs' sizes, the
modules' own weights, the native modules' outputs (the indexer's choice, the
experts') read in the same trace, or a recomputation from other values read
there. The spec's contracts (the scatter and the mask, the packed stream and
every block's identity, the pattern's per-image reason, what the projector
reads, ablation, sizes, support, the text-only load, generation, invokes) run
in test_vision_contracts.py, the router in test_moe_router.py; the Qwen ViT's
grids (packed_grids.py) are declared at the end. This file holds the tower's
per-image attention and its partial 3D rotary embedding, what the first block
receives, the merge's order, the indexer's block choice (read and written),
the mixture's output, and why invokes differ.
"""

from __future__ import annotations

import nnsight
import pytest
import torch
import torch.nn.functional as F
from family_inputs import attends_per_image, merge_block_reaches_its_token_alone, prompt
from packed_grids import QwenViTGridSuite
from rounding import assert_batch_close
from transformers.models.minimax_m3_vl.modeling_minimax_m3_vl import apply_rotary_pos_emb_vision

from envoys import StandardizedTransformer
from envoys.families import minimax_m3_vl
from envoys.testing import noise_image
from envoys.towers.packed_siglip import PackedSiglipAttention
from envoys.vision.tower import PackedVisionLayer, PackedVisionMlp

ONE = [noise_image(32, 32, seed=0)]
TWO = [noise_image(32, 32, seed=0), noise_image(64, 48, seed=1)]  # 64 wide, 48 high: a 12x16 grid of 4 px patches
SPARSE, FULL = 1, 0  # the text blocks: block 1 attends through the indexer, block 0 fully (the builder's layer_types)


@pytest.fixture(scope="module")
def model(tiny_checkpoint):
    return StandardizedTransformer(tiny_checkpoint("minimax_m3_vl"), task="image-text-to-text", device="cpu",
                                   attn_implementation="eager")


# -- names -----------------------------------------------------------------------------------------


def test_the_tower_is_served_by_the_shared_packed_envoys_and_the_text_blocks_are_minimax_m3s(model):
    assert set(minimax_m3_vl.ENVOYS.values()) == {
        minimax_m3_vl.MiniMaxVision, PackedVisionLayer, PackedSiglipAttention, PackedVisionMlp}
    assert isinstance(model.vision.layers[0].self_attn, PackedSiglipAttention)
    assert model.vision.spatial_merge_size == 2 and model.vision.num_heads == 2
    config = model.config.text_config
    assert config.layer_types == ["full_attention", "minimax_m3_sparse"] and config.mlp_layer_types == ["dense", "sparse"]
    assert model.layers[FULL].self_attn._module.indexer is None
    assert type(model.layers[SPARSE].self_attn._module.indexer).__name__ == "MiniMaxM3VLIndexer"
    assert type(model.layers[0].mlp._module).__name__ == "MiniMaxM3VLDenseMLP"
    assert type(model.layers[1].mlp._module).__name__ == "MiniMaxM3VLSparseMoeBlock"


# -- the tower -------------------------------------------------------------------------------------


def test_queries_keys_and_values_are_what_each_image_attends_with(model):
    """Each block attends per image: each kernel call is eager attention over its image's slice, at ``cu_seqlens``,
    of the whole queries, keys and values, and the calls joined are attention_head_outputs."""
    assert attends_per_image(model, TWO, block=0) == [64, 192]
    assert attends_per_image(model, TWO, block=-1) == [64, 192]


def test_queries_and_keys_are_after_the_partial_rotary_embedding(model):
    """The 3D rotary embedding turns the first ``cos.shape[-1]`` dims of each head; the rest are the projection's."""
    attention = model.vision.layers[0].self_attn
    with model.trace(prompt(model, TWO), images=TWO):
        cos, sin = attention.inputs[1]["position_embeddings"]
        cos, sin = cos.save(), sin.save()
        q = attention.q_proj.output.save()
        k = attention.k_proj.output.save()
        queries = attention.attention_queries.save()
        keys = attention.attention_keys.save()
    native = attention._module
    q, k = (t.view(t.shape[0], native.num_heads, native.head_dim) for t in (q, k))
    rotated_q, rotated_k = apply_rotary_pos_emb_vision(q, k, cos, sin)
    assert torch.equal(queries, rotated_q.transpose(0, 1)[None]) and torch.equal(keys, rotated_k.transpose(0, 1)[None])
    turned = cos.shape[-1]
    assert 0 < turned < native.head_dim
    assert torch.equal(queries[0, ..., turned:], q.transpose(0, 1)[..., turned:])
    assert not torch.equal(queries[0, ..., :turned], q.transpose(0, 1)[..., :turned])


def test_the_first_block_receives_the_patch_embeddings_normed(model):
    """patch_embeddings is the Conv3d's output, one row per patch, and the first block receives it through
    ``pre_layrnorm`` (no position embedding is added: the attention's rotary embedding places each patch)."""
    vision = model.vision
    with model.trace(prompt(model, TWO), images=TWO):
        convolved = vision.patch_embed.proj.output.save()
        patches = vision.patch_embeddings.save()
        first = vision.layers[0].layer_input.save()
    assert patches.shape == (1, 64 + 192, 32)
    assert torch.equal(patches[0], convolved.view(convolved.shape[0], -1))
    with torch.no_grad():
        assert torch.equal(first[0], vision.pre_layrnorm._module(patches[0]))


def test_a_merge_block_of_tower_output_reaches_its_image_token_alone(model):
    """The projector's fold: zeroing one 2x2 block of image 1's patch grid in tower_output changes the image token at
    that block's cell of image 1's merged grid, and no other image token."""
    merge_block_reaches_its_token_alone(model, TWO, merged=(6, 8))  # 48x64 px, 4 px patches, a 2x2 merge


# -- the indexer's sparse attention ----------------------------------------------------------------


def allowed_keys(chosen: torch.Tensor, block_size: int) -> torch.Tensor:
    """bool ``[index_heads, seq, seq]``: the causal keys in the key blocks ``chosen`` (``[1, index_heads, seq, top]``,
    ``-1`` for no block) names for each query."""
    _, heads, length, _ = chosen.shape
    block_of_key = torch.arange(length) // block_size
    picked = (chosen[0, :, :, :, None] == block_of_key).any(dim=-2)  # [heads, queries, keys]
    return picked & torch.ones(length, length, dtype=torch.bool).tril()


def test_each_query_attends_to_the_causal_keys_of_the_blocks_its_indexer_chose(model):
    """Block 1: each head's probabilities are nonzero exactly at the causal keys of the key blocks the indexer chose
    for its key-value group, its own block among them; block 0 attends to every causal key."""
    config = model.config.text_config
    with model.trace(prompt(model, ONE), images=ONE):
        full = model.layers[FULL].self_attn.attention_probabilities.save()
        chosen = model.layers[SPARSE].self_attn.indexer.output.save()
        sparse = model.layers[SPARSE].self_attn.attention_probabilities.save()
    length = sparse.shape[-1]
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    assert torch.equal(full[0] > 0, causal.expand_as(full[0]))
    assert chosen.shape == (1, config.index_n_heads, length, config.index_topk_blocks)
    own = torch.arange(length) // config.index_block_size
    assert bool((chosen[0] == own[:, None]).any(-1).all())
    allowed = allowed_keys(chosen, config.index_block_size)
    group = config.num_attention_heads // config.index_n_heads
    for head in range(config.num_attention_heads):
        assert torch.equal(sparse[0, head] > 0, allowed[head // group])
    assert int(allowed.sum()) < int(causal.sum()) * config.index_n_heads  # sparse: some causal keys are left out
    assert torch.allclose(sparse.sum(-1), torch.ones(sparse.shape[:-1]))


def test_writing_the_indexers_choice_changes_which_keys_are_attended(model):
    """Every query limited to its own block (the indexer's output written, ``-1`` in the other slot): block 1 then
    attends to the causal keys of each query's own block alone, and its output changes."""
    config = model.config.text_config
    attention = model.layers[SPARSE].self_attn
    text = prompt(model, ONE)
    with model.trace(text, images=ONE):
        chosen = attention.indexer.output.save()
        clean = attention.attention_output.save()
    length = chosen.shape[2]
    own = (torch.arange(length) // config.index_block_size).expand(1, config.index_n_heads, length)
    written = torch.stack([own, torch.full_like(own, -1)], dim=-1).to(chosen.dtype)
    with model.trace(text, images=ONE):
        attention.indexer.output = written
        probabilities = attention.attention_probabilities.save()
        edited = attention.attention_output.save()
    allowed = allowed_keys(written, config.index_block_size)
    assert torch.equal(probabilities[0] > 0, allowed[0].expand_as(probabilities[0]))
    assert not torch.equal(edited, clean)


# -- the mixture of experts ------------------------------------------------------------------------


def test_the_moe_blocks_mlp_output_is_its_scaled_routed_experts_plus_its_shared_expert(model):
    block = model.layers[1]
    with model.trace(prompt(model, TWO), images=TWO):
        parts = nnsight.save([block.layer_input, block.attention_output])
        shared = block.mlp.shared_experts.output.save()  # the shared expert runs first
        routed = block.mlp.experts.output.save()
        mlp_output = block.mlp_output.save()
        output = block.layer_output.save()
    layer_input, attention = parts
    factor = model.config.text_config.routed_scaling_factor
    assert factor != 1
    assert torch.equal(mlp_output, (routed * factor + shared).view(mlp_output.shape))
    assert torch.equal(layer_input + attention + mlp_output, output)


# -- several invokes -------------------------------------------------------------------------------


@pytest.mark.batch_shapes
def test_a_left_padded_invoke_differs_from_its_prompt_alone_from_the_indexed_block_on(model):
    """Why the family declares ``invokes_differ``: the second invoke, left-padded beside a longer prompt, gets block
    0's output as its prompt alone does (rounding aside), but the indexer cuts its key blocks at their slots in the
    batch, so block 1's attention output differs beyond rounding."""
    assert model.family.batching.invokes_differ == minimax_m3_vl.INDEXER_BLOCKS
    other = [noise_image(32, 32, seed=7)]
    with model.trace(prompt(model, other), images=other) as tracer:
        alone = nnsight.save([model.layers[FULL].layer_output, model.layers[SPARSE].attention_output])
        tracer.stop()
    with model.trace() as tracer:
        with tracer.invoke(prompt(model, TWO), images=TWO):
            pass
        with tracer.invoke(prompt(model, other), images=other):
            together = nnsight.save([model.layers[FULL].layer_output, model.layers[SPARSE].attention_output])
            tracer.stop()
    pad = together[0].shape[1] - alone[0].shape[1]
    assert pad % model.config.text_config.index_block_size != 0  # the padding moves the block boundaries
    assert_batch_close(together[0][:, pad:], alone[0])
    assert not torch.allclose(together[1][:, pad:], alone[1], atol=1e-3)


# -- the grids -------------------------------------------------------------------------------------


class TestGrids(QwenViTGridSuite):
    """The Qwen ViT's grids on MiniMax M3 VL's tower: the processor's merge-block order, the projector's fold."""

    checkpoint = "minimax_m3_vl"

    def test_qwen_patch_grid_puts_each_patch_embedding_where_its_patch_is(self, case):
        """The patch embeddings by hand (the tower's Conv3d, ``embeddings.proj``, on the processor's patches), each on
        its patch's cell."""
        conv = case.model._module.model.vision_tower.embeddings.proj
        vision = case.model.config.vision_config
        pixels = case.inputs["pixel_values"].view(-1, vision.num_channels, vision.temporal_patch_size, case.patch,
                                                  case.patch)
        by_hand = F.conv3d(pixels, conv.weight, conv.bias, stride=conv.stride).view(pixels.shape[0], -1)
        rows = case.patch_rows(case.inputs["pixel_values"])
        with case.trace():
            embeddings = case.model.vision.patch_embeddings.save()
        assert torch.equal(embeddings[0], by_hand)
        for image, where in enumerate(rows):
            grid = case.model.vision.patch_grid(embeddings, image=image, of="patch_embeddings")
            assert torch.equal(grid, by_hand[where])
