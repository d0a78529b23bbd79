"""Several image-carrying invokes in one trace (`envoys.invokes`), beyond what the contract suite checks on every
family: counts that coincide, generate and ``tracer.iter``, skips, and the inputs and families refused before anything
runs, each with what to do instead."""

from __future__ import annotations

import nnsight
import pytest
import torch
from family_inputs import family_of
from rounding import assert_batch_close
from transformers import AutoModelForImageTextToText

from envoys import StandardizedTransformer, Unavailable
from envoys.invokes import InvokeInputError
from envoys.testing import NAMES, chat_prompt, image_prompts, noise_audio, noise_image

A, B, C = noise_image(32, 32, seed=1), noise_image(64, 48, seed=2), noise_image(32, 32, seed=3)
QUESTION = "What is in the picture?"


@pytest.fixture(scope="module", params=["llava-siglip", "qwen2_5_vl"])
def model(request, tiny_checkpoint) -> StandardizedTransformer:
    return StandardizedTransformer(tiny_checkpoint(request.param), task="image-text-to-text",
                                   attn_implementation="eager")


def prompt(model, images) -> str:
    return image_prompts(model.processor, len(images), QUESTION)


def tower_alone(model, images) -> torch.Tensor:
    with model.trace(prompt(model, images), images=images):
        stream = model.vision.layers[0].layer_output.save()
    return stream


def test_an_invoke_with_as_many_images_as_the_batch_has_rows_gets_its_images_not_rows(model):
    """Two images in one invoke beside a text-only one: the batch has two rows and two images, and the tower's
    values go to the invoke whose images they are, by what the tower's axis holds, not by its size."""
    alone = tower_alone(model, [A, C])
    with model.trace() as tracer:
        with tracer.invoke(prompt(model, [A, C]), images=[A, C]):
            stream = model.vision.layers[0].layer_output.save()
        with tracer.invoke(chat_prompt(model.processor, 0, QUESTION)):
            mask = model.vision.image_token_mask.save()
    assert mask.shape[0] == 1 and not mask.any()
    assert torch.equal(stream, alone)


def test_skipping_a_tower_block_in_every_invoke_joins_their_replacements_by_image(model):
    """A tower block skipped in both invokes, each with its own input: every invoke's output is its replacement,
    joined on the images' (or the patches') axis, and each equals the same skip traced alone."""
    block = model.vision.layers[0]

    def skipped_alone(images):
        with model.trace(prompt(model, images), images=images):
            block.skip(block.inputs[0][0] * 2)
            after = model.vision.layers[1].layer_input.save()
        return after

    alone = [skipped_alone(images) for images in ([A, B], [C])]
    with model.trace() as tracer:
        with tracer.invoke(prompt(model, [A, B]), images=[A, B]):
            block.skip(block.inputs[0][0] * 2)
            first = model.vision.layers[1].layer_input.save()
        with tracer.invoke(prompt(model, [C]), images=[C]):
            block.skip(block.inputs[0][0] * 2)
            second = model.vision.layers[1].layer_input.save()
    assert torch.equal(first, alone[0]) and torch.equal(second, alone[1])


@pytest.mark.batch_shapes
def test_a_packed_towers_per_image_bounds_are_each_invokes_own(tiny_checkpoint):
    """The Qwen ViT's attention takes every image's bounds (``cu_seqlens``); each invoke reads its own images',
    counted from 0, as its prompt alone gives them, beside its own queries."""
    model = StandardizedTransformer(tiny_checkpoint("qwen3_vl"), task="image-text-to-text", attn_implementation="eager")
    attention = model.vision.layers[0].self_attn

    def read(images):
        return attention.inputs[1]["cu_seqlens"].save(), attention.attention_queries.save()

    alone = []
    for images in ([A, B], [C]):
        with model.trace(prompt(model, images), images=images):
            alone.append(nnsight.save(read(images)))
    with model.trace() as tracer:
        with tracer.invoke(prompt(model, [A, B]), images=[A, B]):
            first = nnsight.save(read([A, B]))
        with tracer.invoke(prompt(model, [C]), images=[C]):
            second = nnsight.save(read([C]))
    for (bounds, queries), (bounds_alone, queries_alone) in zip((first, second), alone):
        assert bounds.tolist() == bounds_alone.tolist()
        assert_batch_close(queries, queries_alone)
    assert first[0].tolist() == [0, 16, 64] and second[0].tolist() == [0, 16]


