"""A StandardizedTransformer that goes out of scope is collected: nothing the library installs (rewritten
forwards, site helpers, the views it hands out) keeps its module alive."""

from __future__ import annotations

import gc
import weakref

import nnsight
import pytest

from envoys import StandardizedTransformer
from envoys.testing import chat_prompt, noise_image


def traced_and_dropped(path) -> tuple[list[weakref.ref], list]:
    """Load, trace once reading vision values (views among them), drop the model; weak references to every
    module of it, and the values read (which must not keep any alive)."""
    model = StandardizedTransformer(path, task="image-text-to-text", device="cpu", attn_implementation="eager")
    with model.trace(chat_prompt(model.processor, 1, "What is in the picture?"), images=[noise_image(32, 32)]):
        values = nnsight.save([model.vision.patch_embeddings, model.vision.layers[0].layer_output,
                               model.vision.tower_output, model.vision.image_features, model.logits])
    return [weakref.ref(module) for module in model._module.modules()], values


@pytest.mark.parametrize("name", ["llava-siglip", "qwen3_vl"])
def test_a_model_out_of_scope_is_collected(tiny_checkpoint, name):
    modules, values = traced_and_dropped(tiny_checkpoint(name))
    gc.collect()
    assert len(values) == 5 and all(module() is None for module in modules)
