"""StandardizedTransformer on tiny Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Qwen3.5 and Qwen3.5-MoE checkpoints: the packed
tower, exact.

Every expected number comes from outside the code under test: the stock
processor's ``image_grid_thw`` and ``merge_size``, the modules' own weights
and attributes, or a recomputation from other values read in the same trace.
DeepStack (Qwen3-VL) is in test_qwen_deepstack.py. The spec's contracts (the
scatter and the mask, the packed stream and every block's identity, the
pattern's per-image reason, what the merger reads, ablation, sizes, support,
the text-only load, generation, outputs against the plain model) run on the
five checkpoints in test_vision_contracts.py; this file holds what is
particular to the Qwen ViT, and declares the grids' suites (packed_grids.py)
on its four checkpoints.
"""

from __future__ import annotations

import math
import re

import nnsight
import pytest
import torch
from family_inputs import attends_per_image, eager_attention, grid, prompt
from packed_grids import QwenLearnedPositionsGrids, QwenUnpositionedGrids
from swap_rules import without_rule

from envoys import StandardizedTransformer, Unavailable
from envoys.catalog import rule_named
from envoys.testing import noise_image
from instrument.versions import for_installed

#: The sites Qwen2.5-VL's window rule serves on the installed release: the permutation into windows, or, on a
#: release that permutes inline, the call computing the index.
WINDOW_RULE = for_installed(rule_named("qwen2_5_vl.vision-windows"))
WINDOW_SITES = [WINDOW_RULE.serve_as.get(label, label) for labels in WINDOW_RULE.sites.values() for label in labels]

FAMILIES = ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5", "qwen3_5_moe"]
ONE = [noise_image(32, 32, seed=0)]
TWO = [noise_image(32, 32, seed=0), noise_image(48, 64, seed=1)]  # two sizes: 32x32 and 48 wide, 64 high


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


def merge_unit(model) -> int:
    return model.processor.image_processor.merge_size ** 2


# -- loading ---------------------------------------------------------------------------------------


def test_each_family_loads_with_its_stock_processor(model):
    assert type(model.processor).__name__.startswith(("Qwen2VL", "Qwen2_5_VL", "Qwen3VL"))
    assert model.family.model_type == model.config.model_type


def test_qwen3_vl_names_are_the_specs():
    from envoys.families import qwen3_vl

    assert qwen3_vl.RENAME == {
        "model.language_model.embed_tokens": "embed_tokens", "model.language_model.layers": "layers",
        "model.language_model.norm": "norm", "model.visual": "vision", "model.visual.merger": "projector",
        "blocks": "layers", "attn": "self_attn", "norm1": "input_layernorm", "norm2": "post_attention_layernorm",
        "attn.proj": "attn.o_proj", "linear_fc2": "down_proj",
    }
    assert {cls.__name__: envoy.__name__ for cls, envoy in qwen3_vl.ENVOYS.items()} == {
        "Qwen3VLTextDecoderLayer": "DeepstackLayer",
        "Qwen3VLVisionModel": "QwenVision", "Qwen3VLVisionBlock": "PackedVisionLayer",
        "Qwen3VLVisionAttention": "QwenVisionAttention", "Qwen3VLVisionMLP": "PackedVisionMlp",
    }


# -- the packed tower ------------------------------------------------------------------------------


@pytest.mark.parametrize("images", [ONE, TWO], ids=["one-image", "two-images"])
def test_the_attention_interior_is_whole_over_the_packed_row(model, images):
    attention = model.vision.layers[0].self_attn
    with model.trace(prompt(model, images), images=images):
        queries = attention.attention_queries.save()
        keys = attention.attention_keys.save()
        values = attention.attention_values.save()
        heads = attention.attention_head_outputs.save()
        projected_in = attention.o_proj.input.save()
    total = sum(patches_per_image(model, images))
    width, head_count = attention._module.qkv.in_features, attention._module.num_heads
    head_dim = width // head_count
    assert queries.shape == keys.shape == values.shape == (1, head_count, total, head_dim)
    assert heads.shape == (1, total, head_count, head_dim)
    assert torch.equal(heads.reshape(total, -1), projected_in)


def test_queries_keys_and_values_are_what_each_image_attends_with(model):
    """The last block attends per image: each kernel call is eager attention over its image's slice, at
    ``cu_seqlens``, of the whole queries, keys and values, and the calls joined are attention_head_outputs."""
    attends_per_image(model, TWO)


