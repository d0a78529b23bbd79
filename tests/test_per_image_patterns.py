"""The pattern of a tower that calls its attention kernel once per image (or window): whole, per call, writable.

On the Qwen ViT (Qwen3-VL; Qwen2.5-VL's windowed blocks) and RADIO
(Nemotron-H Omni), under eager attention, ``attention_scores`` and
``attention_probabilities`` are one ``[1, heads, rows, rows]`` tensor, each
kernel call's pattern a diagonal block. Every expected number is computed here
from other values of the same trace: the attention's own ``cu_seqlens`` (its
input), the served whole queries and keys, and the module's scaling, with the
arithmetic transformers' eager kernel does. The contract suite checks the same
block identity on every tower of this kind (test_vision_contracts.py).
"""

from __future__ import annotations

import re

import nnsight
import pytest
import torch
from nnsight.intervention.interleaver import OutOfOrderError

from envoys import StandardizedTransformer, Unavailable
from envoys.testing import chat_prompt, noise_image

ONE = [noise_image(32, 32, seed=0)]
TWO = [noise_image(32, 32, seed=0), noise_image(48, 64, seed=1)]
FAMILIES = ["qwen3_vl", "qwen2_5_vl", "nemotron_h_omni"]


@pytest.fixture(scope="module")
def load(tiny_checkpoint):
    loaded: dict[tuple[str, str], StandardizedTransformer] = {}

    def get(name: str, implementation: str = "eager") -> StandardizedTransformer:
        if (name, implementation) not in loaded:
            loaded[name, implementation] = StandardizedTransformer(
                tiny_checkpoint(name), task="image-text-to-text", attn_implementation=implementation, dispatch=True)
        return loaded[name, implementation]

    return get


@pytest.fixture(scope="module", params=FAMILIES)
def model(request, load):
    return load(request.param)


@pytest.fixture(scope="module")
def qwen(load):
    return load("qwen3_vl")


def prompt(model, images) -> str:
    return chat_prompt(model.processor, len(images), "What is in the picture?")


def bounds_of(cu_seqlens, rows: int) -> list[int]:
    """The calls' bounds: the attention's ``cu_seqlens``, or one call over every row where it has none (RADIO, one image)."""
    return [0, rows] if cu_seqlens is None else [int(bound) for bound in cu_seqlens]


def read_block(model, images, layer: int):
    """In forward order: the attention's cu_seqlens (its input), the whole queries and keys, scores, probabilities."""
    attention = model.vision.layers[layer].self_attn
    with torch.no_grad(), model.trace(prompt(model, images), images=images) as tracer:
        cu_seqlens = nnsight.save(attention.inputs[1].get("cu_seqlens"))
        queries = attention.attention_queries.save()
        keys = attention.attention_keys.save()
        scores = attention.attention_scores.save()
        probabilities = attention.attention_probabilities.save()
        tracer.stop()
    return cu_seqlens, queries, keys, scores, probabilities


@pytest.mark.parametrize("images", [ONE, TWO], ids=["one image", "two images"])
@pytest.mark.parametrize("layer", [0, -1])
def test_each_call_s_pattern_is_its_diagonal_block_and_nothing_is_between(model, images, layer):
    cu_seqlens, queries, keys, scores, probabilities = read_block(model, images, layer)
    rows, heads = queries.shape[2], queries.shape[1]
    bounds = bounds_of(cu_seqlens, rows)
    scaling = model.vision.layers[layer].self_attn._module.scaling
    assert scores.shape == probabilities.shape == (1, heads, rows, rows)
    inside = torch.zeros(rows, rows, dtype=torch.bool)
    for start, stop in zip(bounds, bounds[1:]):
        inside[start:stop, start:stop] = True
        q, k = queries[..., start:stop, :], keys[..., start:stop, :]
        expected = torch.matmul(q, k.transpose(2, 3)) * scaling  # transformers' eager kernel, on this call's rows
        assert torch.equal(scores[..., start:stop, start:stop], expected)
        softmax = torch.softmax(expected, dim=-1, dtype=torch.float32).to(q.dtype)
        assert torch.equal(probabilities[..., start:stop, start:stop], softmax)
    assert torch.equal(probabilities[..., ~inside], torch.zeros_like(probabilities[..., ~inside]))
    assert bool((scores[..., ~inside] == torch.finfo(scores.dtype).min).all())
    # the whole scores are a block-diagonal mask's: their softmax, row by row, is the whole (a longer sum's rounding)
    torch.testing.assert_close(torch.softmax(scores, dim=-1), probabilities.as_subclass(torch.Tensor), rtol=0, atol=1e-6)


