"""Qwen3-VL's DeepStack on a tiny checkpoint: ``layers[k].deepstack_output``, pinned to the k-th call, exact.

The tiny tower taps blocks 0 and 1 (two taps) and the text model has four
blocks, so blocks 0 and 1 receive a feature and blocks 2 and 3 are past the
taps. What each block receives is checked against the tower's own deepstack
mergers (``vision.deepstack_merger_list[k]``, native path) and against the
stream around the block. That the stream entering block k + 1 is block k's
output plus what is added at the image tokens (and block k's output alone past
the taps) is a vision contract, checked in test_vision_contracts.py.
"""

from __future__ import annotations

import nnsight
import pytest
import torch
from family_inputs import prompt
from swap_rules import without_rule

from envoys import StandardizedTransformer, Unavailable
from envoys.testing import noise_image

ONE = [noise_image(32, 32, seed=0)]
TWO = [noise_image(32, 32, seed=0), noise_image(48, 64, seed=1)]


CHECKPOINT = "qwen3_vl"


def taps(model) -> int:
    return len(model._module.model.visual.deepstack_merger_list)


def test_the_checkpoint_has_blocks_past_the_taps(model):
    assert 0 < taps(model) < model.num_layers - 1


@pytest.mark.parametrize("images", [ONE, TWO], ids=["one-image", "two-images"])
def test_each_tapped_block_receives_its_own_mergers_output(model, images):
    """What each block past a tap receives (how it enters the stream is the vision contracts' text stream check):
    tap k merged by its own merger, so the taps differ."""
    count = taps(model)
    with model.trace(prompt(model, images), images=images):
        merged = nnsight.save([model.vision.deepstack_merger_list[k].output for k in range(count)])
        added = nnsight.save([model.layers[k].deepstack_output for k in range(count)])
    for k in range(count):
        assert torch.equal(added[k], merged[k]), k
    assert not torch.equal(added[0], added[1])


def test_a_read_of_block_k_means_the_kth_call(model):
    text = prompt(model, TWO)
    with model.trace(text, images=TWO):
        mask = model.vision.image_token_mask.save()
        merged = nnsight.save([model.vision.deepstack_merger_list[k].output for k in range(taps(model))])
        block = nnsight.save(model.layers[1].layer_output.clone())  # a copy: 4.57 adds the tap to it in place
        second = model.layers[1].deepstack_output.save()  # alone: the second call, not the next one reached
        after = model.layers[2].input.save()  # a plain read after it is not pinned
    assert torch.equal(second, merged[1]) and not torch.equal(second, merged[0])
    assert torch.equal(after[mask], block[mask] + second)


def test_writes_reach_the_next_block_and_only_there(model):
    text = prompt(model, TWO)
    with model.trace(text, images=TWO):
        clean_inputs = nnsight.save([model.layers[k].input for k in range(3)])
        clean = model.logits.save()
    with model.trace(text, images=TWO):
        mask = model.vision.image_token_mask.save()
        first_out = model.layers[0].layer_output.save()
        model.layers[0].deepstack_output = torch.zeros_like(model.layers[0].deepstack_output)  # assigned
        second_in = model.layers[1].input.save()
        second_out = model.layers[1].layer_output.save()
        model.layers[1].deepstack_output[:] = 0  # in place
        third_in = model.layers[2].input.save()
        ablated = model.logits.save()
    assert torch.equal(second_in, first_out)  # the feature is gone from the next block's input
    assert torch.equal(third_in, second_out)
    assert not torch.equal(ablated, clean)
    assert not torch.equal(second_in[mask], clean_inputs[1][mask])

    with model.trace(text, images=TWO):  # the second tap alone: block 1's input is as it was
        second_in = model.layers[1].input.save()
        second_out = model.layers[1].layer_output.save()
        model.layers[1].deepstack_output = torch.zeros_like(model.layers[1].deepstack_output)
        third_in = model.layers[2].input.save()
    assert torch.equal(second_in, clean_inputs[1])
    assert torch.equal(third_in, second_out) and not torch.equal(third_in[mask], clean_inputs[2][mask])

    with model.trace(text, images=TWO):
        again = model.logits.save()
    assert torch.equal(again, clean)