@pytest.mark.batch_shapes
@pytest.mark.parametrize("name", ["qwen3_vl", "qwen2_5_vl"])
def test_a_per_image_attentions_calls_are_numbered_from_each_invokes_first_image(name, tiny_checkpoint):
    """The Qwen ViT calls its attention kernel once per image (once per window on Qwen2.5-VL's windowed blocks):
    read call by call with ``tracer.iter``, an invoke's call k is its own k-th image's (or window's), as its prompt
    alone gives it, on every block."""
    model = StandardizedTransformer(tiny_checkpoint(name), task="image-text-to-text", attn_implementation="eager")

    def calls(images):
        per_block = []
        for block in model.vision.layers:
            attention = block.self_attn
            calls = attention.inputs[1]["cu_seqlens"].shape[0] - 1
            outputs = nnsight.save([])
            for _ in tracer.iter[0:calls]:
                outputs.append(attention.source.attention_interface_2.output[0].save())
            per_block.append(outputs)
        return nnsight.save(per_block)

    alone = []
    for images in ([A, B], [C]):
        with model.trace(prompt(model, images), images=images) as tracer:
            alone.append(calls(images))
    with model.trace() as tracer:
        with tracer.invoke(prompt(model, [A, B]), images=[A, B]):
            first = calls([A, B])
        with tracer.invoke(prompt(model, [C]), images=[C]):
            second = calls([C])
    for together, by_itself in zip((first, second), alone):
        assert len(together) == len(by_itself) == model.vision.num_layers
        for block_together, block_alone in zip(together, by_itself):
            assert len(block_together) == len(block_alone) > 0
            for a, b in zip(block_together, block_alone):
                assert_batch_close(a, b)


def test_generate_with_two_image_invokes_reads_each_invokes_mask_every_step_and_its_tower_at_step_zero(model):
    steps = 3
    options = {"max_new_tokens": steps, "min_new_tokens": steps, "do_sample": False}
    plain = AutoModelForImageTextToText.from_pretrained(model._module.name_or_path, attn_implementation="eager").eval()
    expected = []
    for images in ([A, B], [C]):
        inputs = model.processor(text=[prompt(model, images)], images=images, return_tensors="pt")
        expected.append((plain.generate(**inputs, **options)[:, inputs["input_ids"].shape[1]:], inputs["input_ids"]))
    with model.generate(**options) as tracer:
        runs = nnsight.save([])
        for images in ([A, B], [C]):
            with tracer.invoke(prompt(model, images), images=images):
                masks, features = nnsight.save([]), nnsight.save([])
                for step in tracer.iter[0:steps]:
                    masks.append(model.vision.image_token_mask.save())
                    if step == 0:
                        features.append(model.vision.image_features.save())
                runs.append((masks, features, tracer.result.save()))  # the invoke's rows of what generate returns
    longest = max(ids.shape[1] for _, ids in expected)
    for (masks, features, generated), (tokens, ids) in zip(runs, expected):
        assert [tuple(mask.shape) for mask in masks] == [(1, longest)] + [(1, 1)] * (steps - 1)
        assert torch.equal(masks[0][:, longest - ids.shape[1]:], ids == model.config.image_token_id)
        assert not any(mask.any() for mask in masks[1:])
        assert features[0].shape[0] == int((ids == model.config.image_token_id).sum())
        assert torch.equal(generated[:, longest:], tokens)  # each prompt's greedy tokens, as generated alone


