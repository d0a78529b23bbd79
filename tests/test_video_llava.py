"""Video-LLaVA: what is particular to it, beyond the vision contracts (tests/test_vision_contracts.py).

Two CLIP towers of one config: ``model.vision`` is the image tower and
``model.video`` the video tower (its own weights). The stock image processor
names the images' pixels ``pixel_values_images``. Expected values come from the
stock processor's outputs, the config, and the native modules run by hand
outside the trace (the image path: the image tower, its block -2 without CLS,
the projector).
"""

from __future__ import annotations

import pytest
import torch
from video_edits import assert_a_patch_edit_moves_its_token

from envoys import Unavailable
from envoys.image.grids import GridError
from envoys.testing import chat_prompt, noise_image, noise_video

IMAGES = [noise_image(32, 32, seed=3), noise_image(64, 48, seed=4)]
SIDE = 4  # 32 pixel images of 8 pixel patches


CHECKPOINT = "video_llava"


def prompt(model) -> str:
    return chat_prompt(model.processor, len(IMAGES), "Describe the image.")


def processed(model) -> dict[str, torch.Tensor]:
    return model.processor(text=[prompt(model)], images=IMAGES, return_tensors="pt")


def test_loads_with_its_stock_processor_and_vision_is_not_the_video_tower(model):
    processor = model.processor
    assert type(processor).__name__ == "VideoLlavaProcessor"
    assert type(processor.image_processor).__name__ == "VideoLlavaImageProcessor"
    assert type(processor.video_processor).__name__ == "VideoLlavaVideoProcessor"
    assert model.vision._module is not model._module.model.video_tower  # the image tower (the row's native)
    assert type(model.layers[0].self_attn._module).__name__ == "LlamaAttention"


def test_a_video_free_prompt_runs_the_image_tower_alone_on_pixel_values_images_and_the_mask_sees_them(model):
    model.dispatch()  # the weights loaded, so that the hooks go on the modules that run
    inputs = processed(model)
    assert "pixel_values_images" in inputs and "pixel_values" not in inputs and "pixel_values_videos" not in inputs
    host = model._module.model
    calls = {"image_tower": 0, "video_tower": 0}
    hooks = [getattr(host, tower).register_forward_hook(lambda *_, t=tower: calls.__setitem__(t, calls[t] + 1))
             for tower in calls]
    try:
        with model.trace(prompt(model), images=IMAGES):
            mask = model.vision.image_token_mask.save()
            pixels = model.vision.input.save()
            features = model.vision.image_features.save()
            first = model.layers[0].input.save()
    finally:
        for hook in hooks:
            hook.remove()
    assert calls == {"image_tower": 1, "video_tower": 0}
    assert torch.equal(mask, inputs["input_ids"] == model.config.image_token_id)
    assert int(mask.sum()) == 2 * SIDE * SIDE
    assert torch.equal(pixels, inputs["pixel_values_images"])
    assert torch.equal(first[mask], features)


def test_the_values_are_the_image_paths_not_the_video_towers(model):
    """image_features is the projector on the image tower's block -2 without CLS, recomputed by hand; the video
    tower, of the same config and other weights, gives other features from the same pixels."""
    pixels = processed(model)["pixel_values_images"]
    with model.trace(prompt(model), images=IMAGES):
        block = model.vision.layers[-2].layer_output.save()
        received = model.projector.input.save()
        features = model.vision.image_features.save()
    host = model._module.model
    with torch.no_grad():
        image_states = host.image_tower(pixels, output_hidden_states=True).hidden_states[-2]
        video_states = host.video_tower(pixels, output_hidden_states=True).hidden_states[-2]
        expected = host.multi_modal_projector(image_states[:, 1:]).flatten(0, 1)
        from_video_tower = host.multi_modal_projector(video_states[:, 1:]).flatten(0, 1)
    assert torch.equal(block, image_states) and torch.equal(received, image_states[:, 1:])
    assert torch.equal(features, expected)
    assert not torch.equal(features, from_video_tower)


def test_an_image_tower_edit_reaches_only_its_images_tokens(model):
    with model.trace(prompt(model), images=IMAGES):
        clean = model.vision.image_features.save()
    with model.trace(prompt(model), images=IMAGES):
        model.vision.layers[-2].layer_output[1] = 0.0  # the second image's rows
        edited = model.vision.image_features.save()
    tokens = SIDE * SIDE
    assert torch.equal(edited[:tokens], clean[:tokens])
    assert not (edited[tokens:] == clean[tokens:]).all(-1).any()


def test_the_grids_count_the_images_on_pixel_values_images(model):
    with model.trace(prompt(model), images=IMAGES):
        stream = model.vision.layers[0].layer_output.save()
        features = model.vision.image_features.save()
    for image in (0, 1):
        assert torch.equal(model.vision.patch_grid(stream, image=image), stream[image, 1:].reshape(SIDE, SIDE, -1))
        rows = features[image * SIDE * SIDE: (image + 1) * SIDE * SIDE]
        assert torch.equal(model.vision.token_grid(features, image=image), rows.reshape(SIDE, SIDE, -1))
    with pytest.raises(GridError, match=r"it holds 2 image\(s\)"):
        model.vision.patch_grid(stream, image=2)


def test_the_video_tower_is_model_video_and_runs_on_videos_only(model):
    """The envoys are keyed by class, so the video tower has the image tower's values, as ``model.video``; each
    tower runs on its own medium, and a value of either on a prompt without it says so."""
    tower = model.video  # the video tower (the row's native)
    assert type(tower) is type(model.vision)
    assert type(tower.layers[0]) is type(model.vision.layers[0])
    frames = noise_video(4, 32, 32, seed=5)
    video_prompt = chat_prompt(model.processor, 0, "Describe the video.", videos=1)
    with model.trace(video_prompt, videos=[frames]):
        stream = model.video.layers[0].layer_output.save()
    assert stream.shape == (4, 1 + SIDE * SIDE, 32)  # every frame, CLS kept
    with pytest.raises(Unavailable, match=r"vision\.layers\[0\]\.layer_output is unavailable: no image reached"):
        with model.trace(video_prompt, videos=[frames]):
            model.vision.layers[0].layer_output.save()
    with pytest.raises(Unavailable, match=r"video\.layers\[0\]\.layer_output is unavailable: no video reached"):
        with model.trace(prompt(model), images=IMAGES):
            model.video.layers[0].layer_output.save()
    support = model.support()
    assert all(support[f"video.{name}"] is None for name in ("layer_output", "tower_output", "video_features"))


def test_a_patch_edited_in_the_layer_the_projector_reads_moves_the_token_on_its_frames_grid(model):
    """The projector reads block ``vision_feature_layer`` patch by patch (no pool: one token a patch)."""
    assert_a_patch_edit_moves_its_token(model, pooled=1)
