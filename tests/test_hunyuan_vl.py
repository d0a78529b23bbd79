"""StandardizedTransformer on a tiny HunYuanVL (HunyuanOCR) checkpoint: what is particular to its tower and its
merger, exact.

Every expected number comes from outside the code under test: the stock
processor's ``image_grid_thw``, the modules' own weights and attributes, or a
recomputation from other values read in the same trace. The spec's contracts
(the scatter and the mask, the packed stream and every block's identity, the
pattern's per-image reason, what the projector reads and gives at each of its
calls, ablation, sizes, support, the text-only load, generation, outputs
against the plain model) run in test_vision_contracts.py; this file holds the
per-image attention, what the first block receives, and the merger: once per
image, its newline column and begin and end rows, its order.
"""

from __future__ import annotations

import nnsight
import torch
from family_inputs import eager_attention, grid, prompt

from envoys import StandardizedTransformer
from envoys.testing import noise_image

ONE = [noise_image(32, 32, seed=0)]
TWO = [noise_image(32, 32, seed=0), noise_image(64, 48, seed=1)]  # 64 wide, 48 high: a 12x16 grid of 4 px patches


CHECKPOINT = "hunyuan_vl"


# -- the per-image attention -----------------------------------------------------------------------


def test_queries_keys_and_values_are_what_each_image_attends_with(model):
    """The per-image kernel outputs, joined, are attention_head_outputs; each is eager attention over its image's
    slice, at ``cu_seqlens``, of the whole queries, keys and values, which are the projections' (no rotary)."""
    attention = model.vision.layers[-1].self_attn
    with model.trace(prompt(model, TWO), images=TWO) as tracer:
        cu_seqlens = attention.inputs[1]["cu_seqlens"].save()
        q = attention.q_proj.output.save()
        queries = attention.attention_queries.save()
        keys = attention.attention_keys.save()
        values = attention.attention_values.save()
        per_image = nnsight.save([])
        for _ in tracer.iter[0:len(TWO)]:
            per_image.append(attention.source.attention_interface_2.output[0].save())
        heads = attention.attention_head_outputs.save()
        projected_in = attention.o_proj.input.save()
    sizes = [int(t * h * w) for t, h, w in grid(model, TWO)]
    bounds = [0, *torch.tensor(sizes).cumsum(0).tolist()]
    assert sizes == [64, 192] and cu_seqlens.tolist() == bounds
    native = attention._module
    assert queries.shape == keys.shape == values.shape == (1, native.num_heads, bounds[-1], native.head_dim)
    assert torch.equal(queries, q.view(1, bounds[-1], native.num_heads, native.head_dim).transpose(1, 2))
    assert [o.shape[1] for o in per_image] == sizes
    assert torch.equal(torch.cat(list(per_image), dim=1), heads)
    assert torch.equal(heads.reshape(1, bounds[-1], -1), projected_in)
    for (a, b), output in zip(zip(bounds, bounds[1:]), per_image):
        part = (t[:, :, a:b] for t in (queries, keys, values))
        assert torch.equal(eager_attention(*part, native.scaling), output)


def test_the_pattern_asks_for_eager_under_sdpa(tiny_checkpoint):
    model = StandardizedTransformer(tiny_checkpoint("hunyuan_vl"), task="image-text-to-text", attn_implementation="sdpa")
    reasons = model.vision.support()["self_attn.attention_probabilities"]
    assert set(reasons) == {0, 1} and "runs 'sdpa': load it with attn_implementation='eager'" in reasons[0]
    with model.trace(prompt(model, TWO), images=TWO):
        queries = model.vision.layers[0].self_attn.attention_queries.save()
        heads = model.vision.layers[0].self_attn.attention_head_outputs.save()
    assert heads.shape[1] == queries.shape[2] == 64 + 192


# -- what the first block receives -----------------------------------------------------------------


