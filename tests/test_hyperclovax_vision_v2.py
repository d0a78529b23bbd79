"""HyperCLOVAX Vision v2 on a tiny checkpoint: Qwen2.5-VL's tower with a projector after it, a Peri-LN HyperCLOVAX
text model with MuP scales, exact.

What is particular to it: the merger stays in the tower at its native path and the projector (a linear) runs
after the tower, on the merger's output restored to merge-block order; the text model multiplies the embeddings
by ``embedding_multiplier`` (``layers[0].input[mask] == image_features * embedding_multiplier``, the contract
suite's row says so) and the root the logits by ``logits_scaling``; a text block adds its sublayers' outputs
after ``post_norm1`` and ``post_norm2``, times ``residual_multiplier``, so ``attention_output`` and
``mlp_output`` are served where that is 1 and say why not elsewhere. The Qwen2.5-VL tower's own particulars
(window order, per-window attention) are test_qwen_families.py's; the spec's contracts run on this checkpoint
in test_vision_contracts.py.
"""

from __future__ import annotations

import json

import nnsight
import pytest
import torch

from envoys import StandardizedTransformer, Unavailable
from envoys.testing import chat_prompt, noise_image

TWO = [noise_image(32, 32, seed=0), noise_image(48, 64, seed=1)]  # 32x32, and 48 wide by 64 high


def load(path) -> StandardizedTransformer:
    return StandardizedTransformer(path, task="image-text-to-text", device="cpu", attn_implementation="eager")


@pytest.fixture(scope="module")
def model(tiny_checkpoint):
    return load(tiny_checkpoint("hyperclovax_vision_v2"))


def prompt(model) -> str:
    return chat_prompt(model.processor, len(TWO), "What is in the picture?")


def test_the_merger_stays_in_the_tower_and_the_projector_follows_it(model):
    # vision.merger is the tower's merger, the projector the host's own (the row's native)
    assert isinstance(model.projector._module, torch.nn.Linear)


def test_the_projector_reads_the_mergers_output_in_merge_block_order(model):
    """In forward order: the window index, the last block, the merger's output (window order), the tower's output,
    then the projector, whose input is the merger's output restored to merge-block order, and whose output is what is
    scattered."""
    with model.trace(prompt(model), images=TWO) as tracer:
        window_index = model.vision.window_index.save()
        last = model.vision.layers[-1].layer_output.save()
        merged = model.vision.merger.output.save()
        tower = model.vision.tower_output.save()
        received = model.projector.input.save()
        projected = model.projector.output.save()
        features = model.vision.image_features.save()
        tracer.stop()
    assert torch.equal(tower, last)
    assert torch.equal(received, merged[torch.argsort(window_index)]) and not torch.equal(received, merged)
    assert received.shape == (16 + 48, model.config.vision_config.out_hidden_size)
    assert torch.equal(features, projected) and projected.shape == (16 + 48, model.hidden_size)
    for image in range(len(TWO)):  # the projector's output is on the image tokens' grid, the merger's is not
        grid = model.vision.token_grid(features, image=image)
        assert torch.equal(model.vision.token_grid(projected, image=image, of="projector_output"), grid)


def test_the_text_model_scales_every_embedding_before_its_first_block(model):
    multiplier = model.config.text_config.embedding_multiplier
    with model.trace(prompt(model), images=TWO) as tracer:
        mask = model.vision.image_token_mask.save()
        embeddings = model.token_embeddings.save()
        features = model.vision.image_features.save()
        first = model.layers[0].input.save()
        tracer.stop()
    assert multiplier == 10.0
    assert torch.equal(first[mask], features * multiplier) and not torch.equal(first[mask], features)
    assert torch.equal(first[~mask], embeddings[~mask] * multiplier)


def test_a_block_adds_its_post_norms_outputs(model):
    with model.trace(prompt(model), images=TWO) as tracer:
        read = nnsight.save([])
        for block in model.layers:
            read.append(nnsight.save([
                block.layer_input, block.self_attn.output[0], block.attention_output, block.self_attn.attention_output,
                block.mlp.output, block.mlp_output, block.mlp.mlp_output, block.layer_output,
            ]))
        tracer.stop()
    for index, (entering, attention, added, on_attention, mlp, mlp_added, on_mlp, leaving) in enumerate(read):
        assert torch.equal(entering + added + mlp_added, leaving), index
        assert torch.equal(on_attention, added) and torch.equal(on_mlp, mlp_added), index
        native = model.layers[index]._module
        with torch.no_grad():  # the post-norms of the sublayers' own outputs
            assert torch.equal(added, native.post_norm1(attention)) and torch.equal(mlp_added, native.post_norm2(mlp))
        assert not torch.equal(added, attention) and not torch.equal(mlp_added, mlp), index


def test_writing_attention_output_is_what_the_block_adds(model):
    with model.trace(prompt(model), images=TWO) as tracer:
        block = model.layers[1]
        entering = block.layer_input.save()
        block.attention_output = torch.zeros_like(block.attention_output)
        mlp = block.mlp_output.save()
        leaving = block.layer_output.save()
        tracer.stop()
    assert torch.equal(leaving, entering + mlp)


def test_the_logits_are_the_head_scaled_by_logits_scaling(model):
    scale = model.config.text_config.logits_scaling
    with model.trace(prompt(model), images=TWO) as tracer:
        last = model.layers[-1].layer_output.save()
        head = model.lm_head.output.save()
        logits = model.logits.save()
        tracer.stop()
    assert scale == 0.125 and torch.equal(logits, head * scale)
    assert torch.equal(model.project_on_vocab(last), logits)


def test_a_residual_multiplier_other_than_one_says_why_nothing_is_served_at_the_post_norms(model, tiny_checkpoint,
                                                                                           tmp_path):
    source = tiny_checkpoint("hyperclovax_vision_v2")
    for item in source.iterdir():
        (tmp_path / item.name).write_bytes(item.read_bytes())
    config = json.loads((tmp_path / "config.json").read_text())
    config["text_config"]["residual_multiplier"] = 0.5
    (tmp_path / "config.json").write_text(json.dumps(config))
    scaled = load(tmp_path)
    support = scaled.support()
    for name in ("attention_output", "mlp_output", "self_attn.attention_output", "mlp.mlp_output"):
        assert set(support[name]) == {0, 1}, name
        assert "residual_multiplier (0.5)" in support[name][0] and "post_norm1.output" in support[name][0], name
    with pytest.raises(Unavailable, match=r"layers\[0\]\.attention_output is unavailable: .*residual_multiplier \(0\.5\)"):
        scaled.layers[0].attention_output
    with pytest.raises(Unavailable, match=r"mlp_output is unavailable: .*inside the addition"):
        scaled.layers[1].mlp.mlp_output
    with scaled.trace(prompt(scaled), images=TWO) as tracer:
        entering = scaled.layers[0].layer_input.save()
        attention = scaled.layers[0].post_norm1.output.save()
        mlp = scaled.layers[0].post_norm2.output.save()
        leaving = scaled.layers[0].layer_output.save()
        tracer.stop()
    assert torch.equal((entering + attention * 0.5) + mlp * 0.5, leaving)  # the block's own arithmetic
    assert not torch.equal(entering + attention + mlp, leaving)
