"""StandardizedTransformer on a tiny Dots 3 Note checkpoint: what is particular to its tower (per-image attention,
mixture-of-experts blocks, the norm inside the patch embedding, the merger reading the final norm) and to its text
model (the gated, index-masked attention; the sparse block's experts), exact.

Every expected number comes from outside the code under test: the stock
processor's ``image_grid_thw``, the modules' own weights and attributes, or a
recomputation from other values read in the same trace. The spec's contracts
(the scatter and the mask, the packed stream and every block's identity, the
pattern's per-image reason, ablation, sizes, support, the text-only load,
generation, outputs against the plain model) run in test_vision_contracts.py,
the text router in test_moe_router.py.
"""

from __future__ import annotations

import torch
from family_inputs import attends_per_image, merge_block_reaches_its_token_alone, prompt
from transformers.models.dots3_note.modeling_dots3_note import apply_rotary_pos_emb_vision

from envoys import StandardizedTransformer
from envoys.testing import noise_image

ONE = [noise_image(32, 32, seed=0)]
TWO = [noise_image(32, 32, seed=0), noise_image(64, 48, seed=1)]  # 64 wide, 48 high: a 6x8 grid of 8 px patches


CHECKPOINT = "dots3_note"


# -- names -----------------------------------------------------------------------------------------


def test_the_tower_mlps_are_dense_then_moe_and_the_audio_is_not_served(model):
    assert [type(layer.mlp._module).__name__ for layer in model.vision.layers] == [
        "Dots3NoteVisionMLP", "Dots3NoteVisionMoE"]
    assert model.vision.spatial_merge_size == 2 and model.vision.num_heads == 2
    assert model.support()["audio"].startswith("dots3_note's audio is not served yet")  # its tower at its native names


# -- the per-image attention -----------------------------------------------------------------------


def test_queries_keys_and_values_are_what_each_image_attends_with(model):
    """The last block attends per image: each kernel call is eager attention over its image's slice, at
    ``cu_seqlens``, of the whole queries, keys and values, and the calls joined are attention_head_outputs."""
    assert attends_per_image(model, TWO) == [16, 48]


def test_queries_and_keys_are_after_their_norms_and_the_rotary_embedding(model):
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
    assert not torch.equal(queries, normed_q.transpose(0, 1).unsqueeze(0))


def test_the_pattern_asks_for_eager_under_sdpa(tiny_checkpoint):
    model = StandardizedTransformer(tiny_checkpoint("dots3_note"), task="image-text-to-text", attn_implementation="sdpa")
    reasons = model.vision.support()["self_attn.attention_probabilities"]
    assert set(reasons) == {0, 1} and "runs 'sdpa': load it with attn_implementation='eager'" in reasons[0]
    with model.trace(prompt(model, TWO), images=TWO):
        queries = model.vision.layers[0].self_attn.attention_queries.save()
        heads = model.vision.layers[0].self_attn.attention_head_outputs.save()
    assert heads.shape[1] == queries.shape[2] == 16 + 48


# -- the stream's ends: what the first block receives, the merge -----------------------------------


def test_patch_embeddings_are_the_convolution_before_the_patch_embeddings_norm(model):
    """patch_embeddings is the convolution's output, one row per patch; the first block receives it RMS-normed by
    the patch embedding's own norm (no position embedding is added)."""
    vision = model.vision
    with model.trace(prompt(model, TWO), images=TWO):
        convolved = vision.patch_embed.proj.output.save()
        patches = vision.patch_embeddings.save()
        first = vision.layers[0].layer_input.save()
    assert patches.shape == (1, 16 + 48, 32)
    assert torch.equal(patches[0], convolved.reshape(convolved.shape[0], -1))
    with torch.no_grad():
        assert torch.equal(first[0], model._module.model.vision_tower.patch_embed.norm(patches[0]))
    assert not torch.equal(first, patches)


def test_writing_patch_embeddings_reaches_the_first_block(model):
    vision = model.vision
    with model.trace(prompt(model, ONE), images=ONE):
        clean = vision.layers[0].layer_input.save()
    with model.trace(prompt(model, ONE), images=ONE):
        vision.patch_embeddings[:] = 0  # in place, through the [1, patches, width] view
        edited = vision.layers[0].layer_input.save()
    assert not torch.equal(edited, clean)
    assert torch.equal(edited, torch.zeros_like(edited))  # an RMSNorm of zeros