def test_editing_head_outputs_reaches_the_block_output(model):
    text = prompt(model, ONE)
    block = model.vision.layers[0]
    with model.trace(text, images=ONE):
        clean = block.layer_output.save()
        clean_logits = model.logits.save()
    bias = block.self_attn.o_proj._module.bias
    with model.trace(text, images=ONE):
        block.self_attn.attention_head_outputs[:] = 0  # in place
        edited_attention = block.attention_output.save()
        edited = block.layer_output.save()
        edited_logits = model.logits.save()
    assert torch.equal(edited_attention, bias.expand_as(edited_attention))  # the projection of zeros
    assert not torch.equal(edited, clean) and not torch.equal(edited_logits, clean_logits)
    with model.trace(text, images=ONE):
        heads = block.self_attn.attention_head_outputs
        block.self_attn.attention_head_outputs = torch.zeros_like(heads)  # assigned whole
        assigned = block.layer_output.save()
    assert torch.equal(assigned, edited)
    with model.trace(text, images=ONE):
        again = block.layer_output.save()
    assert torch.equal(again, clean)  # nothing leaked out of the edited traces


def test_zero_keys_make_each_image_attend_evenly(model):
    """A write to the keys (assigned) and one to the queries (in place) reach every per-image kernel call."""
    attention = model.vision.layers[-1].self_attn
    text = prompt(model, TWO)
    with model.trace(text, images=TWO):
        keys = attention.attention_keys
        attention.attention_keys = torch.zeros_like(keys)
        values = attention.attention_values.save()
        via_keys = attention.attention_head_outputs.save()
    with model.trace(text, images=TWO):
        attention.attention_queries[:] = 0
        via_queries = attention.attention_head_outputs.save()
    assert torch.equal(via_keys, via_queries)  # the scores are exactly zero either way
    start = 0
    for count in patches_per_image(model, TWO):
        mean = values[:, :, start : start + count].mean(dim=2, keepdim=True).transpose(1, 2)
        assert torch.allclose(via_keys[:, start : start + count], mean.expand(1, count, -1, -1), atol=1e-6)
        start += count


def test_a_write_of_the_wrong_shape_is_refused(model):
    attention = model.vision.layers[0].self_attn
    heads, head_dim = attention._module.num_heads, attention._module.head_dim
    shape = re.escape(str((1, heads, sum(patches_per_image(model, ONE)), head_dim)))
    with pytest.raises(ValueError, match=rf"attention_queries takes a tensor of shape {shape}.*got \(1, {heads}, 3, {head_dim}\)"):
        with model.trace(prompt(model, ONE), images=ONE):
            attention.attention_queries = torch.zeros(1, heads, 3, head_dim)
    with pytest.raises(ValueError, match=r"layer_output takes a tensor of shape \(1, "):
        with model.trace(prompt(model, ONE), images=ONE):
            model.vision.layers[0].layer_output = torch.zeros(5, 7)


def test_a_tower_write_reaches_the_next_block(model):
    text = prompt(model, TWO)
    first, second = model.vision.layers[0], model.vision.layers[1]
    with model.trace(text, images=TWO):
        first.layer_output = torch.ones_like(first.layer_output)
        following = second.layer_input.save()
    assert torch.equal(following, torch.ones_like(following))


def test_writing_patch_embeddings_reaches_the_first_block(model):
    text = prompt(model, TWO)
    vision = model.vision
    with model.trace(text, images=TWO):
        clean_patches = vision.patch_embeddings.save()
        clean = vision.layers[0].layer_input.save()
    with model.trace(text, images=TWO):
        vision.patch_embeddings = torch.zeros_like(clean_patches)
        assigned = vision.layers[0].layer_input.save()
    with model.trace(text, images=TWO):
        vision.patch_embeddings[:] = 0  # in place, through the [1, patches, width] view
        in_place = vision.layers[0].layer_input.save()
    assert torch.equal(assigned, in_place) and not torch.equal(assigned, clean)
    if hasattr(vision._module, "pos_embed"):  # Qwen3-VL, Qwen3.5: a learned position embedding is added
        assert torch.allclose(assigned, clean - clean_patches, atol=1e-6)
    else:
        assert torch.equal(assigned, torch.zeros_like(assigned))


def test_projector_values_and_tower_output_in_the_forward_s_order(model):
    """tower_output is served at the tower's output where the tower returns its last stream (after the merger ran:
    projector values first), else at the merger's input (transformers 4.x: before them)."""
    with model.trace(prompt(model, ONE), images=ONE):
        returned = model.model.visual.output.save()
    with model.trace(prompt(model, ONE), images=ONE):
        if hasattr(returned, "last_hidden_state"):
            merged = model.projector.output.save()
            tower = model.vision.tower_output.save()
        else:
            tower = model.vision.tower_output.save()
            merged = model.projector.output.save()
    assert merged.shape[0] * merge_unit(model) == tower.shape[1]


def test_the_merge_and_window_sizes(model):
    visual, image_processor, vision = model._module.model.visual, model.processor.image_processor, model.vision
    assert (vision.patch_size, vision.spatial_merge_size) == (image_processor.patch_size, image_processor.merge_size)
    assert vision.window_size == getattr(visual, "window_size", None)