def test_windowed_blocks_attend_per_window(load):
    """Qwen2.5-VL's windowed blocks call the kernel once per window, in window order: more blocks than images."""
    model = load("qwen2_5_vl")
    full = model._module.config.vision_config.fullatt_block_indexes
    windowed = next(index for index in range(model.vision.num_layers) if index not in full)
    cu_seqlens, _, _, _, probabilities = read_block(model, TWO, windowed)
    assert len(cu_seqlens) - 1 > len(TWO)
    assert probabilities.shape[-1] == int(cu_seqlens[-1])


def test_each_kernel_call_alone_is_its_block(model):
    attention = model.vision.layers[0].self_attn
    with torch.no_grad(), model.trace(prompt(model, TWO), images=TWO) as tracer:
        cu_seqlens = attention.inputs[1]["cu_seqlens"].save()
        calls = nnsight.save([])
        for call in range(len(TWO)):  # one call per image: these blocks are not windowed
            own = attention.kernel_calls[call]
            calls.append([own.attention_queries, own.attention_keys, own.attention_values,
                                       own.attention_scores, own.attention_probabilities, own.attention_head_outputs])
        tracer.stop()
    _, queries, keys, scores, probabilities = read_block(model, TWO, 0)
    bounds = bounds_of(cu_seqlens, queries.shape[2])
    for (start, stop), (q, k, v, s, p, out) in zip(zip(bounds, bounds[1:]), calls):
        assert torch.equal(q, queries[..., start:stop, :]) and torch.equal(k, keys[..., start:stop, :])
        assert torch.equal(s, scores[..., start:stop, start:stop])
        assert torch.equal(p, probabilities[..., start:stop, start:stop])
        assert p.shape == (1, queries.shape[1], stop - start, stop - start)
        assert torch.equal(out, torch.matmul(p, v).transpose(1, 2))  # what the call makes of its probabilities


def logits_after(model, images, write) -> torch.Tensor:
    with torch.no_grad(), model.trace(prompt(model, images), images=images):
        write(model.vision.layers[0].self_attn)
        logits = model.logits.save()
    return logits


def uniform_within_calls(probabilities: torch.Tensor, bounds: list[int]) -> torch.Tensor:
    """Each call's rows attending evenly over its own rows, nothing between calls."""
    written = torch.zeros_like(probabilities)
    for start, stop in zip(bounds, bounds[1:]):
        written[..., start:stop, start:stop] = 1.0 / (stop - start)
    return written


def test_assigning_the_whole_pattern_is_each_call_taking_its_block(model):
    cu_seqlens, queries, _, _, probabilities = read_block(model, TWO, 0)
    bounds = bounds_of(cu_seqlens, queries.shape[2])
    written = uniform_within_calls(probabilities, bounds)
    clean = logits_after(model, TWO, lambda attention: None)

    def whole(attention):
        attention.attention_probabilities = written

    def call_by_call(attention):
        for call, (start, stop) in enumerate(zip(bounds, bounds[1:])):
            attention.kernel_calls[call].attention_probabilities = written[..., start:stop, start:stop].clone()

    def in_place(attention):
        for call, (start, stop) in enumerate(zip(bounds, bounds[1:])):
            attention.kernel_calls[call].attention_probabilities[:] = written[..., start:stop, start:stop]

    by_whole = logits_after(model, TWO, whole)
    assert not torch.equal(by_whole, clean)
    assert torch.equal(by_whole, logits_after(model, TWO, call_by_call))
    assert torch.equal(by_whole, logits_after(model, TWO, in_place))


def test_the_calls_use_a_written_pattern(qwen):
    cu_seqlens, queries, _, _, probabilities = read_block(qwen, TWO, 0)
    bounds = bounds_of(cu_seqlens, queries.shape[2])
    written = uniform_within_calls(probabilities, bounds)
    attention = qwen.vision.layers[0].self_attn
    with torch.no_grad(), qwen.trace(prompt(qwen, TWO), images=TWO) as tracer:
        values = attention.attention_values.save()
        attention.attention_probabilities = written
        outputs = attention.attention_head_outputs.save()
        tracer.stop()
    for start, stop in zip(bounds, bounds[1:]):
        expected = torch.matmul(written[..., start:stop, start:stop], values[..., start:stop, :]).transpose(1, 2)
        assert torch.equal(outputs[:, start:stop], expected)


