"""StandardizedTransformer on tiny MiniCPM-V 4.6, MiniCPM-V 4.7 and MiniCPM-OCR checkpoints: what is particular to
their tower and merger, exact.

Every expected number comes from outside the code under test: the stock
processor's ``target_sizes``, the modules' own weights and attributes, or a
recomputation from other values read in the same trace. The spec's contracts
(the scatter and the mask, the packed stream and every block's identity, the
merge inside the tower, the pattern's per-unit reason, ablation, sizes,
support, the text-only load, generation, outputs against the plain model) run
on the three checkpoints in test_vision_contracts.py; this file holds the
names, the per-unit attention, what the first block receives, the
``vit_merger`` between blocks under 16x, and the merger's per-unit order.
"""

from __future__ import annotations

import nnsight
import pytest
import torch
from family_inputs import prompt

from envoys import StandardizedTransformer
from envoys.testing import noise_image

FAMILIES = ["minicpmv4_6", "minicpmv4_7", "minicpm_ocr"]
ONE = [noise_image(32, 32, seed=0)]
TWO = [noise_image(32, 32, seed=0), noise_image(64, 48, seed=1)]  # 64 wide, 48 high: a source and 2x2 slices


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


def target_sizes(model, images) -> torch.Tensor:
    """The stock processor's ``target_sizes``: ``[h, w]`` patches per unit (each source image and slice)."""
    return model.processor(text=[prompt(model, images)], images=images, return_tensors="pt")["target_sizes"]


def bounds(sizes: torch.Tensor) -> list[int]:
    return [0, *sizes.prod(dim=1).cumsum(0).tolist()]


def sixteen_x(model) -> bool:
    return model._module.config.downsample_mode == "16x"


def eager_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scaling: float) -> torch.Tensor:
    """One unit's attention as transformers' eager kernel computes it: [1, heads, n, d] in, [1, n, heads, d] out."""
    weights = torch.softmax(torch.matmul(q, k.transpose(2, 3)) * scaling, dim=-1, dtype=torch.float32).to(q.dtype)
    return torch.matmul(weights, v).transpose(1, 2).contiguous()


# -- names -----------------------------------------------------------------------------------------


def test_the_tower_merges_after_block_0_on_the_16x_checkpoints_alone(model):
    assert model.vision.merged_after == (0 if sixteen_x(model) else None)


# -- the per-unit attention ------------------------------------------------------------------------


@pytest.mark.parametrize("block", [0, 1])
def test_queries_keys_and_values_are_what_each_unit_attends_with(model, block):
    """The per-unit kernel outputs, read at the kernel, joined, are attention_head_outputs; and they are eager
    attention over each unit's rows, at ``cu_seqlens``, of the whole queries, keys and values. After the vit_merger
    (16x, block 1) each unit has a quarter of its rows."""
    attention = model.vision.layers[block].self_attn
    sizes = target_sizes(model, TWO)
    merged_after = model.vision.merged_after
    if merged_after is not None and block > merged_after:
        sizes = sizes // 2
    edges = bounds(sizes)
    with model.trace(prompt(model, TWO), images=TWO) as tracer:
        cu_seqlens = attention.inputs[1]["cu_seqlens"].save()
        queries = attention.attention_queries.save()
        keys = attention.attention_keys.save()
        values = attention.attention_values.save()
        per_unit = nnsight.save([])
        for _ in tracer.iter[0:len(sizes)]:
            per_unit.append(attention.source.attention_interface_2.output[0].save())
        heads = attention.attention_head_outputs.save()
        projected_in = attention.o_proj.input.save()
        tracer.stop()
    assert cu_seqlens.tolist() == edges
    head_count, head_dim = attention._module.num_heads, attention._module.head_dim
    assert queries.shape == keys.shape == values.shape == (1, head_count, edges[-1], head_dim)
    assert [o.shape[1] for o in per_unit] == [b - a for a, b in zip(edges, edges[1:])]
    assert torch.equal(torch.cat(list(per_unit), dim=1), heads)
    assert torch.equal(heads.reshape(1, edges[-1], -1), projected_in)
    for (a, b), output in zip(zip(edges, edges[1:]), per_unit):
        q, k, v = (t[:, :, a:b] for t in (queries, keys, values))
        assert torch.equal(eager_attention(q, k, v, attention._module.scaling), output)


