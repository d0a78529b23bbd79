"""Cosmos3-Omni on a tiny checkpoint: Qwen3-VL's tower, DeepStack and text model under their own host, exact.

What is particular to it: the host (``Cosmos3OmniModel``, transformers' copy
of Qwen3-VL's) is its own class, with its own scatter rule, while the tower,
the text model and every envoy are Qwen3-VL's; the processor is Qwen3-VL's;
the weights of the unified checkpoint that the reasoner does not hold (the
generator's, the sound and action towers') are dropped at load. The spec's
contracts, the DeepStack equality among them, run on it in
test_vision_contracts.py.
"""

from __future__ import annotations

import nnsight
import pytest
import torch
from family_inputs import prompt
from safetensors.torch import load_file, save_file

from envoys import StandardizedTransformer, Unavailable
from envoys.families import cosmos3_omni, qwen3_vl
from envoys.testing import noise_image
from instrument import installed

ONE = [noise_image(32, 32, seed=0)]
TWO = [noise_image(32, 32, seed=0), noise_image(48, 64, seed=1)]


def load(path) -> StandardizedTransformer:
    return StandardizedTransformer(path, task="image-text-to-text", device="cpu", attn_implementation="eager")


@pytest.fixture(scope="module")
def model(tiny_checkpoint):
    return load(tiny_checkpoint("cosmos3_omni"))


def test_its_host_is_its_own_and_everything_else_is_qwen3_vls(model):
    from transformers.models.cosmos3_omni.modeling_cosmos3_omni import Cosmos3OmniModel
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLTextModel, Qwen3VLVisionModel

    inner = model._module.model
    assert type(inner) is Cosmos3OmniModel and type(model.processor).__name__ == "Qwen3VLProcessor"
    assert type(inner.visual) is Qwen3VLVisionModel and type(inner.language_model) is Qwen3VLTextModel
    assert cosmos3_omni.RENAME is qwen3_vl.RENAME and cosmos3_omni.ENVOYS is qwen3_vl.ENVOYS
    assert list(installed(inner)) == ["cosmos3_omni.image-scatter"]  # its host's forward: a rule of its own
    assert list(installed(inner.language_model)) == ["qwen3_vl.deepstack"]


@pytest.mark.parametrize("images", [ONE, TWO], ids=["one-image", "two-images"])
def test_each_tapped_block_receives_its_own_mergers_output(model, images):
    taps = len(model._module.model.visual.deepstack_merger_list)
    with model.trace(prompt(model, images), images=images) as tracer:
        merged = nnsight.save([model.vision.deepstack_merger_list[k].output for k in range(taps)])
        projected = model.projector.output.save()
        features = model.vision.image_features.save()
        added = nnsight.save([model.layers[k].deepstack_output for k in range(taps)])
        tracer.stop()
    assert taps == 2 and torch.equal(features, projected)
    for k in range(taps):
        assert torch.equal(added[k], merged[k]) and added[k].shape == features.shape, k
    assert not torch.equal(added[0], added[1])
    with pytest.raises(Unavailable, match=r"layers\[2\]\.deepstack_output is unavailable: .*past the taps"):
        model.layers[2].deepstack_output


def test_the_unified_checkpoints_other_towers_are_dropped_at_load(model, tiny_checkpoint, tmp_path):
    """A checkpoint that also carries the generator's, the sound tower's and the action tower's weights (the unified
    Cosmos 3 checkpoint) loads as the same reasoner and computes the same logits."""
    source = tiny_checkpoint("cosmos3_omni")
    for item in source.iterdir():
        (tmp_path / item.name).write_bytes(item.read_bytes())
    weights = load_file(source / "model.safetensors")
    extra = {
        "audio_proj_in.weight": torch.ones(4, 4), "action_modality_embed": torch.ones(4),
        "model.language_model.layers.0.self_attn.add_q_proj.weight": torch.ones(4, 4), "proj_out.weight": torch.ones(4),
    }
    save_file({**weights, **extra}, tmp_path / "model.safetensors", metadata={"format": "pt"})
    unified = load(tmp_path)
    assert not any(name in dict(unified._module.named_parameters()) for name in extra)
    text = prompt(model, ONE)
    with model.trace(text, images=ONE) as tracer:
        clean = model.logits.save()
        tracer.stop()
    with unified.trace(text, images=ONE) as tracer:
        logits = unified.logits.save()
        tracer.stop()
    assert torch.equal(logits, clean)
