"""DeepSeek-VL: what is particular to it, beyond the vision contracts (tests/test_vision_contracts.py).

Its aligner maps each patch of the tower's normed output to one image token
(``linear1``, GELU, ``linear2``), and its image processor pads every image to
a square before resizing it, so the padding is part of the image's patches.
The tiny checkpoint (envoys/testing/deepseek_vl.py): 32x32 images of 8 px
patches, a 4x4 grid, 16 image tokens an image, text width 32.
"""

from __future__ import annotations

import torch

from envoys.testing import chat_prompt, noise_image, patch_coloured_image

IMAGES = [noise_image(32, 32, seed=3), noise_image(64, 48, seed=4)]
SIDE = 4  # patches a side
TOKENS = SIDE * SIDE


CHECKPOINT = "deepseek_vl"


def prompt(model, count=2):
    return chat_prompt(model.processor, count, "What is in the picture?")


def test_the_aligner_projects_each_patch_of_the_normed_tower_output_to_one_image_token(model):
    with model.trace(prompt(model), images=IMAGES) as tracer:
        tower = model.vision.tower_output.save()
        features = model.vision.image_features.save()
        tracer.stop()
    aligner = model.projector._module
    with torch.no_grad():
        by_hand = aligner.linear2(aligner.activation(aligner.linear1(tower)))
    assert tower.shape == (2, TOKENS, model.vision.vision_hidden_size)
    assert torch.equal(features, by_hand.reshape(2 * TOKENS, model.hidden_size))


def test_an_edit_of_one_patch_of_the_tower_output_changes_its_image_token_alone(model):
    row, column = 2, 1
    token = TOKENS + row * SIDE + column  # the second image's patch (2, 1): image after image, raster order
    with model.trace(prompt(model), images=IMAGES) as tracer:
        clean = model.vision.image_features.save()
        tracer.stop()
    with model.trace(prompt(model), images=IMAGES) as tracer:
        model.vision.tower_output[1, row * SIDE + column] = 0.0
        edited = model.vision.image_features.save()
        tracer.stop()
    changed = (edited != clean).any(dim=-1)
    assert changed.nonzero().flatten().tolist() == [token]


def test_a_wide_image_is_padded_to_a_square_whose_padding_patches_are_image_tokens(model):
    """A 64x16 image is resized to 32x8 and padded with 12 rows of background above and below: the top patch row
    (pixel rows 0 to 7) is background alone, so its four patch embeddings are equal, and the image still gets 16
    image tokens, padding included."""
    wide = noise_image(64, 16, seed=5)
    with model.trace(prompt(model, 1), images=[wide]) as tracer:
        mask = model.vision.image_token_mask.save()
        patches = model.vision.patch_embeddings.save()
        tracer.stop()
    assert int(mask.sum()) == TOKENS
    top, middle = patches[0, :SIDE], patches[0, SIDE:2 * SIDE]
    assert all(torch.equal(top[0], top[column]) for column in range(1, SIDE))
    assert not torch.equal(middle[0], middle[1])  # noise from row 12 on: the second patch row holds the image


def test_the_patch_grid_puts_each_patch_embedding_where_its_pixels_are(model):
    """Cell (r, c) of an image's patch grid is the tower's convolution of that image's pixels r*8 to r*8+8 down and
    c*8 to c*8+8 across, computed by hand from the processor's pixel_values."""
    images = [patch_coloured_image(4, 4, 8), patch_coloured_image(4, 4, 8).rotate(90)]
    with model.trace(prompt(model), images=images) as tracer:
        pixels = model.inputs[1]["pixel_values"].save()
        patches = model.vision.patch_embeddings.save()
        tracer.stop()
    convolution = model.vision.patch_embed._module
    for image in range(2):
        grid = model.vision.patch_grid(patches, image=image)
        assert grid.shape == (SIDE, SIDE, model.vision.vision_hidden_size)
        for row in range(SIDE):
            for column in range(SIDE):
                square = pixels[image:image + 1, :, row * 8:(row + 1) * 8, column * 8:(column + 1) * 8]
                with torch.no_grad():
                    by_hand = convolution(square)[0, :, 0, 0]
                # to rounding only: the convolution of one square may sum in another order than of the whole image
                torch.testing.assert_close(grid[row, column], by_hand, rtol=0, atol=1e-6)


def test_a_patch_placed_on_the_patch_grid_reaches_the_token_grids_cell_alone(model):
    row, column = 3, 0
    with model.trace(prompt(model), images=IMAGES) as tracer:
        clean = model.vision.image_features.save()
        tracer.stop()
    with model.trace(prompt(model), images=IMAGES) as tracer:
        tower = model.vision.tower_output
        grid = model.vision.patch_grid(tower, image=1).clone()
        grid[row, column] = 0.0
        model.vision.place_patch_grid(grid, tower, image=1)
        edited = model.vision.image_features.save()
        tracer.stop()
    changed = (model.vision.token_grid(edited, image=1) != model.vision.token_grid(clean, image=1)).any(dim=-1)
    expected = torch.zeros(SIDE, SIDE, dtype=torch.bool)
    expected[row, column] = True
    assert torch.equal(changed, expected)
    assert torch.equal(model.vision.token_grid(edited, image=0), model.vision.token_grid(clean, image=0))