# -- what is unavailable, and why ------------------------------------------------------------------


def test_only_qwen3_vl_has_deepstack_output(model):
    assert ("deepstack_output" in model.support()) == (model.family.model_type == "qwen3_vl")


def test_sdpa_changes_nothing_and_flash_takes_the_head_outputs(tiny_checkpoint):
    model = StandardizedTransformer(tiny_checkpoint("qwen3_vl"), task="image-text-to-text", attn_implementation="sdpa")
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
        assert "runs 'flash_attention_2': load it with attn_implementation='eager'" in rows["self_attn.attention_probabilities"]
        assert rows["self_attn.attention_queries"] is None
        assert type(attention).attention_queries._location(attention).endswith(".source.attention_interface_1.input")
    finally:
        config._attn_implementation = saved


def test_a_text_only_load_has_no_deepstack_output(tiny_checkpoint):
    model = StandardizedTransformer(tiny_checkpoint("qwen3_vl"))
    with pytest.raises(Unavailable, match=r"task='image-text-to-text'"):
        model.layers[0].deepstack_output


# -- Qwen2.5-VL: window order ------------------------------------------------------------------------


def windows(model, images) -> list[int]:
    """How many attention windows each image has: ceil over merge units of window_size pixels a side."""
    config = model.config.vision_config
    side = config.window_size // config.patch_size // config.spatial_merge_size  # merge units a window side
    merge = config.spatial_merge_size
    return [int(t) * math.ceil(h // merge / side) * math.ceil(w // merge / side) for t, h, w in grid(model, images)]


def test_qwen2_5_vl_blocks_run_in_window_order(load):
    model = load("qwen2_5_vl")
    vision = model.vision
    windowed = vision.layers[0].self_attn  # block 0 attends per window, block 1 per image (fullatt_block_indexes)
    count = sum(windows(model, TWO))
    with model.trace(prompt(model, TWO), images=TWO):
        patches = vision.patch_embeddings.save()
        tower = vision.tower_output.save()
    # its own trace: a release that permutes inline computes the index before the patch embedding, others after
    with model.trace(prompt(model, TWO), images=TWO):
        index = vision.window_index.save()
        block_input = vision.layers[0].layer_input.save()
        cu_seqlens = windowed.inputs[1]["cu_seqlens"].save()
        queries = windowed.attention_queries.save()
        keys = windowed.attention_keys.save()
        values = windowed.attention_values.save()
        heads = windowed.attention_head_outputs.save()
        last = vision.layers[-1].layer_output.save()
        merged = model.projector.output.save()
        features = model.vision.image_features.save()
    units = patches.shape[1] // merge_unit(model)
    assert sorted(index.tolist()) == list(range(units)) and index.tolist() != list(range(units))
    permuted = patches[0].reshape(units, merge_unit(model), -1)[index].reshape(patches.shape)
    assert torch.equal(block_input, permuted)  # the tower's own window index, applied to the embeddings
    assert not torch.equal(block_input, patches)  # noise images: the permutation moved patches
    assert len(cu_seqlens) - 1 == count
    scaling = windowed._module.scaling
    bounds = list(zip(cu_seqlens.tolist(), cu_seqlens.tolist()[1:]))
    per_window = [eager_attention(*(t[:, :, a:b] for t in (queries, keys, values)), scaling) for a, b in bounds]
    assert torch.equal(torch.cat(per_window, dim=1), heads)  # eager attention within each window, in window order
    assert not torch.equal(eager_attention(queries, keys, values, scaling), heads)  # not one attention over all
    assert torch.equal(tower, last)  # window order too
    assert torch.equal(merged[torch.argsort(index)], features)  # merge-block order restored after the merger
    assert not torch.equal(merged, features)


def test_qwen2_5_vl_window_index_is_read_only(load):
    model = load("qwen2_5_vl")
    with pytest.raises(AttributeError, match="window_index is read-only"):
        with model.trace(prompt(model, ONE), images=ONE):
            model.vision.window_index = torch.zeros(4, dtype=torch.long)


def test_without_the_window_rule_window_index_says_why(tiny_checkpoint, monkeypatch):

    without_rule(monkeypatch, "qwen2_5_vl.vision-windows")
    model = StandardizedTransformer(tiny_checkpoint("qwen2_5_vl"), task="image-text-to-text")
    reason = model.vision.support()["window_index"]
    assert reason.startswith("no rewrite rule exposes self_permute_input_for_window_attn_0")
    with pytest.raises(Unavailable, match=r"vision\.window_index is unavailable: no rewrite rule"):
        model.vision.window_index
    assert model.vision.support()["self_attn.attention_queries"] is None


def test_window_index_is_unavailable_on_towers_without_windows(load):
    for name in ("qwen2_vl", "qwen3_vl", "qwen3_5", "qwen3_5_moe"):
        with pytest.raises(Unavailable, match="attends per image, not in windows"):
            load(name).vision.window_index


# -- Qwen3.5: a hybrid text model --------------------------------------------------------------------


def test_qwen3_5_attention_values_exist_only_on_full_attention_blocks(load):
    model = load("qwen3_5")
    kinds = model.config.text_config.layer_types
    full = kinds.index("full_attention")
    linear = kinds.index("linear_attention")
    support = model.support()
    lacking = {i for i, kind in enumerate(kinds) if kind != "full_attention"}
    for name in ("attention_output", "self_attn.attention_queries", "self_attn.attention_probabilities"):
        assert set(support[name]) == lacking, name
        assert all("linear_attn" in reason for reason in support[name].values())
    with pytest.raises(Unavailable, match=rf"layers\[{linear}\]'s token mixer is a gated DeltaNet"):
        model.layers[linear].attention_output
    text = prompt(model, ONE)
    with model.trace(text, images=ONE):
        mixed = nnsight.save([model.layers[linear].layer_input, model.layers[linear].linear_attn.output,
                              model.layers[linear].mlp_output, model.layers[linear].layer_output])
        full_input = model.layers[full].layer_input.save()
        probabilities = model.layers[full].self_attn.attention_probabilities.save()  # inside the attention: first
        attended = nnsight.save([full_input, model.layers[full].attention_output,
                                 model.layers[full].mlp_output, model.layers[full].layer_output])
    for layer_input, mixer, mlp, output in (mixed, attended):
        assert torch.equal(layer_input + mixer + mlp, output)
    length = mixed[0].shape[1]
    assert probabilities.shape == (1, model.config.text_config.num_attention_heads, length, length)
    assert torch.allclose(probabilities.sum(-1), torch.ones(probabilities.shape[:-1]))


# -- the grids (the suites in packed_grids.py; Qwen3.5-MoE's class is in test_qwen3_5_moe.py) ----------------


class TestGridsQwen2VL(QwenUnpositionedGrids):
    """Qwen2-VL: no position table and one window per image, so the first block's input is the patch embeddings in
    raster order."""

    checkpoint = "qwen2_vl"


class TestGridsQwen2_5VL(QwenUnpositionedGrids):
    """Qwen2.5-VL: several windows per image, so the blocks run on the patch embeddings permuted into the tower's
    window order, which the grids undo."""

    checkpoint = "qwen2_5_vl"
    windowed = True

    def test_qwen_window_order_is_the_towers(self, case):
        """The window order, as the grids undo it, is the tower's own ``window_index``: the blocks' rows are the
        patch embeddings' merge units taken in that order."""
        merge = case.model.config.vision_config.spatial_merge_size
        with case.trace():  # its own trace: some releases compute the index before the patch embedding, some after
            window_index = case.model.vision.window_index.save()
        with case.trace():
            embeddings = case.model.vision.patch_embeddings.save()
            entering = case.model.vision.layers[0].layer_input.save()
        units = embeddings[0].reshape(-1, merge * merge, embeddings.shape[-1])
        assert torch.equal(entering[0], units[window_index].reshape(entering.shape[1:]))
        for image in range(2):
            assert torch.equal(case.model.vision.patch_grid(entering, image=image),
                               case.model.vision.patch_grid(embeddings, image=image, of="patch_embeddings"))
            assert not torch.equal(case.model.vision.patch_grid(entering, image=image, of="patch_embeddings"),
                                   case.model.vision.patch_grid(embeddings, image=image, of="patch_embeddings"))

    def test_a_write_inside_the_trace_reaches_the_patch_of_the_window_ordered_stream(self, case):
        """Zeroing image 1's patch (0, 0) on the first block's input, through the grid, inside the trace: the first
        block sees the zero at that patch's row, nowhere else."""
        vision = case.model.vision
        with case.trace():
            entering = vision.layers[0].layer_input
            grid = vision.patch_grid(entering, image=1)
            grid[0, 0] = 0
            vision.place_patch_grid(grid, into=entering, image=1)
            seen = vision.layers[0].input_layernorm.input.save()
        zero_rows = (seen.reshape(-1, seen.shape[-1]) == 0).all(dim=-1).nonzero().squeeze(1)
        assert zero_rows.numel() == 1
        assert bool((vision.patch_grid(seen.reshape(1, -1, seen.shape[-1]), image=1)[0, 0] == 0).all())


class TestGridsQwen3VL(QwenLearnedPositionsGrids):
    """Qwen3-VL: a learned 4 x 4 position table added to the patch embeddings before the first block."""

    checkpoint = "qwen3_vl"


class TestGridsQwen3_5(QwenLearnedPositionsGrids):
    """Qwen3.5: Qwen3-VL's tower, its learned position table with it."""

    checkpoint = "qwen3_5"