def test_written_scores_reach_the_softmax(qwen):
    cu_seqlens, queries, _, scores, _ = read_block(qwen, TWO, 0)
    bounds = bounds_of(cu_seqlens, queries.shape[2])
    flat = torch.where(scores == torch.finfo(scores.dtype).min, scores, torch.zeros_like(scores))
    attention = qwen.vision.layers[0].self_attn
    with torch.no_grad(), qwen.trace(prompt(qwen, TWO), images=TWO) as tracer:
        attention.attention_scores = flat
        probabilities = attention.attention_probabilities.save()
        tracer.stop()
    assert torch.equal(probabilities, torch.softmax(flat, dim=-1))
    start, stop = bounds[0], bounds[1]
    assert torch.equal(probabilities[..., start:stop, start:stop],
                       torch.full_like(probabilities[..., start:stop, start:stop], 1.0 / (stop - start)))


def refused(model, images, write, error, message) -> None:
    """``write`` raises ``error`` matching ``message`` inside a trace, and the next trace is the clean one."""
    clean = logits_after(model, images, lambda attention: None)
    with pytest.raises(error, match=message):
        logits_after(model, images, write)
    assert torch.equal(logits_after(model, images, lambda attention: None), clean)


def test_a_write_that_puts_probability_between_calls_is_refused_before_any_call_takes_it(qwen):
    cu_seqlens, queries, _, scores, probabilities = read_block(qwen, TWO, 0)
    rows = queries.shape[2]
    lengths = ", ".join(str(b - a) for a, b in zip(cu_seqlens.tolist(), cu_seqlens.tolist()[1:]))

    def leaking(attention):
        attention.attention_probabilities = torch.full_like(probabilities, 1.0 / rows)

    refused(qwen, TWO, leaking, ValueError, re.escape(
        f"vision.layers[0].self_attn.attention_probabilities is block-diagonal, one block per kernel call ({lengths} "
        f"rows): a written value holds 0 between the blocks (no kernel call attends from one image or window to "
        f"another); edit the blocks alone (nothing was written)"))

    def scoring_between(attention):
        attention.attention_scores = torch.zeros_like(scores)

    refused(qwen, TWO, scoring_between, ValueError, "a higher score there would put probability where no kernel call")


def test_a_write_of_the_wrong_shape_or_kind_is_refused(qwen):
    _, queries, _, _, probabilities = read_block(qwen, TWO, 0)
    rows = queries.shape[2]

    def short(attention):
        attention.attention_probabilities = probabilities[..., :-1]

    refused(qwen, TWO, short, ValueError, re.escape(
        f"vision.layers[0].self_attn.attention_probabilities takes a tensor of shape (1, heads, {rows}, {rows})"))

    def halved_heads(attention):
        attention.attention_probabilities = probabilities[:, :1]

    refused(qwen, TWO, halved_heads, ValueError, re.escape(
        f"takes a tensor of shape (1, {queries.shape[1]}, {rows}, {rows}); got (1, 1, {rows}, {rows})"))

    def doubled(attention):
        attention.attention_probabilities = probabilities.double()

    refused(qwen, TWO, doubled, TypeError, "takes a tensor of dtype torch.float32; got torch.float64")

    def listed(attention):
        attention.attention_probabilities = probabilities.tolist()

    refused(qwen, TWO, listed, TypeError, "takes a tensor, \\[1, heads, rows, rows\\]; got list")


def test_the_assembled_whole_refuses_an_edit_and_says_what_to_do(qwen):
    label = "vision.layers[0].self_attn.attention_probabilities"
    with pytest.raises(AttributeError, match=re.escape(
            f"{label} is read-only as read: it is assembled from the patterns of the 2 kernel calls after the last of "
            f"them ran, so an edit to it would change nothing the model uses; edit a call's own block in place "
            f"(vision.layers[0].self_attn.kernel_calls[k].attention_probabilities), or assign the whole before the "
            f"calls run ({label} = new_value)")):
        logits_after(qwen, TWO, lambda attention: attention.attention_probabilities.zero_())


def test_writing_after_reading_past_the_calls_says_so(qwen):
    def read_then_write(attention):
        pattern = attention.attention_probabilities
        attention.attention_probabilities = pattern * 1

    with pytest.raises(OutOfOrderError, match="kernel call 0's softmax\\) was requested but the model already ran "
                                              "past it; the whole pattern and each kernel call's values are read"):
        logits_after(qwen, TWO, read_then_write)