def test_the_merger_reads_each_merge_block_of_tower_output(model):
    """tower_output is the final RMSNorm's output, what the merger reads as it is; the merger folds each run of 4
    consecutive rows (one 2x2 merge block) into one image token, image after image."""
    tower = model._module.model.vision_tower
    with model.trace(prompt(model, TWO), images=TWO):
        last = model.vision.layers[-1].layer_output.save()
        output = model.vision.tower_output.save()
        received = model.projector.input.save()
        projected = model.projector.output.save()
        features = model.vision.image_features.save()
    with torch.no_grad():
        assert torch.equal(output[0], tower.norm(last[0]))
        merger = tower.merger
        assert torch.equal(projected, merger.mlp(merger.ln_q(received).view(-1, 4 * 32)))
    assert torch.equal(received, output[0]) and torch.equal(projected, features)
    assert projected.shape == (4 + 12, model.hidden_size)


def test_a_merge_block_of_tower_output_reaches_its_image_token_alone(model):
    """The merge's order: zeroing one 2x2 block of image 1's patch grid in tower_output changes the image token at
    that block's cell of image 1's merged grid, and no other image token."""
    merge_block_reaches_its_token_alone(model, TWO, merged=(3, 4))  # the 64x48 image: 8 px patches, 2x2 merge: a 6x8 patch grid


# -- the tower's mixture-of-experts block ----------------------------------------------------------


def test_the_towers_sparse_block_adds_its_routed_experts(model):
    """Block 1's MLP routes each patch to the top 2 of 4 experts by its router's sigmoid scores plus the
    correction bias (zero here), weighted by those scores renormed; mlp_output is the weighted sum, no shared
    expert, what the block adds to the stream."""
    block = model.vision.layers[1]
    native = block.mlp._module
    with model.trace(prompt(model, TWO), images=TWO):
        received = block.mlp.input.save()
        logits = block.mlp.gate.source.F_linear_0.output.save()
        _, weights, chosen = block.mlp.gate.output
        weights, chosen = weights.save(), chosen.save()
        routed = block.mlp.experts.output.save()
        mlp = block.mlp_output.save()
        on_mlp = block.mlp.mlp_output.save()
    assert logits.shape == (16 + 48, 4) and chosen.shape == weights.shape == (16 + 48, 2)
    assert not native.e_score_correction_bias.any()
    assert torch.equal(chosen.sort(-1).values, logits.sigmoid().topk(2, dim=-1).indices.sort(-1).values)
    scores = logits.sigmoid().gather(1, chosen)
    assert torch.equal(weights, scores / (scores.sum(-1, keepdim=True) + 1e-20) * native.gate.router_scaling_factor)
    assert torch.equal(mlp, on_mlp) and mlp.shape == (1, 16 + 48, 32)
    assert torch.equal(mlp[0], routed.view(received.shape))


# -- the text blocks -------------------------------------------------------------------------------


def test_the_text_attention_gates_each_heads_output_before_o_proj(model):
    """attention_head_outputs is the kernel's output; the block scales each head's by the sigmoid of g_proj's output
    before the output projection."""
    attention = model.layers[0].self_attn
    with model.trace(prompt(model, ONE), images=ONE):
        heads = attention.attention_head_outputs.save()
        gate = attention.g_proj.output.save()
        projected_in = attention.o_proj.input.save()
    batch, seq = gate.shape[:2]
    assert heads.shape == (batch, seq, 2, 12)
    assert torch.equal(projected_in, (heads * gate.view(batch, seq, -1, 1).sigmoid()).reshape(batch, seq, -1))


def test_the_indexer_leaves_each_query_its_top_keys_alone(model):
    """On an indexed_attention block the indexer picks each query's top 8 keys (index_topk), and the eager kernel's
    mask removes the rest: attention_probabilities is zero off them."""
    attention = model.layers[1].self_attn
    with model.trace(prompt(model, ONE), images=ONE):
        chosen = attention.indexer.output.save()
        probabilities = attention.attention_probabilities.save()
    batch, heads, seq, keys = probabilities.shape
    assert chosen.shape == (batch, seq, min(8, keys))
    kept = torch.zeros(batch, seq, keys, dtype=torch.bool).scatter(-1, chosen.long(), True)
    assert not probabilities.masked_fill(kept[:, None], 0).any()
    assert ((probabilities > 0).sum(-1) <= 8).all() and seq > 8


def test_the_sparse_block_adds_its_routed_and_shared_experts(model):
    """Block 1's MLP: mlp_output is its whole output, the routed experts' weighted sum plus the shared expert's
    output, what the block adds to the stream; block 0's is a dense MLP."""
    block = model.layers[1]
    assert type(block.mlp._module).__name__ == "Dots3NoteTextMoE"
    assert type(model.layers[0].mlp._module).__name__ == "Dots3NoteTextMLP"
    with model.trace(prompt(model, ONE), images=ONE):
        received = block.mlp.input.save()
        routed = block.mlp.experts.output.save()
        shared = block.mlp.shared_experts.output.save()
        mlp = block.mlp_output.save()
        on_mlp = block.mlp.mlp_output.save()
    assert torch.equal(mlp, on_mlp)
    assert torch.equal(mlp, routed.view(received.shape) + shared)