def test_the_pattern_asks_for_eager_under_sdpa(tiny_checkpoint):
    model = StandardizedTransformer(tiny_checkpoint("minicpmv4_6"), task="image-text-to-text", attn_implementation="sdpa")
    attention = model.vision.layers[0].self_attn
    reason = model.vision.support()["self_attn.attention_probabilities"][0]
    assert "runs 'sdpa': load it with attn_implementation='eager'" in reason
    with model.trace(prompt(model, TWO), images=TWO) as tracer:
        queries = attention.attention_queries.save()
        heads = attention.attention_head_outputs.save()
        tracer.stop()
    assert heads.shape[1] == queries.shape[2] == bounds(target_sizes(model, TWO))[-1]


# -- what the first block receives -----------------------------------------------------------------


def test_the_first_block_receives_the_patch_embeddings_plus_learned_positions(model):
    """patch_embeddings is the convolution's output as one packed row, every unit's patches in raster order; the
    embeddings add each patch's learned position (bucketed from its unit's grid) before block 0."""
    vision = model.vision
    tower = model._module.model.vision_tower
    with model.trace(prompt(model, TWO), images=TWO) as tracer:
        pixels = vision.embeddings.input.save()
        patches = vision.patch_embeddings.save()
        embedded = vision.embeddings.output.save()
        first = vision.layers[0].layer_input.save()
        tracer.stop()
    count = bounds(target_sizes(model, TWO))[-1]
    assert patches.shape == (1, count, vision.vision_hidden_size)
    with torch.no_grad():  # patch j is the convolution of the processor's j-th patch_size-wide column of pixels
        side = vision.patch_size
        column = pixels[..., 5 * side:6 * side]
        assert torch.allclose(tower.embeddings.patch_embedding(column).flatten(), patches[0, 5], rtol=0, atol=1e-6)
    assert torch.equal(first, embedded)
    assert not torch.equal(embedded, patches)  # the positions were added


def test_writing_patch_embeddings_reaches_the_first_block(model):
    vision = model.vision
    with model.trace(prompt(model, ONE), images=ONE) as tracer:
        clean = vision.layers[0].layer_input.save()
        tracer.stop()
    with model.trace(prompt(model, ONE), images=ONE) as tracer:
        vision.patch_embeddings[:] = 0  # in place
        edited = vision.layers[0].layer_input.save()
        tracer.stop()
    assert not torch.equal(edited, clean)
    position = model._module.model.vision_tower.embeddings.position_embedding.weight
    assert torch.equal(edited[0], position.detach())  # one 8x8 unit: every position of the 8x8 table, in order


# -- the vit_merger between blocks (16x) -----------------------------------------------------------


