"""The rest of nnsight's surface through the standard names, on LLaVA and Qwen3-VL: edit() (on a copy and in
place, persistent, cleared), session() (one image's tower input patched into another's run gives the donor's
logits), .skip() on a tower block, a batch of several prompts and images in one invoke, tracer.stop() and
tracer.cache() beside standard reads. Expected numbers come from runs without the edit, the donor's own run, the
native module paths, or the processor."""

from __future__ import annotations

import pytest
import torch
from rounding import assert_batch_close

from envoys import StandardizedTransformer
from envoys.testing import chat_prompt, noise_image

IMAGE, OTHER = noise_image(32, 32, seed=0), noise_image(32, 32, seed=1)


@pytest.fixture(scope="module", params=["llava-siglip", "qwen3_vl"])
def model(request, tiny_checkpoint):
    return StandardizedTransformer(tiny_checkpoint(request.param), task="image-text-to-text", device="cpu",
                                   attn_implementation="eager")


def prompt(model, images: int = 1) -> str:
    return chat_prompt(model.processor, images, "What is in the picture?")


def logits(model, image=IMAGE) -> torch.Tensor:
    with model.trace(prompt(model), images=[image]):
        out = model.logits.save()
    return out


def ablated(model) -> torch.Tensor:
    with model.trace(prompt(model), images=[IMAGE]):
        model.vision.image_features[:] = 0
        out = model.logits.save()
    return out


def test_edit_on_a_copy_leaves_the_model_clean(model):
    clean, expected = logits(model), ablated(model)
    with model.edit() as (_, edited):
        edited.vision.image_features[:] = 0
    assert torch.equal(logits(edited), expected) and torch.equal(logits(edited), expected)  # persistent
    assert torch.equal(logits(model), clean)


def test_edit_in_place_persists_until_cleared(model):
    clean, expected = logits(model), ablated(model)
    with model.edit(inplace=True):
        model.vision.image_features[:] = 0
    try:
        assert torch.equal(logits(model), expected) and torch.equal(logits(model), expected)
    finally:
        model.clear_edits()
    assert torch.equal(logits(model), clean)


def test_session_patches_one_images_tower_input_into_another_run(model):
    donor = logits(model, OTHER)
    assert not torch.equal(donor, logits(model, IMAGE))
    with model.session():
        with model.trace(prompt(model), images=[OTHER]):
            patches = model.vision.patch_embeddings
        with model.trace(prompt(model), images=[IMAGE]):
            model.vision.patch_embeddings = patches
            patched = model.logits.save()
    assert torch.equal(patched, donor)


def test_skip_on_a_tower_block_passes_its_input_on(model):
    block, after = model.vision.layers[0], model.vision.layers[1]
    with model.trace(prompt(model), images=[IMAGE]):
        entering = block.layer_input
        native_input = block.inputs  # the block's own call, as nnsight serves it
        block.skip(native_input[0][0] if native_input[0] else native_input[1]["hidden_states"])
        passed = after.layer_input.save()
        entering = entering.save()
    assert torch.equal(passed, entering)


@pytest.mark.batch_shapes
def test_a_batch_of_prompts_and_images_in_one_invoke(model):
    texts = [prompt(model), prompt(model)]
    given = model.processor(text=texts, images=[IMAGE, OTHER], return_tensors="pt", padding=True)
    with model.trace(texts, images=[IMAGE, OTHER]):
        mask = model.vision.image_token_mask.save()
        features = model.vision.image_features.save()
        out = model.logits.save()
    image_token = model.processor.tokenizer.convert_tokens_to_ids(model.processor.image_token)
    assert torch.equal(mask, given["input_ids"] == image_token)
    assert features.shape[0] == int(mask.sum()) and out.shape[0] == 2
    with model.trace(prompt(model), images=[OTHER]):
        alone = model.vision.image_features.save()
        alone_logits = model.logits.save()
    # The second prompt's rows are the last ones, as in a run of its own, up to the rounding of a batch's products
    assert_batch_close(features[-alone.shape[0]:], alone)
    assert_batch_close(out[1], alone_logits[0])


def test_stop_after_a_standard_read(model):
    with model.trace(prompt(model), images=[IMAGE]) as tracer:
        features = model.vision.image_features.save()
        tracer.stop()
    with model.trace(prompt(model), images=[IMAGE]):
        expected = model.vision.image_features.save()
    assert torch.equal(features, expected)


def test_cache_beside_standard_reads(model):
    block = model.vision.layers[0]
    with model.trace(prompt(model), images=[IMAGE]) as tracer:
        cache = tracer.cache()
        stream = block.layer_output.save()
    cached = cache[block.path].output  # the block's native path (model.model.visual.blocks.0)
    cached = cached[0] if isinstance(cached, tuple) else cached
    assert torch.equal(cached.reshape(stream.shape), stream)


def hidden(output):
    """A block's hidden states out of its output (a tuple on some releases)."""
    return output[0] if isinstance(output, tuple) else output


@pytest.mark.batch_shapes
def test_nnsights_own_values_and_cache_give_each_invoke_its_part(model):
    """Beside the standard names, nnsight's own module values and ``tracer.cache()`` serve each of several
    image-carrying invokes its own images' rows (`envoys.invokes`): what each invoke's prompt alone gives."""
    block = model.vision.layers[0]
    alone = []
    for image in (IMAGE, OTHER):
        with model.trace(prompt(model), images=[image]):
            alone.append(block.output.save())
    with model.trace() as tracer:
        with tracer.invoke(prompt(model), images=[IMAGE]):
            first = block.output.save()
        with tracer.invoke(prompt(model), images=[OTHER]):
            cache = tracer.cache()
            second = block.output.save()
    assert_batch_close(hidden(first), hidden(alone[0]))
    assert_batch_close(hidden(second), hidden(alone[1]))
    assert (hidden(first) - hidden(second)).abs().max() > 1e-2  # two images, not rounding
    assert torch.equal(hidden(cache[block.path].output), hidden(second))  # the cache is its invoke's, the same read
