"""StandardizedTransformer on a tiny Muse Glimmer checkpoint: the Muse tower (windows, then whole images, a pixel shuffle)
and a Gemma 2-style sandwich-normed text model.

What is particular to it (the spec's contracts run on it in
test_vision_contracts.py, the tower's output back in raster order among them):
the names land on its modules; the blocks run in window order, patch by patch
(``window_index``), block 0 attending once per window and block 1 once per
image, at ``cu_seqlens``; ``patch_embeddings`` is the linear embedding before
the learned positions; the pixel shuffle, the adapter and the projector's
output normed make ``image_features``; the text attention's heads are gated
after the kernel, and block 1 has no position embedding. Expected numbers come
from the builder's documented config (patch 8, 4x4 patch windows, merge 2), the
processor and the modules themselves, never from the code under test.
"""

from __future__ import annotations

import nnsight
import torch

from envoys.testing import chat_prompt, noise_image

#: 32x32 noise (a 4x4 patch grid: one window, 4 tokens) and 64 wide x 48 high (6 rows of 8 patches: windows of 4x4,
#: 4x4, 2x4, 2x4; 12 tokens).
IMAGES = [noise_image(32, 32, seed=0), noise_image(64, 48, seed=1)]
WINDOWS = [0, 16, 32, 48, 56, 64]
PER_IMAGE = [0, 16, 64]


CHECKPOINT = "muse_glimmer"


def prompt(model) -> str:
    return chat_prompt(model.processor, len(IMAGES), "What is in the picture?")


def eager_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scaling: float) -> torch.Tensor:
    """One window's attention as transformers' eager kernel computes it: [1, heads, n, d] in, [1, n, heads, d] out."""
    weights = torch.softmax(torch.matmul(q, k.transpose(2, 3)) * scaling, dim=-1, dtype=torch.float32).to(q.dtype)
    return torch.matmul(weights, v).transpose(1, 2).contiguous()


def raster_windows(height: int, width: int, side: int) -> list[int]:
    """An image's patches (raster order) listed window by window, windows in raster order, each window's in raster
    order: the window order of a ``height x width`` grid cut into ``side x side`` windows."""
    order = []
    for top in range(0, height, side):
        for left in range(0, width, side):
            order += [r * width + c for r in range(top, min(top + side, height)) for c in range(left, min(left + side, width))]
    return order


def test_the_towers_windows_and_merge(model):
    assert model.vision.window_size == 32 and model.vision.spatial_merge_size == 2 and model.vision.num_heads == 2


def test_the_blocks_run_in_window_order_per_window_then_per_image(model):
    """window_index lists the patches window by window; block 0 receives ln_pre's output in that order and splits
    its attention at the windows, block 1 at the images; each call is eager attention over its slice."""
    first, second = model.vision.layers[0], model.vision.layers[1]
    with model.trace(prompt(model), images=IMAGES) as tracer:
        window = model.vision.window_index.save()
        normed = model.vision.ln_pre.output.save()
        entering = first.layer_input.save()
        windowed = first.self_attn.inputs[1]["cu_seqlens"].save()
        q, k, v = (first.self_attn.attention_queries.save(), first.self_attn.attention_keys.save(),
                   first.self_attn.attention_values.save())
        calls = nnsight.save([])
        for _ in tracer.iter[0:len(WINDOWS) - 1]:
            calls.append(first.self_attn.source.attention_interface_2.output[0].save())
        whole = second.self_attn.inputs[1]["cu_seqlens"].save()
        tracer.stop()
    assert window.tolist() == raster_windows(4, 4, 4) + [16 + i for i in raster_windows(6, 8, 4)]
    assert torch.equal(entering[0], normed[window])
    assert windowed.tolist() == WINDOWS and whole.tolist() == PER_IMAGE
    for (a, b), output in zip(zip(WINDOWS, WINDOWS[1:]), calls):
        assert torch.equal(eager_attention(q[:, :, a:b], k[:, :, a:b], v[:, :, a:b], first.self_attn._module.scaling),
                           output)


