"""StandardizedTransformer on a tiny Qwen3-Omni-MoE thinker: Qwen3-VL's ViT and DeepStack beside a Whisper-like audio
tower, on MoE text blocks.

What is particular to it (the spec's contracts run on it in
test_vision_contracts.py, the router's in test_moe_router.py): the thinker
scatters audio first (``_0``) and the image second (``_1``), so on a prompt
carrying both ``image_features`` is the image's and the audio tower's rows
reach the text model at the audio tokens; DeepStack adds the tower's tapped
block 0, merged by its own merger (native path ``merger_list``, which
transformers also names ``deepstack_merger_list``), after text block 0, at the
image positions only, the audio rows untouched; block 0's MLP is the sparse
block and block 1's dense. Expected numbers come from the builder's documented
config, never from the code under test.
"""

from __future__ import annotations

import pytest
import torch

from envoys import StandardizedTransformer
from envoys.tiny import chat_prompt, noise_audio, noise_image

#: 32x32 noise (16 patches, 4 tokens) and 48 high x 64 wide (48 patches, 12 tokens).
IMAGES = [noise_image(32, 32, seed=0), noise_image(64, 48, seed=1)]
#: 1 s of noise at 16 kHz: 100 mel frames, 13 audio tokens.
AUDIO = [noise_audio(1.0, seed=0)]


@pytest.fixture(scope="module")
def model(tiny_checkpoint) -> StandardizedTransformer:
    return StandardizedTransformer(tiny_checkpoint("qwen3_omni_moe_thinker"), task="image-text-to-text",
                                   device="cpu", attn_implementation="eager")


def test_the_names_are_the_omni_copys_modules(model):
    inner = model._module.model
    assert model.vision._module is inner.visual and model.projector._module is inner.visual.merger
    assert type(inner.visual).__name__ == "Qwen3OmniMoeVisionEncoder"
    assert [type(block.mlp._module).__name__ for block in model.layers] == [
        "Qwen3OmniMoeThinkerTextSparseMoeBlock", "Qwen3OmniMoeThinkerTextMLP"]
    assert inner.visual.deepstack_merger_list is inner.visual.merger_list and len(inner.visual.merger_list) == 1
    assert type(inner.audio_tower).__name__ == "Qwen3OmniMoeAudioEncoder"


def test_audio_first_then_the_image_and_deepstack_at_the_image_positions_only(model):
    text = chat_prompt(model.processor, len(IMAGES), "What do you see and hear?", audio=1)
    with model.trace(text, images=IMAGES, audio=AUDIO) as tracer:
        ids = model.input_ids.save()
        mask = model.vision.image_token_mask.save()
        heard = model.model.audio_tower.output.last_hidden_state.save()
        merged = model.vision.merger_list[0].output.save()
        features = model.vision.image_features.save()
        first = model.layers[0].input.save()
        out = model.layers[0].layer_output.save()
        added = model.layers[0].deepstack_output.save()
        entering = model.layers[1].input.save()
        tracer.stop()
    audio_mask = ids == model._module.config.audio_token_id
    assert (int(mask.sum()), int(audio_mask.sum())) == (4 + 12, 13)
    assert features.shape == (16, model.hidden_size) and heard.shape == (13, model.hidden_size)
    assert torch.equal(first[mask], features) and torch.equal(first[audio_mask], heard)
    assert torch.equal(added, merged) and added.shape == (16, model.hidden_size)
    assert torch.equal(entering[mask], out[mask] + added) and torch.equal(entering[~mask], out[~mask])
