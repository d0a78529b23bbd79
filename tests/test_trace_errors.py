"""The errors a trace can hit say which value and what to do, and threads tracing one model take turns.

- a write of another dtype or device than the value it replaces is refused before it reaches the model;
- the read-only ``image_token_mask`` refuses an in-place edit (assignment is refused already);
- a variable left holding a standard value it did not save says so when used after the trace;
- a value of the image's pathway read on a later step of generate is refused, naming the step;
- two threads tracing one model run their traces one after the other, each with its own values.
"""

from __future__ import annotations

import threading

import pytest
import torch

from envoys.core.not_saved import NotSavedError
from envoys.core.values import Unavailable
from envoys.testing import chat_prompt, noise_image

IMAGE = noise_image(32, 32, seed=5)


CHECKPOINT = "qwen3_vl"


@pytest.fixture(scope="module")
def prompt(model):
    return chat_prompt(model.processor, 1, "What is in the picture?")


def test_a_write_of_another_dtype_is_refused_naming_the_value(model, prompt):
    with pytest.raises(TypeError, match=r"vision\.image_features takes a tensor of dtype torch\.float32.*got "
                                        r"torch\.float16\. Convert it first: value\.to\(torch\.float32\)"):
        with model.trace(prompt, images=[IMAGE]):
            features = model.vision.image_features
            model.vision.image_features = torch.zeros(features.shape, dtype=torch.float16)


def test_a_write_on_another_device_is_refused_naming_the_value(model, prompt):
    with pytest.raises(ValueError, match=r"layers\[0\]\.layer_output takes a tensor on cpu.*got one on meta"):
        with model.trace(prompt, images=[IMAGE]):
            output = model.layers[0].layer_output
            model.layers[0].layer_output = torch.empty(output.shape, device="meta")


@pytest.mark.parametrize("edit", ["mask[:] = False", "mask.fill_(False)", "mask |= True"])
def test_the_image_token_mask_refuses_an_edit_in_place(model, prompt, edit):
    with pytest.raises(AttributeError, match=r"vision\.image_token_mask is read-only: it is where the prompt has "
                                             r"image tokens; change the prompt instead; it cannot be edited in place"):
        with model.trace(prompt, images=[IMAGE]):
            mask = model.vision.image_token_mask
            exec(edit, {"mask": mask})


def test_a_copy_of_the_mask_is_an_ordinary_tensor_and_the_mask_still_selects_the_features(model, prompt):
    with model.trace(prompt, images=[IMAGE]):
        mask = model.vision.image_token_mask
        copy = mask.clone()
        copy[:] = False
        features = model.vision.image_features.save()
        selected = model.layers[0].input[mask].save()
        cleared = copy.save()
    assert not cleared.any() and type(cleared) is torch.Tensor
    assert torch.equal(selected, features)


def test_a_value_read_and_not_saved_says_so_when_used_after_the_trace(model, prompt):
    with model.trace(prompt, images=[IMAGE]):
        features = model.vision.image_features
        logits = model.logits.save()
    assert logits.shape[-1] == model.config.text_config.vocab_size  # the saved value is handed back as it was
    with pytest.raises(NotSavedError, match=r"'features' holds vision\.image_features, read in the trace but not "
                                            r"saved.*features = <the read>\.save\(\)"):
        features.shape  # noqa: B018


def generated_with(model, prompt, read):
    with model.generate(prompt, images=[IMAGE], max_new_tokens=3) as tracer:
        for _step in tracer.iter[1]:
            read(model)


@pytest.mark.parametrize("read", [
    lambda model: model.vision.layers[0].layer_output.save(),
    lambda model: (model.layers[0].layer_output.save(), model.vision.image_features.save()),  # after a text read
], ids=["first-read-of-the-step", "after-a-text-read"])
def test_a_tower_value_read_on_a_later_step_of_generate_is_refused_naming_the_step(model, prompt, read):
    with pytest.raises(Unavailable, match=r"is not computed on step 1: the image is encoded once, in the forward "
                                          r"of generate's step 0.*read it in step 0 \(tracer\.iter\[0\]\)"):
        generated_with(model, prompt, read)


def test_the_mask_and_text_values_are_served_on_every_step(model, prompt):
    with model.generate(prompt, images=[IMAGE], max_new_tokens=3) as tracer:
        for _step in tracer.iter[1]:
            mask = model.vision.image_token_mask.save()
            output = model.layers[0].layer_output.save()
    assert mask.shape == (1, 1) and not mask.any() and output.shape[1] == 1


def test_threads_tracing_one_model_take_turns_and_each_gets_its_own_values(model, prompt):
    images = [noise_image(32, 32, seed=seed) for seed in range(4)]
    expected = []
    for image in images:
        with model.trace(prompt, images=[image]):
            expected.append(model.logits.save())
    got: dict[int, torch.Tensor] = {}
    errors: list[BaseException] = []

    def trace(index: int) -> None:
        try:
            with model.trace(prompt, images=[images[index]]):
                logits = model.logits.save()
            got[index] = logits
        except BaseException as error:  # reported below, so a failure in a thread fails the test
            errors.append(error)

    threads = [threading.Thread(target=trace, args=(index,)) for index in range(len(images))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors and sorted(got) == list(range(len(images)))
    assert all(torch.equal(got[index], expected[index]) for index in range(len(images)))