def test_the_issues_patch_without_a_barrier_fails_as_nnsights_text_idiom_does(model):
    """A value saved in one invoke and used at the same location in a later one needs a barrier, on a text model
    too: the later invoke's code runs before the earlier one has saved it."""
    text = prompt(model, [A])
    with pytest.raises(NameError, match="clean"):
        with model.trace() as tracer:
            with tracer.invoke(text, images=[A]):
                clean = model.vision.image_features.save()
            with tracer.invoke(text, images=[C]):
                model.vision.image_features[:] = clean  # noqa: F821 (read before the first invoke saved it)
    with pytest.raises(NameError, match="hidden"):
        with model.trace() as tracer:
            with tracer.invoke("hello world"):
                hidden = model.layers[0].output.save()
            with tracer.invoke("hello world"):
                model.layers[0].output[:] = hidden  # noqa: F821


def forward_calls(model) -> list:
    """A list the model's root appends to on every forward (a hook on this instance's module, removed by the caller)."""
    calls: list = []
    handle = model._module.register_forward_pre_hook(lambda module, args: calls.append(1))
    return calls, handle


@pytest.mark.parametrize("given, message", [
    ({"pixel_values": torch.zeros(1, 3, 32, 32)}, "passes pixel_values to the model itself"),
    ({"videos": [[A, C]]}, "passes videos="),
    ({"audio": [noise_audio()]}, "passes audio="),
])
def test_an_invoke_whose_images_cannot_be_placed_is_refused_before_anything_runs(model, given, message):
    calls, handle = forward_calls(model)
    try:
        with pytest.raises(InvokeInputError, match=message):
            with model.trace() as tracer:
                with tracer.invoke(prompt(model, [A]), images=[A]):
                    model.logits.save()
                with tracer.invoke(prompt(model, [A]), **given):
                    model.logits.save()
    finally:
        handle.remove()
    assert calls == []


def test_forward_keywords_that_differ_between_invokes_are_refused(model):
    with pytest.raises(InvokeInputError, match="pass it to model.trace"):
        with model.trace() as tracer:
            with tracer.invoke(prompt(model, [A]), images=[A], output_attentions=True):
                model.logits.save()
            with tracer.invoke(prompt(model, [C]), images=[C], output_attentions=False):
                model.logits.save()


def test_a_tower_value_in_an_invoke_without_images_says_so_outside_any_order(model):
    with model.trace() as tracer:
        with tracer.invoke(prompt(model, [A]), images=[A]):
            model.logits.save()
        with tracer.invoke(chat_prompt(model.processor, 0, QUESTION)):
            with pytest.raises(Unavailable, match="no image reached this invoke"):
                model.vision.image_features.save()
            model.logits.save()


@pytest.mark.batch_shapes
def test_the_grids_inside_an_invoke_are_its_own_images(model):
    """Inside an invoke, the grids number its own images from 0 and place its own values, as its prompt alone does;
    an invoke without images has none."""
    def grids(images):
        stream = model.vision.layers[0].layer_output  # in the forward's order: the tower, then image_features
        features = model.vision.image_features
        return nnsight.save([model.vision.patch_grid(stream, image=len(images) - 1),
                             model.vision.token_grid(features, image=len(images) - 1)])

    alone = []
    for images in ([A, B], [C]):
        with model.trace(prompt(model, images), images=images):
            alone.append(grids(images))
    refused = None
    with model.trace() as tracer:
        with tracer.invoke(prompt(model, [A, B]), images=[A, B]):
            first = grids([A, B])
        with tracer.invoke(prompt(model, [C]), images=[C]):
            second = grids([C])
        with tracer.invoke(chat_prompt(model.processor, 0, QUESTION)):
            first_input = model.layers[0].input
            try:
                model.vision.token_grid(first_input)
            except Unavailable as error:
                refused = nnsight.save(str(error))
    for together, by_itself in zip((first, second), alone):
        for a, b in zip(together, by_itself):
            assert_batch_close(a, b)  # NaN where a grid cell holds no patch, in both
    assert refused is not None and "no image reached this invoke" in refused


