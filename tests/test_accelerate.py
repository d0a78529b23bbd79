"""Models that accelerate dispatches with ``device_map=``: parts offloaded to disk on CPU.

accelerate wraps each module it places (``_hf_hook``, the class forward kept in ``_old_forward``); the
rewritten forward runs inside that hook (weights loaded from disk and moved in and out as accelerate does).
Every value equals an unsharded load's exactly, an ablation reaches the logits, and no module is hooked twice.
"""

from __future__ import annotations

import nnsight
import pytest
import torch
from nnsight.intervention.source import STATE

from envoys import StandardizedTransformer
from envoys.testing import chat_prompt, noise_image
from instrument import installed
from instrument.install import BODY

IMAGES = [noise_image(32, 32, seed=0)]

#: Offloaded to disk: the tower; the text blocks; the scatter host's children (lm_head keeps the tied embedding).
DEVICE_MAPS = {
    "tower": {"model.vision_tower": "disk", "model.multi_modal_projector": "cpu", "model.language_model": "cpu",
              "lm_head": "cpu"},
    "text_blocks": {"model.vision_tower": "cpu", "model.multi_modal_projector": "cpu",
                    "model.language_model.embed_tokens": "cpu", "model.language_model.layers": "disk",
                    "model.language_model.norm": "cpu", "model.language_model.rotary_emb": "cpu", "lm_head": "cpu"},
    "host_children": {"model.vision_tower": "disk", "model.multi_modal_projector": "disk",
                      "model.language_model.embed_tokens": "cpu", "model.language_model.layers": "disk",
                      "model.language_model.norm": "disk", "model.language_model.rotary_emb": "disk",
                      "lm_head": "cpu"},
}


@pytest.fixture(scope="module")
def path(tiny_checkpoint):
    return tiny_checkpoint("llava-siglip")


@pytest.fixture(scope="module")
def unsharded(path):
    return StandardizedTransformer(path, task="image-text-to-text", device="cpu", attn_implementation="eager")


@pytest.fixture(scope="module", params=list(DEVICE_MAPS))
def offloaded(request, path, tmp_path_factory):
    model = StandardizedTransformer(path, task="image-text-to-text", device_map=DEVICE_MAPS[request.param],
                                    offload_folder=str(tmp_path_factory.mktemp("offload")), attn_implementation="eager")
    assert not model.dispatched and "_hf_hook" not in model._module.__dict__  # placed when the weights load
    model.dispatch()  # what the first trace does; here, so that the hooks can be looked at first
    return model


def prompt(model) -> str:
    return chat_prompt(model.processor, 1, "What is in the picture?")


def read_all(model) -> list[torch.Tensor]:
    """Every vision value, a text block's interior, and the logits, in forward order."""
    vision, block = model.vision, model.layers[0]
    with model.trace(prompt(model), images=IMAGES):
        seen = nnsight.save([
            vision.patch_embeddings,
            vision.layers[0].layer_input, vision.layers[0].self_attn.attention_probabilities,
            vision.layers[0].attention_output, vision.layers[0].mlp_output, vision.layers[0].layer_output,
            vision.tower_output, vision.image_features,
            block.self_attn.attention_queries, block.self_attn.attention_probabilities, block.layer_output,
            model.logits,
        ])
    return seen


def test_offloaded_parts_are_on_disk_and_hooked_once(offloaded):
    hooked = [module for module in offloaded._module.modules() if "_hf_hook" in module.__dict__]
    assert hooked and "disk" in offloaded._module.hf_device_map.values()
    for module in hooked:
        # One accelerate hook, run by nnsight's controller around the body; the class's forward kept aside.
        assert type(module.__dict__["_hf_hook"]).__name__ != "SequentialHook"
        assert module.__dict__["_old_forward"].__func__ in (type(module).forward, module.__dict__.get(BODY))
    rewritten = [module for module in hooked if installed(module)]
    assert rewritten  # attention blocks on disk carry a rewrite rule
    for module in rewritten:
        # nnsight's controller runs the rewritten forward (inside the hook), not the class's.
        assert module.__dict__[STATE].body is module.__dict__[BODY] is not type(module).forward


def test_values_equal_an_unsharded_load(offloaded, unsharded):
    for got, expected in zip(read_all(offloaded), read_all(unsharded), strict=True):
        assert torch.equal(got, expected)


def test_an_ablation_reaches_the_logits(offloaded, unsharded):
    def ablated(model):
        with model.trace(prompt(model), images=IMAGES):
            model.vision.layers[0].self_attn.attention_probabilities[:] = 0
            model.vision.image_features[:] = 0
            logits = model.logits.save()
        return logits

    with offloaded.trace(prompt(offloaded), images=IMAGES):
        clean = offloaded.logits.save()
    got = ablated(offloaded)
    assert not torch.equal(got, clean) and torch.equal(got, ablated(unsharded))


def test_several_image_invokes_equal_an_unsharded_load(offloaded, unsharded):
    """Two invokes, two images of two sizes and one: each invoke's tower values, features and logits as on a model
    loaded whole (`envoys.invokes`)."""
    two, one = [noise_image(32, 32, seed=1), noise_image(64, 48, seed=2)], IMAGES

    def invokes(model):
        with model.trace() as tracer:
            with tracer.invoke(chat_prompt(model.processor, 2, "What differs?"), images=two):
                first = nnsight.save([model.vision.layers[0].layer_output, model.vision.image_features])
            with tracer.invoke(prompt(model), images=one):
                second = nnsight.save([model.vision.layers[0].layer_output, model.vision.image_features, model.logits])
        return [*first, *second]

    for got, expected in zip(invokes(offloaded), invokes(unsharded), strict=True):
        assert torch.equal(got, expected)
