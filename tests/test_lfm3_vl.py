"""LFM3-VL: what is particular to it, beyond the vision contracts (tests/test_vision_contracts.py).

The tower is packed like the Qwen ViT's, its blocks a hybrid: block 0 attends
once per image (split at ``cu_seqlens``), block 1 is a gated 2D convolution
over each image's grid, whose attention values are Unavailable naming it. The
projector, outside the tower, folds each 2x2 merge block (4 consecutive
patches) into one image token. The text model is LFM3's: convolution and
attention blocks, sandwich-normed, the attention gated per head after the
kernel. Expected numbers come from the builder's documentation
(envoys/testing/lfm3_vl.py), the stock processor's ``image_grid_thw`` and
``pixel_values``, and the modules' own weights.
"""

from __future__ import annotations

import pytest

pytest.importorskip("transformers.models.lfm3_vl", reason="target absent: this transformers release has no lfm3_vl")
import nnsight
import torch

from envoys import Unavailable
from envoys.testing import chat_prompt, noise_image

TWO = [noise_image(32, 32, seed=0), noise_image(64, 48, seed=1)]  # 64 wide, 48 high: a 6x8 patch grid
#: The builder's grids, in patches (t, h, w), and image tokens.
GRIDS, TOKENS, MERGE = [[1, 4, 4], [1, 6, 8]], [4, 12], 2


CHECKPOINT = "lfm3_vl"


def prompt(model) -> str:
    return chat_prompt(model.processor, len(TWO), "What is in the picture?")


def processed(model) -> dict:
    return model.processor(text=[prompt(model)], images=TWO, return_tensors="pt")


def test_the_processors_grids_are_the_builders(model):
    assert model.processor(text=[prompt(model)], images=TWO)["image_grid_thw"].tolist() == GRIDS


def test_the_patch_embedding_is_normed_before_the_first_block(model):
    inputs = processed(model)
    with model.trace(prompt(model), images=TWO) as tracer:
        patches = model.vision.patch_embeddings.save()
        first = model.vision.layers[0].layer_input.save()
        tracer.stop()
    assert patches.shape == (1, sum(t * h * w for t, h, w in GRIDS), model.vision.vision_hidden_size)
    with torch.no_grad():
        assert torch.equal(patches[0], model.vision.patch_embed._module(inputs["pixel_values"]))
        assert torch.equal(first, model.vision.embedding_norm._module(patches))


# -- the tower's hybrid blocks ---------------------------------------------------------------------------------


def test_a_convolution_block_has_no_attention_values_and_says_what_it_adds(model):
    block = model.vision.layers[1]
    reason = (r"vision\.layers\[1\]'s token mixer is a gated 2D convolution over each image's patch grid, conv, not "
              r"softmax attention.*what it adds to the stream is vision\.layers\[1\]\.conv\.output")
    with pytest.raises(Unavailable, match=rf"vision\.layers\[1\]\.attention_output is unavailable: {reason}"):
        block.attention_output
    support = model.vision.support(layer=1)
    for value in ("attention_output", "self_attn.attention_queries", "self_attn.attention_probabilities"):
        assert support[value] is not None and "conv" in support[value], value
    assert support["mlp_output"] is None and support["layer_output"] is None
    assert model.vision.support(layer=0)["attention_output"] is None


def test_the_attention_runs_once_per_image_on_the_whole_queries_and_keys(model):
    attention = model.vision.layers[0].self_attn
    native = attention._module
    with model.trace(prompt(model), images=TWO) as tracer:
        queries = attention.attention_queries.save()
        keys = attention.attention_keys.save()
        values = attention.attention_values.save()
        heads = attention.attention_head_outputs.save()
        tracer.stop()
    patches = sum(t * h * w for t, h, w in GRIDS)
    assert queries.shape == (1, model.vision.num_heads, patches, model.vision.head_dim)
    assert keys.shape == values.shape == (1, native.num_key_value_heads, patches, model.vision.head_dim)
    groups = native.num_key_value_groups
    lengths = [t * h * w for t, h, w in GRIDS]
    joined = []
    for q, k, v in zip(*(torch.split(tensor, lengths, dim=2) for tensor in (queries, keys, values))):
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        weights = torch.softmax(torch.matmul(q, k.transpose(2, 3)) * native.scaling, dim=-1, dtype=torch.float32)
        joined.append(torch.matmul(weights, v).transpose(1, 2).contiguous())
    assert torch.equal(torch.cat(joined, dim=1), heads)