def test_one_call_s_pattern_is_the_model_s_own_tensor(qwen):
    """One image, one call: the whole is that call's tensor, and an edit in place reaches the model."""
    attention = qwen.vision.layers[0].self_attn
    with torch.no_grad(), qwen.trace(prompt(qwen, ONE), images=ONE) as tracer:
        values = attention.attention_values.save()
        probabilities = attention.attention_probabilities
        probabilities[:] = 1.0 / probabilities.shape[-1]
        outputs = attention.attention_head_outputs.save()
        tracer.stop()
    rows = values.shape[2]
    evenly = torch.full((1, values.shape[1], rows, rows), 1.0 / rows)
    assert torch.equal(outputs, torch.matmul(evenly, values).transpose(1, 2))


def test_scores_then_probabilities_in_one_trace_read_both(qwen):
    """Reading the whole scores goes past each call's probabilities but the last; they are kept for the read after."""
    _, _, _, scores, probabilities = read_block(qwen, TWO, 0)
    attention = qwen.vision.layers[0].self_attn
    with torch.no_grad(), qwen.trace(prompt(qwen, TWO), images=TWO) as tracer:
        again = nnsight.save([attention.attention_probabilities, attention.attention_scores])
        tracer.stop()
    assert torch.equal(again[0], probabilities) and torch.equal(again[1], scores)


def test_a_call_past_the_last_and_iteration_are_refused(qwen):
    with pytest.raises(IndexError, match=re.escape(
            "vision.layers[0].self_attn.kernel_calls[2]: this forward of vision.layers[0].self_attn makes 2 kernel "
            "call(s) (0 to 1), one per image, frame or window; got 2")):
        logits_after(qwen, TWO, lambda attention: attention.kernel_calls[2].attention_probabilities.save())
    with pytest.raises(TypeError, match="kernel_calls is indexed, not iterated"):
        list(qwen.vision.layers[0].self_attn.kernel_calls)
    with pytest.raises(TypeError, match="takes a call's index \\(an int\\); got '0'"):
        qwen.vision.layers[0].self_attn.kernel_calls["0"]


def test_other_implementations_say_to_load_eager(load):
    sdpa = load("qwen3_vl", "sdpa")
    reason = "the scores and probabilities exist only inside eager attention (one kernel call per image or window, " \
             "each computing its own pattern), and this model runs 'sdpa': load it with attn_implementation='eager'"
    attention = sdpa.vision.layers[0].self_attn
    assert attention.support()["attention_probabilities"] == reason
    assert attention.kernel_calls[0].support()["attention_scores"] == reason
    assert attention.kernel_calls[0].support()["attention_queries"] is None
    with pytest.raises(Unavailable, match=re.escape(f"vision.layers[0].self_attn.kernel_calls[0].attention_scores is "
                                                    f"unavailable: {reason}")):
        with sdpa.trace(prompt(sdpa, ONE), images=ONE):
            attention.kernel_calls[0].attention_scores.save()


@pytest.mark.batch_shapes
def test_each_invoke_reads_its_own_images_calls(qwen):
    """Two invokes, an image each: an invoke's pattern is its own image's, as in a trace of it alone."""
    alone = [read_block(qwen, [image], 0)[4] for image in TWO]
    attention = qwen.vision.layers[0].self_attn
    with torch.no_grad(), qwen.trace() as tracer:
        patterns = nnsight.save([])
        for image in TWO:
            with tracer.invoke(prompt(qwen, [image]), images=[image]):
                patterns.append([attention.attention_probabilities, attention.kernel_calls[0].attention_probabilities])
    for (whole, call), expected in zip(patterns, alone):
        assert torch.equal(whole, expected) and torch.equal(call, expected)


def test_the_whole_s_gradient_is_each_call_s_on_the_diagonal(qwen):
    attention = qwen.vision.layers[0].self_attn
    text = prompt(qwen, TWO)
    with qwen.trace(text, images=TWO) as tracer:
        whole = attention.attention_probabilities
        with qwen.logits.sum().backward():
            gradient = whole.grad.save()
        tracer.stop()
    with qwen.trace(text, images=TWO) as tracer:
        calls = [attention.kernel_calls[call].attention_probabilities for call in range(2)]
        with qwen.logits.sum().backward():
            own = nnsight.save([calls[1].grad, calls[0].grad])  # backward reaches the last call first
        tracer.stop()
    rows = [block.shape[-1] for block in reversed(own)]
    assert gradient.shape[-1] == sum(rows)
    assert torch.equal(gradient[..., :rows[0], :rows[0]], own[1])
    assert torch.equal(gradient[..., rows[0]:, rows[0]:], own[0])
    assert torch.equal(gradient[..., :rows[0], rows[0]:], torch.zeros_like(gradient[..., :rows[0], rows[0]:]))
