"""StandardizedTransformer on a tiny EXAONE 4.5 checkpoint: what is particular to it, exact.

Every expected number comes from outside the code under test: the stock
processor's ``image_grid_thw``, the modules' own weights and attributes, or a
recomputation from other values read in the same trace. The spec's contracts
run on it in test_vision_contracts.py; this file holds the names, the tower's
window order and its grouped key-value heads (Qwen2.5-VL's tower otherwise),
and the text blocks' norms after their sublayers.
"""

from __future__ import annotations

import math

import torch
from family_inputs import prompt

from envoys.testing import noise_image

ONE = [noise_image(32, 32, seed=0)]
TWO = [noise_image(32, 32, seed=0), noise_image(64, 48, seed=1)]  # 64 wide, 48 high


CHECKPOINT = "exaone4_5"


def grid(model, images) -> torch.Tensor:
    return model.processor(text=[prompt(model, images)], images=images, return_tensors="pt")["image_grid_thw"]


def eager_attention(q, k, v, scaling: float) -> torch.Tensor:
    """One window's attention as transformers' eager kernel computes it, each key-value head shared by its group of
    query heads: [1, heads, n, d] queries, [1, kv_heads, n, d] keys and values in, [1, n, heads, d] out."""
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    weights = torch.softmax(torch.matmul(q, k.transpose(2, 3)) * scaling, dim=-1, dtype=torch.float32).to(q.dtype)
    return torch.matmul(weights, v).transpose(1, 2).contiguous()


def test_the_text_blocks_norm_nothing_before_their_sublayers(model):
    assert not any(hasattr(native, "input_layernorm") for native in model._module.model.language_model.layers)  # EXAONE 4.0
    assert model.vision.window_size == 16 and model.vision.spatial_merge_size == 2


def test_the_tower_runs_in_window_order_with_grouped_key_value_heads(model):
    """Block 0 attends per window (block 1 per image): its queries have 2 heads, its keys and values 1, each window's
    kernel output is eager attention over that window's rows with the key-value head shared; the blocks run on the
    patch embeddings in the tower's window order, and the merger's output is put back in merge-block order."""
    vision, windowed = model.vision, model.vision.layers[0].self_attn
    with model.trace(prompt(model, TWO), images=TWO):
        patches = vision.patch_embeddings.save()
        index = vision.window_index.save()
        block_input = vision.layers[0].layer_input.save()
        cu_seqlens = windowed.inputs[1]["cu_seqlens"].save()
        queries = windowed.attention_queries.save()
        keys = windowed.attention_keys.save()
        values = windowed.attention_values.save()
        heads = windowed.attention_head_outputs.save()
        merged = model.projector.output.save()
        features = model.vision.image_features.save()
    unit = vision.spatial_merge_size**2
    units = patches.shape[1] // unit
    assert torch.equal(block_input, patches[0].reshape(units, unit, -1)[index].reshape(patches.shape))
    assert not torch.equal(block_input, patches)
    side = 16 // 4 // 2  # merge units a window side: window_size px / patch px / merge
    assert len(cu_seqlens) - 1 == sum(math.ceil(h // 2 / side) * math.ceil(w // 2 / side) for _, h, w in grid(model, TWO))
    assert queries.shape == (1, 2, 256, 16) and keys.shape == values.shape == (1, 1, 256, 16)
    bounds = list(zip(cu_seqlens.tolist(), cu_seqlens.tolist()[1:]))
    scaling = windowed._module.scaling
    per_window = [eager_attention(*(t[:, :, a:b] for t in (queries, keys, values)), scaling) for a, b in bounds]
    assert torch.equal(torch.cat(per_window, dim=1), heads)
    assert torch.equal(merged[torch.argsort(index)], features) and not torch.equal(merged, features)


def test_the_grids_follow_the_window_order(model):
    """A block's stream, in window order, and the patch embeddings, in merge-block order, lay the same image's patch
    grid out alike once each is read on its own grid."""
    vision = model.vision
    with model.trace(prompt(model, TWO), images=TWO):
        patches = vision.patch_embeddings.save()
        block_input = vision.layers[0].layer_input.save()
    for image in (0, 1):
        assert torch.equal(vision.patch_grid(block_input, image=image),
                           vision.patch_grid(patches, image=image, of="patch_embeddings"))
    assert vision.patch_grid(patches, image=1, of="patch_embeddings").shape[:2] == (12, 16)


def test_the_text_blocks_add_their_post_normed_sublayers(model):
    """What each sublayer adds is its post-norm's output, not the sublayer's own; and the sublayers read the stream
    itself, no norm before them."""
    block = model.layers[1]
    native = block._module
    with model.trace(prompt(model, ONE), images=ONE):
        stream = block.layer_input.save()
        attention = block.self_attn.output[0].save()
        added = block.attention_output.save()
        mlp = block.mlp.output.save()
        mlp_added = block.mlp_output.save()
        out = block.layer_output.save()
    with torch.no_grad():
        assert torch.equal(added, native.post_attention_layernorm(attention))
        assert torch.equal(mlp_added, native.post_feedforward_layernorm(mlp))
        assert torch.equal(mlp, native.mlp(stream + added))
    assert not torch.equal(added, attention) and torch.equal(stream + added + mlp_added, out)