# -- the projector's merge blocks ------------------------------------------------------------------------------


def test_each_image_token_is_one_merge_block_of_four_consecutive_patches(model):
    """An edit of patches 4j..4j+3 of tower_output changes image token j alone; patch_grid and token_grid agree."""
    text = prompt(model)
    with model.trace(text, images=TWO) as tracer:
        clean = model.vision.image_features.save()
        tracer.stop()
    token = TOKENS[0] + 5  # image 1's token (row 1, column 1) of its 3x4 merged grid
    with model.trace(text, images=TWO) as tracer:
        model.vision.tower_output[:, 4 * token:4 * token + 4] = 0
        tower = model.vision.tower_output.save()
        edited = model.vision.image_features.save()
        tracer.stop()
    changed = (edited != clean).any(-1)
    assert changed.nonzero().flatten().tolist() == [token]
    cells = model.vision.patch_grid(tower, image=1)
    assert cells.shape[:2] == (6, 8) and torch.equal(cells[2:4, 2:4], torch.zeros_like(cells[2:4, 2:4]))
    assert model.vision.token_grid(changed, image=1).nonzero().tolist() == [[1, 1]]


# -- the text model: sandwich norms, the convolution, the gate ---------------------------------------------------


def test_each_text_sublayer_adds_its_output_after_its_post_norm(model):
    with model.trace(prompt(model), images=TWO) as tracer:
        conv = model.layers[0].conv.output.save()
        added = model.layers[0].attention_output_norm.output.save()
        attention = model.layers[1].self_attn.output[0].save()
        attention_output = model.layers[1].attention_output.save()
        mlp = model.layers[1].mlp.output.save()
        mlp_output = model.layers[1].mlp_output.save()
        tracer.stop()
    layers = model.layers
    with torch.no_grad():
        assert torch.equal(added, layers[0].attention_output_norm._module(conv))
        assert torch.equal(attention_output, layers[1].attention_output_norm._module(attention))
        assert torch.equal(mlp_output, layers[1].mlp_output_norm._module(mlp))
    assert not torch.equal(attention_output, attention) and not torch.equal(mlp_output, mlp)
    reason = (r"layers\[0\]\.attention_output is unavailable: layers\[0\]'s token mixer is a gated short convolution, "
              r"conv, not softmax attention.*layers\[0\]\.post_operator_norm\.output, conv's output after "
              r"post_operator_norm")
    with pytest.raises(Unavailable, match=reason):
        layers[0].attention_output


def test_the_head_outputs_are_before_the_attentions_output_gate(model):
    attention = model.layers[2].self_attn
    with model.trace(prompt(model), images=TWO) as tracer:
        received = attention.inputs[1]["hidden_states"].save()
        heads = attention.attention_head_outputs.save()
        projected = attention.o_proj.input.save()
        tracer.stop()
    with torch.no_grad():
        gate = torch.sigmoid(attention._module.g_proj(received)).unsqueeze(-1)
    assert heads.shape == (*received.shape[:2], model.num_heads, model.head_dim)
    assert torch.equal(projected, (heads * gate).reshape(projected.shape))
    assert not torch.equal(projected, heads.reshape(projected.shape))


def test_the_sliding_window_block_attends_within_its_window(model):
    window = model.config.text_config.sliding_window
    with model.trace(prompt(model), images=TWO) as tracer:
        patterns = nnsight.save([model.layers[1].self_attn.attention_probabilities,
                                 model.layers[2].self_attn.attention_probabilities])
        tracer.stop()
    sliding, full = patterns
    positions = torch.arange(sliding.shape[-1])
    distance = positions[:, None] - positions[None, :]
    assert torch.equal(sliding[..., distance >= window], torch.zeros_like(sliding[..., distance >= window]))
    assert bool((full[..., (distance >= window)] > 0).all())
