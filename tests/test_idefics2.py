"""StandardizedTransformer on a tiny Idefics 2 checkpoint: images padded to the batch's grid, a perceiver connector.

What is particular to Idefics 2 (the spec's contracts run on it in
test_vision_contracts.py): each image is one row of the tower, padded to the
batch's largest patch grid, its padded patches masked as keys in every block
and in the perceiver; the connector resamples every image, whatever its size,
to the perceiver's fixed count of latents, which are the image's tokens; the
host scatters them through its ``inputs_merger`` helper. Expected numbers come
from the stock processor's outputs (``pixel_attention_mask``, the prompt's
image tokens) and the config (``resampler_n_latents``), never from the code
under test.
"""

from __future__ import annotations

import nnsight
import pytest
import torch
from family_inputs import prompt

from envoys import Unavailable
from envoys.census import SCATTERS, SUPPORTED, census, entry
from envoys.testing import noise_image

#: 32x32 (a whole 4x4 grid of 8 px patches) and 64 wide x 48 high (resized to 32 x 24: a 4x3 grid, padded to 4x4).
IMAGES = [noise_image(32, 32, seed=0), noise_image(64, 48, seed=1)]


CHECKPOINT = "idefics2"


def real_patches(model, images) -> torch.Tensor:
    """Which patches of each image's row are real, ``[images, patches]`` bool: those whose pixels are all real in the
    processor's ``pixel_attention_mask``."""
    pixels = model.processor(text=[prompt(model, images)], images=images, return_tensors="pt")["pixel_attention_mask"][0]
    side = model.config.vision_config.patch_size
    cells = pixels.unfold(1, side, side).unfold(2, side, side)  # [images, rows, columns, side, side]
    return (cells.flatten(-2).sum(-1) == side * side).flatten(1)


def test_the_connector_holds_a_perceiver_resampler(model):
    assert type(model.projector.perceiver_resampler._module).__name__ == "Idefics2PerceiverResampler"


def test_every_image_is_the_perceivers_latents_whatever_its_size(model):
    latents, hidden = model.config.perceiver_config.resampler_n_latents, model.hidden_size
    real = real_patches(model, IMAGES)
    assert real.sum(1).tolist() == [16, 12]  # two sizes of image ...
    with model.trace(prompt(model, IMAGES), images=IMAGES) as tracer:
        mask = model.vision.image_token_mask.save()
        received = model.projector.input.save()
        projected = model.projector.output.save()
        features = model.vision.image_features.save()
        first = model.layers[0].input.save()
        tracer.stop()
    assert received.shape == (2, 16, model.vision.vision_hidden_size)
    assert projected.shape == (2, latents, hidden)  # ... the same count of latents each
    assert int(mask.sum()) == 2 * latents
    assert torch.equal(features, projected.reshape(2 * latents, hidden))
    assert torch.equal(first[mask], features)
    # each image's run of image tokens is its latents, between the processor's <fake_token_around_image> tokens
    ids = model.processor(text=[prompt(model, IMAGES)], images=IMAGES, return_tensors="pt")["input_ids"][0]
    boundary = model.processor.tokenizer.convert_tokens_to_ids(model.processor.fake_image_token)
    runs = torch.tensor_split(mask[0], torch.nonzero(ids == boundary).flatten())
    assert [int(run.sum()) for run in runs if run.any()] == [latents, latents]


def test_padded_patches_are_masked_keys_in_every_block(model):
    real = real_patches(model, IMAGES)
    with model.trace(prompt(model, IMAGES), images=IMAGES) as tracer:
        patterns = nnsight.save([block.self_attn.attention_probabilities for block in model.vision.layers])
        tracer.stop()
    for index, pattern in enumerate(patterns):
        keys = real[:, None, None, :].expand_as(pattern)
        assert bool((pattern[keys] > 0).all()), index
        assert torch.equal(pattern[~keys], torch.zeros_like(pattern[~keys])), index


def test_the_perceiver_reads_only_the_real_patches_of_what_it_receives(model):
    real = real_patches(model, IMAGES)
    padded, kept = int(torch.nonzero(~real[1])[0]), int(torch.nonzero(real[1])[0])
    text = prompt(model, IMAGES)
    with model.trace(text, images=IMAGES) as tracer:
        clean = model.projector.output.save()
        tracer.stop()
    with model.trace(text, images=IMAGES) as tracer:
        model.vision.tower_output[1, padded] = 100.0
        on_padding = model.projector.output.save()
        tracer.stop()
    with model.trace(text, images=IMAGES) as tracer:
        model.vision.tower_output[1, kept] = 100.0
        on_real = model.projector.output.save()
        tracer.stop()
    assert torch.equal(on_padding, clean)
    assert torch.equal(on_real[0], clean[0]) and not torch.equal(on_real[1], clean[1])


def test_the_patch_grid_is_each_images_real_patches_and_the_latents_have_none(model):
    real = real_patches(model, IMAGES)
    with model.trace(prompt(model, IMAGES), images=IMAGES) as tracer:
        mask = model.vision.image_token_mask.save()
        patches = model.vision.patch_embeddings.save()
        first = model.layers[0].input.save()
        tracer.stop()
    width = patches.shape[-1]
    for image, shape in enumerate([(4, 4), (3, 4)]):  # 32x32, and 32 wide x 24 high: its first 3 of 4 patch rows
        assert torch.equal(model.vision.patch_grid(patches, image=image), patches[image][real[image]].view(*shape, width))
    with pytest.raises(Unavailable, match="the image tokens have no grid: they are the perceiver's latents"):
        model.vision.token_grid(first[mask], image=0)


def test_split_images_are_crops_on_no_grid(model):
    """With ``do_image_splitting`` each image is its 4 quarters and itself, 5 rows of the tower and 5 runs of latents."""
    latents = model.config.perceiver_config.resampler_n_latents
    splitting = model.processor.image_processor.do_image_splitting
    model.processor.image_processor.do_image_splitting = True
    try:
        with model.trace(prompt(model, IMAGES[:1]), images=IMAGES[:1]) as tracer:
            mask = model.vision.image_token_mask.save()
            patches = model.vision.patch_embeddings.save()
            tracer.stop()
        assert patches.shape[0] == 5 and int(mask.sum()) == 5 * latents
        with pytest.raises(Unavailable, match="while the image processor's do_image_splitting is on"):
            model.vision.patch_grid(patches, image=0)
    finally:
        model.processor.image_processor.do_image_splitting = splitting


def test_the_census_finds_a_helper_that_scatters_through_the_forward_that_calls_it():
    """Idefics 2's host scatters inside its helper: its census line without its family module says so."""
    assert {line.model_type: line.status for line in census()}["idefics2"] == SUPPORTED
    unserved = entry("idefics2", "Idefics2ForConditionalGeneration", (), {})
    assert unserved.status == SCATTERS
    assert unserved.reason.startswith("Idefics2Model.forward scatters through its helper self.inputs_merger")