def test_the_vit_merger_folds_the_stream_between_two_blocks(load):
    """Under 16x the vit_merger runs after block 0: it receives block 0's output and block 1 receives its output,
    one row per 2x2 window of each unit's grid, windows in raster order; a write to block 0's output reaches it."""
    model = load("minicpmv4_6")
    vision = model.vision
    with model.trace(prompt(model, ONE), images=ONE) as tracer:
        out = vision.layers[0].layer_output.save()
        received = vision.vit_merger.input.save()
        folded = vision.vit_merger.output.save()
        second = vision.layers[1].layer_input.save()
        tracer.stop()
    assert torch.equal(received, out) and torch.equal(second, folded)
    assert folded.shape == (1, out.shape[1] // 4, vision.vision_hidden_size)
    # zero one 2x2 window of the 8x8 grid: patches (0, 2), (0, 3), (1, 2), (1, 3)
    with model.trace(prompt(model, ONE), images=ONE) as tracer:
        vision.layers[0].layer_output[:, [2, 3, 10, 11]] = 0
        edited = vision.layers[1].layer_input.save()
        tracer.stop()
    changed = (edited != second).any(-1)[0]
    assert changed.nonzero().flatten().tolist() == [1]  # window (0, 1) of the 4x4 windows


def test_under_4x_no_vit_merger_runs(load):
    model = load("minicpm_ocr")
    with model.trace(prompt(model, ONE), images=ONE) as tracer:
        out = model.vision.layers[0].layer_output.save()
        second = model.vision.layers[1].layer_input.save()
        tracer.stop()
    assert torch.equal(out, second) and out.shape[1] == 64


# -- the merger, per unit --------------------------------------------------------------------------


def test_the_merger_folds_each_unit_of_tower_output(model):
    """projector.input is tower_output; projector.output is a list of one tensor per unit (source images and
    slices, in target_sizes' order): its 2x2 blocks of tower_output's grid folded and mapped by the MLP; their
    concatenation is image_features."""
    merger = model._module.model.merger
    sizes = target_sizes(model, TWO)
    if sixteen_x(model):
        sizes = sizes // 2  # the vit_merger halved each unit's grid
    with model.trace(prompt(model, TWO), images=TWO) as tracer:
        tower = model.vision.tower_output.save()
        received = model.projector.input.save()
        projected = model.projector.output.save()
        features = model.vision.image_features.save()
        tracer.stop()
    assert torch.equal(received, tower)
    assert isinstance(projected, list) and len(projected) == len(sizes)
    edges = bounds(sizes)
    width = tower.shape[-1]
    for (height, breadth), a, unit in zip(sizes.tolist(), edges, projected):
        rows = tower[0, a:a + height * breadth].view(height // 2, 2, breadth // 2, 2, width)
        blocks = rows.permute(0, 2, 1, 3, 4).reshape(-1, 4 * width)
        with torch.no_grad():
            assert torch.equal(unit, merger.mlp[0](blocks))
    assert torch.equal(torch.cat(projected), features)


def test_a_block_of_tower_output_reaches_its_image_token_alone(model):
    """Zeroing one 2x2 block of the first unit's grid in tower_output (its rows in raster order) changes that
    block's image token, the first unit's token 1, and no other."""
    width = 4 if sixteen_x(model) else 8  # the first unit's grid side at tower_output: 32 px / 4 px, halved under 16x
    with model.trace(prompt(model, TWO), images=TWO) as tracer:
        clean = model.vision.image_features.save()
        tracer.stop()
    with model.trace(prompt(model, TWO), images=TWO) as tracer:
        model.vision.tower_output[:, [2, 3, width + 2, width + 3]] = 0  # the block at (0, 1)
        edited = model.vision.image_features.save()
        tracer.stop()
    assert (clean != edited).any(-1).nonzero().flatten().tolist() == [1]


def test_under_4x_the_vit_merger_s_values_say_it_does_not_run(load):
    from envoys import Unavailable

    model = load("minicpm_ocr")
    with pytest.raises(Unavailable, match="vit_merger, which the tower's forward skips on a model that downsamples 4x"):
        model.vision.vit_merger.self_attn.attention_queries
    assert model.vision.support()["self_attn.attention_queries"] is None  # the blocks' own attention is served
    assert load("minicpmv4_6").vision.vit_merger.self_attn.support()["attention_queries"] is None


# -- the grids -------------------------------------------------------------------------------------


def test_an_image_s_grid_is_its_slices_stitched_and_a_block_reaches_its_token_alone(model):
    """Image 1 (64 wide, 48 high) is a source unit and 2x2 slices: its grid stitches the slices by row and column.
    Zeroing one 2x2 block of that grid in tower_output (on the stream after the vit_merger under 16x) changes the image
    token at that block's cell of image 1's token grid, and no other image token."""
    vision = model.vision
    of = "merged" if sixteen_x(model) else "stream"
    sizes = target_sizes(model, TWO)  # [h, w] in patches: image 0's one unit, image 1's source, then its 4 slices
    side = 2 if sixteen_x(model) else 1
    slice_rows, slice_columns = (int(size) // side for size in sizes[2])
    text = prompt(model, TWO)
    with model.trace(text, images=TWO) as tracer:
        patches = vision.patch_embeddings.save()
        clean = vision.image_features.save()
        tracer.stop()
    first = sizes[0].tolist()
    assert torch.equal(vision.patch_grid(patches, image=0), patches[0, :first[0] * first[1]].view(*first, -1))
    with model.trace(text, images=TWO) as tracer:
        tower = vision.tower_output
        cells = vision.patch_grid(tower, image=1, of=of)
        assert cells.shape[:2] == (2 * slice_rows, 2 * slice_columns)
        cells[slice_rows:slice_rows + 2, 2:4] = 0  # the second slice row's first slice, its block (0, 1)
        vision.place_patch_grid(cells, tower, image=1, of=of)
        edited = vision.image_features.save()
        tracer.stop()
    before, after = vision.token_grid(clean, image=1), vision.token_grid(edited, image=1)
    assert before.shape[:2] == (slice_rows, slice_columns)  # each slice's tokens: its grid folded 2x2
    assert (before != after).any(-1).nonzero().tolist() == [[slice_rows // 2, 1]]
    assert torch.equal(vision.token_grid(clean, image=0), vision.token_grid(edited, image=0))


def test_under_4x_there_is_no_merged_grid(load):
    from envoys.image.grids import GridError

    model = load("minicpm_ocr")
    with model.trace(prompt(model, ONE), images=ONE) as tracer:
        tower = model.vision.tower_output.save()
        tracer.stop()
    assert model.vision.patch_grid(tower).shape[:2] == (8, 8)
    with pytest.raises(GridError, match="downsamples 4x, so no vit_merger runs"):
        model.vision.patch_grid(tower, of="merged")