@pytest.mark.batch_shapes
def test_the_models_inputs_are_each_invokes_own_and_a_replacement_reaches_only_its_own(model):
    """``model.inputs`` in an invoke holds its own rows of the text and its own part of each image input; replacing
    its pixels changes its tower's values only."""
    alone = tower_alone(model, [A, B]), tower_alone(model, [C])
    with model.trace() as tracer:
        with tracer.invoke(prompt(model, [A, B]), images=[A, B]):
            first_inputs = model.inputs.save()
            first = model.vision.layers[0].layer_output.save()
        with tracer.invoke(prompt(model, [C]), images=[C]):
            args, kwargs = model.inputs
            own = nnsight.save({key: value.clone() for key, value in kwargs.items() if isinstance(value, torch.Tensor)})
            model.inputs = (args, {**kwargs, "pixel_values": kwargs["pixel_values"] * 0})
            second = model.vision.layers[0].layer_output.save()
    encoded = [model.processor(text=[prompt(model, images)], images=images, return_tensors="pt") for images in ([A, B], [C])]
    assert torch.equal(first_inputs[1]["pixel_values"], encoded[0]["pixel_values"])
    assert torch.equal(own["pixel_values"], encoded[1]["pixel_values"])
    ids = own["input_ids"]
    assert ids.shape[0] == 1 and torch.equal(ids[:, ids.shape[1] - encoded[1]["input_ids"].shape[1]:], encoded[1]["input_ids"])
    assert_batch_close(first, alone[0])
    assert (second - alone[1]).abs().max() > 1e-2  # black pixels: another tower run, not rounding


#: LLaVA, and every checkpoint whose text model counts its positions from another first position.
COUNTING_FROM_ELSEWHERE = ["llava-siglip", *(name for name in NAMES if family_of(name).batching.first_position)]


@pytest.mark.parametrize("name", COUNTING_FROM_ELSEWHERE)
def test_a_left_padded_invokes_tokens_keep_the_positions_its_prompt_alone_gives_them(name, tiny_checkpoint):
    """The shorter invoke is left-padded; its tokens get the positions the text model gives its prompt alone (LLaVA's
    text model counts from 0, others from their ``Batching.first_position``: PaliGemma's from 1), read where the rotary embedding takes
    them."""
    model = StandardizedTransformer(tiny_checkpoint(name), task="image-text-to-text", attn_implementation="eager")
    rotary = model.model.language_model.rotary_emb
    long, short = image_prompts(model.processor, 1, QUESTION + " " + "And then? " * 6), prompt(model, [C])
    def positions(inputs):  # the rotary embedding's (x, position_ids), positional or by keyword
        args, kwargs = inputs
        return kwargs["position_ids"] if "position_ids" in kwargs else args[1]

    with model.trace(short, images=[C]):
        alone = positions(rotary.inputs).save()
    with model.trace() as tracer:
        with tracer.invoke(long, images=[A]):
            model.logits.save()
        with tracer.invoke(short, images=[C]):
            mask = model.vision.image_token_mask.save()
            batched = positions(rotary.inputs).save()
    pad = mask.shape[1] - alone.shape[1]
    assert pad > 0 and torch.equal(batched[:, pad:], alone)


def test_the_pipeline_with_several_image_invokes_says_where_they_run(model):
    """``model.pipe`` hands text prompts to transformers' pipeline, which batches no images: refused, naming trace and
    generate, where several image-carrying invokes run."""
    with pytest.raises(NotImplementedError, match=r"model\.pipe\(\) batches text prompts only.*model\.trace\(\)"):
        with model.pipe(max_new_tokens=1) as tracer:
            with tracer.invoke(prompt(model, [A]), images=[A]):
                model.logits.save()
            with tracer.invoke(prompt(model, [C]), images=[C]):
                model.logits.save()
