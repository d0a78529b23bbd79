"""VipLlava: what is particular to it, beyond the vision contracts (tests/test_vision_contracts.py).

Its projector reads several tower states at once: ``hidden_states[k]`` for
each ``k`` of ``vision_feature_layer`` (the tiny checkpoint's ``[-1, 1]``: the
last block's output, then block 0's), each without its CLS, joined on the
feature axis.
"""

from __future__ import annotations

import pytest
import torch

from envoys import StandardizedTransformer
from envoys.testing import chat_prompt, noise_image

IMAGE = noise_image(32, 32, seed=3)


@pytest.fixture(scope="module")
def model(tiny_checkpoint):
    return StandardizedTransformer(tiny_checkpoint("vipllava"), task="image-text-to-text")


def test_the_projector_receives_each_feature_layer_without_its_cls_joined(model):
    assert list(model.config.vision_feature_layers) == [-1, 1]  # the field's name on every release
    with model.trace(chat_prompt(model.processor, 1, "what is it"), images=[IMAGE]):
        first = model.vision.layers[0].layer_output.save()  # hidden_states[1]
        last = model.vision.layers[-1].layer_output.save()  # hidden_states[-1]
        received = model.projector.input.save()
    assert received.shape == (1, 16, 2 * model.vision.vision_hidden_size)
    assert torch.equal(received, torch.cat([last[:, 1:], first[:, 1:]], dim=-1))


def test_an_edit_of_the_last_block_reaches_only_its_part_of_what_the_projector_receives(model):
    prompt = chat_prompt(model.processor, 1, "what is it")
    width = model.vision.vision_hidden_size
    with model.trace(prompt, images=[IMAGE]):
        clean = model.projector.input.save()
    with model.trace(prompt, images=[IMAGE]):
        model.vision.layers[-1].layer_output[:] = 0.5
        edited = model.projector.input.save()
    assert torch.equal(edited[..., :width], torch.full_like(edited[..., :width], 0.5))
    assert torch.equal(edited[..., width:], clean[..., width:])
    assert not torch.equal(clean[..., :width], edited[..., :width])