def test_patch_embeddings_are_the_convolution_before_the_positions(model):
    vision = model.vision
    with model.trace(prompt(model, TWO), images=TWO):
        convolved = vision.patch_embed.output.save()
        patches = vision.patch_embeddings.save()
        positioned = vision.embeddings.output.save()
        first = vision.layers[0].layer_input.save()
    assert patches.shape == (1, 64 + 192, 32)
    assert torch.equal(patches[0], convolved.view(convolved.shape[0], -1))
    assert torch.equal(first, positioned) and not torch.equal(positioned, patches)


def test_writing_patch_embeddings_reaches_the_first_block(model):
    """Zeroed patch embeddings: the first block receives the learned positions alone, resampled to the image's grid."""
    vision = model.vision
    with model.trace(prompt(model, ONE), images=ONE):
        clean = vision.layers[0].layer_input.save()
    with model.trace(prompt(model, ONE), images=ONE):
        vision.patch_embeddings[:] = 0  # in place, through the [1, patches, width] view
        edited = vision.layers[0].layer_input.save()
    assert not torch.equal(edited, clean)
    embeddings = model._module.model.vision_tower.embeddings
    with torch.no_grad():
        positions = embeddings.interpolate_pos_encoding(edited, 8, 8)  # the 32x32 image's 8x8 grid
    assert torch.equal(edited, positions)


# -- the merger: once per image --------------------------------------------------------------------


def test_the_merger_runs_once_per_image_with_its_newline_begin_and_end_rows(model):
    """The merger's i-th call reads image i's rows of the last block's stream and gives its h/2 x (w/2 + 1) + 2
    tokens, image_features' rows for that image; the begin and end rows are the learned ones, the same for every
    image."""
    with model.trace(prompt(model, TWO), images=TWO) as tracer:
        last = model.vision.layers[-1].layer_output.save()
        received, given = nnsight.save([]), nnsight.save([])
        for _ in tracer.iter[0:len(TWO)]:
            received.append(model.projector.input.save())
            given.append(model.projector.output.save())
        features = model.vision.image_features.save()
    assert [r.shape for r in received] == [(1, 64, 32), (1, 192, 32)]
    assert torch.equal(received[0], last[:, :64]) and torch.equal(received[1], last[:, 64:])
    assert [g.shape[1] for g in given] == [4 * 5 + 2, 6 * 9 + 2]
    assert torch.equal(given[0][0], features[:22]) and torch.equal(given[1][0], features[22:])
    assert torch.equal(given[0][0, 0], given[1][0, 0]) and torch.equal(given[0][0, -1], given[1][0, -1])


def test_a_merge_block_reaches_its_image_token_alone(model):
    """The merger's order: zeroing one 2x2 block of image 1's patches (raster order) in the last block's output
    changes image 1's token at that block's cell of its merged grid, counted past the begin row and one newline a
    merged row, and no other image token."""
    text = prompt(model, TWO)
    with model.trace(text, images=TWO):
        clean = model.vision.image_features.save()
    with model.trace(text, images=TWO):
        stream = model.vision.layers[-1].layer_output
        cells = stream[0, 64:].view(12, 16, -1)  # image 1's 12x16 patches, in raster order
        cells[2:4, 4:6] = 0  # the merge block at merged cell (1, 2)
        edited = model.vision.image_features.save()
    changed = (clean != edited).any(-1).nonzero().flatten().tolist()
    assert changed == [22 + 1 + 1 * (8 + 1) + 2]
    vision = model.vision
    before, after = vision.token_grid(clean, image=1), vision.token_grid(edited, image=1)
    assert before.shape[:2] == (6, 8) and (before != after).any(-1).nonzero().tolist() == [[1, 2]]
    assert torch.equal(before[1, 2], clean[34]) and torch.equal(vision.token_grid(clean, image=0), clean[1:21].view(
        4, 5, -1)[:, :4])  # image 0: past its begin row, each merged row then its newline


def test_the_patch_grid_is_the_raster_order(model):
    with model.trace(prompt(model, TWO), images=TWO):
        stream = model.vision.layers[0].layer_input.save()
    assert torch.equal(model.vision.patch_grid(stream, image=1), stream[0, 64:].view(12, 16, -1))
    assert torch.equal(model.vision.patch_grid(stream, image=0), stream[0, :64].view(8, 8, -1))
