"""Inputs, expected layouts and the tower's own suite for the tests of Pixtral-tower checkpoints.

Every number here comes from the stock processor (``image_sizes``) and the
vision config (``patch_size``), never from the code under test. Images: 32x32,
and 48 high x 64 wide, so two images differ in both sides and the
convolution's padded grid is the second image's.

`PixtralTowerSuite` is what the tower itself does on every checkpoint that
carries it, exact on float32: the packed patch embeddings, the block values,
how the projector reads the last block, and an ablation. Each family's test
file declares a class over it (``checkpoint``, and ``reads_tower_output`` where
the projector reads the tower's output); what differs (the projector, token
counts, names) is tested beside it there.
"""

from __future__ import annotations

import nnsight
import pytest
import torch

from envoys import StandardizedTransformer
from envoys.testing import chat_prompt, noise_image

ONE = [noise_image(32, 32, seed=0)]
TWO = [noise_image(32, 32, seed=0), noise_image(64, 48, seed=1)]  # 32x32, then 64 wide x 48 high


def prompt(model, images) -> str:
    return chat_prompt(model.processor, len(images), "What is in the picture?")


def processed(model, images) -> dict:
    return model.processor(text=[prompt(model, images)], images=images, return_tensors="pt")


def image_sizes(model, images) -> list[tuple[int, int]]:
    """The stock processor's ``image_sizes``: each image's [height, width] in pixels after resizing."""
    return [(int(h), int(w)) for h, w in processed(model, images)["image_sizes"]]


def patch_grids(model, images) -> list[tuple[int, int]]:
    """Each image's grid of patches (rows, columns), from the processor's sizes and the tower's patch size."""
    patch = model.config.vision_config.patch_size
    return [(h // patch, w // patch) for h, w in image_sizes(model, images)]


def patch_counts(model, images) -> list[int]:
    return [rows * columns for rows, columns in patch_grids(model, images)]


def bounds(counts: list[int]) -> list[tuple[int, int]]:
    """Each image's [start, end) on the packed row."""
    ends = torch.tensor(counts).cumsum(0).tolist()
    return list(zip([0, *ends[:-1]], ends))


class PixtralTowerSuite:
    """The Pixtral tower's tests on ``checkpoint``, its model (``model``) loaded once for the class that declares it
    (eager, float32, with its processor).

    ``reads_tower_output``: whether the host's projector reads the tower's last_hidden_state (its output), not its
    hidden states at vision_feature_layer.
    """

    checkpoint: str
    reads_tower_output = False

    @pytest.fixture(scope="class")
    def model(self, tiny_checkpoint) -> StandardizedTransformer:
        return StandardizedTransformer(
            tiny_checkpoint(self.checkpoint), task="image-text-to-text", device="cpu", attn_implementation="eager",
            dispatch=True,  # the weights loaded: the grids are checked against the modules' own arithmetic
        )

    def test_patch_embeddings_are_the_convolution_cropped_per_image_and_packed(self, model):
        inputs = processed(model, TWO)
        vision = model.vision
        with model.trace(prompt(model, TWO), images=TWO):
            grid = vision.patch_embed.output.save()
            patches = vision.patch_embeddings.save()
            block_input = vision.layers[0].layer_input.save()
        pixels, patch = inputs["pixel_values"], model.config.vision_config.patch_size
        convolution = vision._module.patch_conv
        # patch_embed.output stays the padded grid: the convolution of the padded batch
        assert grid.shape == (2, convolution.out_channels, pixels.shape[2] // patch, pixels.shape[3] // patch)
        assert torch.equal(grid, torch.nn.functional.conv2d(pixels, convolution.weight, stride=patch))
        cropped = [image[:, :rows, :columns] for image, (rows, columns) in zip(grid, patch_grids(model, TWO))]
        assert cropped[0].shape[1:] != grid.shape[2:]  # the first image is cropped in both sides
        expected = torch.cat([image.flatten(1).T for image in cropped]).unsqueeze(0)
        assert torch.equal(patches, expected)
        assert torch.equal(block_input, vision._module.ln_pre(patches))  # no position embedding is added: rotary

    def test_block_values_add_up_and_tower_writes_reach_the_next_block(self, model):
        text = prompt(model, TWO)
        first, second = model.vision.layers[0], model.vision.layers[1]
        with model.trace(text, images=TWO):
            parts = nnsight.save([first.layer_input, first.attention_output, first.mlp_output, first.layer_output])
            following = second.layer_input.save()
        layer_input, attention, mlp, output = parts
        assert torch.equal(layer_input + attention + mlp, output)
        assert torch.equal(following, output)
        with model.trace(text, images=TWO):
            first.layer_output = torch.ones_like(first.layer_output)
            following = second.layer_input.save()
        assert torch.equal(following, torch.ones_like(following))

    def test_an_in_place_edit_of_tower_output_reaches_the_projector_and_an_assignment_only_where_it_reads_the_output(
            self, model):
        text = prompt(model, ONE)
        total = sum(patch_counts(model, ONE))
        with model.trace(text, images=ONE):
            model.vision.tower_output[:] = 0
            in_place = model.projector.input.save()
        with model.trace(text, images=ONE):
            model.vision.tower_output = torch.zeros(1, total, model.vision.vision_hidden_size)
            assigned = model.projector.input.save()
        with model.trace(text, images=ONE):
            model.vision.layers[-1].layer_output = torch.zeros(1, total, model.vision.vision_hidden_size)
            via_block = model.projector.input.save()
        assert torch.equal(in_place, torch.zeros_like(in_place))
        # the projector reads the tower's output, or the block's hidden state, which the assignment leaves
        assert torch.equal(assigned, torch.zeros_like(assigned)) == self.reads_tower_output
        assert torch.equal(via_block, torch.zeros_like(via_block))

    def test_an_ablation_reaches_the_logits_and_the_next_run_is_clean(self, model):
        text = prompt(model, TWO)
        with model.trace(text, images=TWO):
            clean = model.logits.save()
        with model.trace(text, images=TWO):
            mask = model.vision.image_token_mask.save()
            model.vision.image_features[:] = 0
            first = model.layers[0].input.save()
            ablated = model.logits.save()
        assert torch.equal(first[mask], torch.zeros_like(first[mask]))
        assert not torch.equal(ablated, clean)
        with model.trace(text, images=TWO):
            again = model.logits.save()
        assert torch.equal(again, clean)