def test_patch_embeddings_are_before_the_learned_positions(model):
    embedder = model._module.model.vision_tower.patch_embedder
    inputs = model.processor(text=[prompt(model)], images=IMAGES, return_tensors="pt")
    with model.trace(prompt(model), images=IMAGES) as tracer:
        patches = model.vision.patch_embeddings.save()
        embedded = model.vision.patch_embedder.output.save()
        tracer.stop()
    with torch.no_grad():
        assert torch.equal(patches[0], embedder.patch_embedding(inputs["pixel_values"]))
    assert patches.shape == (1, 64, 32) and not torch.equal(patches[0], embedded)


def test_image_features_are_the_shuffled_tower_output_adapted_projected_and_normed(model):
    """The adapter reads tower_output with each 2x2 block of an image's patches folded into one row (the features
    of the block's 4 patches interleaved: feature f of patch p at f * 4 + p); the projector reads the adapter;
    image_features is the projector's output RMS-normed without a weight."""
    inner = model._module.model
    with model.trace(prompt(model), images=IMAGES) as tracer:
        tower = model.vision.tower_output.save()
        adapted_in = model.model.vision_adapter.input.save()
        adapted = model.model.vision_adapter.output.save()
        received, projected = model.projector.input.save(), model.projector.output.save()
        features = model.vision.image_features.save()
        tracer.stop()
    rows, start = [], 0
    for height, width in ((4, 4), (6, 8)):
        grid = tower[0, start:start + height * width].reshape(height // 2, 2, width // 2, 2, -1)
        blocks = grid.permute(0, 2, 1, 3, 4).reshape(-1, 4, tower.shape[-1])  # raster order of blocks, patches
        rows.append(blocks.transpose(1, 2).reshape(blocks.shape[0], -1))
        start += height * width
    assert torch.equal(adapted_in, torch.cat(rows)) and adapted_in.shape == (16, 128)
    assert torch.equal(received, adapted) and projected.shape == (16, 32)
    with torch.no_grad():
        assert torch.equal(features, inner.perception_emb_norm(projected)) and not torch.equal(features, projected)


def test_the_text_attention_gates_its_heads_and_block_1_has_no_rope(model):
    attention = model.layers[0].self_attn
    with model.trace(prompt(model), images=IMAGES) as tracer:
        received = attention.inputs[1]["hidden_states"].save()
        heads = attention.attention_head_outputs.save()
        projected_in = attention.o_proj.input.save()
        full = model.layers[1].self_attn.inputs[1]["position_embeddings"].save()
        tracer.stop()
    gate = torch.sigmoid(attention._module.gate_proj(received))
    with torch.no_grad():
        assert torch.equal(projected_in, heads.reshape(*heads.shape[:2], -1) * gate)
    assert model.config.get_text_config().layer_rope_theta == [10_000.0, 0] and full is None


def test_the_grids_place_raster_values_window_ordered_blocks_and_image_tokens(model):
    """patch_grid of the blocks' stream (window order) and of tower_output (raster, of="patch_embeddings") put each
    patch where it is: the stream entering block 0 is ln_pre's output reordered, so both grids of ln_pre's output and
    of that stream agree cell by cell; token_grid puts image token (a, b) over the 2x2 block of patches it folds."""
    vision = model.vision
    with model.trace(prompt(model), images=IMAGES) as tracer:
        normed = vision.ln_pre.output.save()
        entering = vision.layers[0].layer_input.save()
        tower = vision.tower_output.save()
        adapted_in = model.model.vision_adapter.input.save()
        tracer.stop()
    for image, (height, width) in enumerate(((4, 4), (6, 8))):
        start = 0 if image == 0 else 16
        raster = vision.patch_grid(normed[None], image=image, of="patch_embeddings")
        assert raster.shape == (height, width, 32)
        assert torch.equal(raster, normed[start:start + height * width].reshape(height, width, 32))
        assert torch.equal(vision.patch_grid(entering, image=image), raster)
        patches = vision.patch_grid(tower, image=image, of="patch_embeddings")
        tokens = vision.token_grid(adapted_in, image=image)
        assert tokens.shape == (height // 2, width // 2, 128)
        for a in range(height // 2):
            for b in range(width // 2):
                block = patches[2 * a:2 * a + 2, 2 * b:2 * b + 2].reshape(4, 32)
                assert torch.equal(tokens[a, b], block.T.reshape(-1))