def test_a_write_of_the_wrong_shape_is_refused(model):
    grid = model.processor(text=[prompt(model, ONE)], images=ONE, return_tensors="pt")["image_grid_thw"]
    tokens = int(grid.prod()) // model.processor.image_processor.merge_size**2
    shape = rf"\({tokens}, {model.hidden_size}\)"
    with pytest.raises(ValueError, match=rf"deepstack_output takes a tensor of shape {shape}.*got \(3, 32\)"):
        with model.trace(prompt(model, ONE), images=ONE):
            model.layers[1].deepstack_output = torch.zeros(3, 32)


def test_blocks_past_the_taps_say_why(model):
    support = model.support()["deepstack_output"]
    past = set(range(taps(model), model.num_layers))
    assert set(support) == past
    for k in past:
        assert "past the taps" in support[k] and "deepstack_visual_indexes" in support[k]
        with pytest.raises(Unavailable, match=rf"layers\[{k}\]\.deepstack_output is unavailable: .*past the taps"):
            model.layers[k].deepstack_output
    assert "layers[3].input == layers[2].layer_output" in support[2]


def test_the_mergers_keep_their_native_path(model):
    visual = model._module.model.visual
    assert [m._module for m in model.vision.deepstack_merger_list] == list(visual.deepstack_merger_list)


def test_generation_adds_the_features_on_the_prompt_pass_only(model):
    text = prompt(model, ONE)
    with model.trace(text, images=ONE):
        traced = model.layers[1].deepstack_output.save()
    steps = 3
    with model.generate(text, images=ONE, max_new_tokens=steps, min_new_tokens=steps, do_sample=False) as tracer:
        added = nnsight.save([])
        for step in tracer.iter[:]:
            if step == 0:
                added.append(model.layers[0].deepstack_output.save())
                added.append(model.layers[1].deepstack_output.save())
            logits = model.logits.save()
    assert len(added) == 2 and torch.equal(added[1], traced) and not torch.equal(added[0], added[1])
    assert logits.shape[1] == 1  # the last decode step ran, with nothing added

    with model.generate(text, images=ONE, max_new_tokens=steps, min_new_tokens=steps, do_sample=False) as tracer:
        later = nnsight.save([])
        for _ in tracer.iter[1:]:
            later.append(model.layers[0].deepstack_output.save())  # pinned to the first call, on step 0
    assert later == []


def test_a_drifted_deepstack_rule_is_a_reason_not_a_crash(tiny_checkpoint, monkeypatch):
    from instrument import Rule

    drifted = Rule(
        "qwen3_vl.deepstack",
        "transformers.models.qwen3_vl.modeling_qwen3_vl:Qwen3VLTextModel.forward",
        {"self._deepstack_process": ("self__deepstack_process_3",)},
    )
    without_rule(monkeypatch, "qwen3_vl.deepstack", drifted)
    model = StandardizedTransformer(tiny_checkpoint("qwen3_vl"), task="image-text-to-text")
    reasons = model.support()["deepstack_output"]
    assert set(reasons) == set(range(model.num_layers))
    assert "rule 'qwen3_vl.deepstack'" in reasons[0] and "found ['self__deepstack_process_0']" in reasons[0]
    assert "past the taps" in reasons[3]
    with pytest.raises(Unavailable, match=r"layers\[0\]\.deepstack_output is unavailable: rule 'qwen3_vl.deepstack'"):
        model.layers[0].deepstack_output
    with model.trace(prompt(model, ONE), images=ONE):  # the rest still works
        mask = model.vision.image_token_mask.save()
        features = model.vision.image_features.save()
        first = model.layers[0].input.save()
    assert torch.equal(first[mask], features)


def test_values_still_work_after_a_user_opens_nnsights_source(tiny_checkpoint):
    """nnsight's own instrumented bodies name the same calls, so the pinned values are served the same."""
    model = StandardizedTransformer(tiny_checkpoint("qwen3_vl"), task="image-text-to-text", attn_implementation="eager")
    text = prompt(model, TWO)
    attention = model.vision.layers[0].self_attn
    with model.trace(text, images=TWO):
        keys = attention.attention_keys.save()
        second = model.layers[1].deepstack_output.save()
    listing = str(attention.source) + str(model.model.language_model.source)
    assert "torch_split_0" in listing and "self__deepstack_process_0" in listing
    with model.trace(text, images=TWO):
        keys_again = attention.attention_keys.save()
        values = attention.attention_values.save()
        second_again = model.layers[1].deepstack_output.save()
    assert torch.equal(keys_again, keys) and not torch.equal(values, keys)
    assert torch.equal(second_again, second)
