"""StandardizedTransformer on a tiny Qwen2.5-Omni thinker: Qwen2.5-VL's windowed ViT beside a Whisper-like audio tower.

What is particular to it (the spec's contracts run on it in
test_vision_contracts.py): the thinker scatters audio first, so on a prompt
that carries audio and an image the image's scatter is the host's second
``masked_scatter`` call (``_1``) and ``image_features`` is the image's, not the
audio's; the audio tower keeps its native name and its rows reach the text
model at the audio tokens; the names land on the omni copy's modules; the
processor's video size comes from the tokenizer's ``size`` default, so a video
of 4 small frames is few tokens. Expected numbers come from the builder's
documented config and the processor, never from the code under test.
"""

from __future__ import annotations

import pytest
import torch
from transformers import AutoProcessor

from envoys import StandardizedTransformer
from envoys.tiny import chat_prompt, noise_audio, noise_image, noise_video

#: 32x32 noise: 64 patches of 4 px, 16 image tokens.
IMAGE = [noise_image(32, 32, seed=0)]
#: 1 s of noise at 16 kHz: 100 mel frames, 25 audio tokens.
AUDIO = [noise_audio(1.0, seed=0)]


@pytest.fixture(scope="module")
def model(tiny_checkpoint) -> StandardizedTransformer:
    return StandardizedTransformer(tiny_checkpoint("qwen2_5_omni_thinker"), task="image-text-to-text", device="cpu",
                                   attn_implementation="eager")


def test_the_names_are_the_omni_copys_modules(model):
    inner = model._module.model
    assert model.vision._module is inner.visual and model.projector._module is inner.visual.merger
    assert type(inner.visual).__name__ == "Qwen2_5OmniVisionEncoder"
    assert model.layers[0]._module is inner.language_model.layers[0]
    assert type(inner.audio_tower).__name__ == "Qwen2_5OmniAudioEncoder"


def test_audio_is_scattered_first_and_image_features_are_the_images(model):
    """Audio (scatter _0) then the image (_1): image_features is the image's 16 rows, the text model receives them at
    the image tokens and the audio tower's output at the audio tokens."""
    text = chat_prompt(model.processor, 1, "What do you see and hear?", audio=1)
    with model.trace(text, images=IMAGE, audio=AUDIO) as tracer:
        ids = model.input_ids.save()
        mask = model.vision.image_token_mask.save()
        heard = model.model.audio_tower.output.last_hidden_state.save()
        audio_scatter = model.model.source.inputs_embeds_masked_scatter_0.inputs.save()
        features = model.vision.image_features.save()
        first = model.layers[0].input.save()
        tracer.stop()
    audio_mask = ids == model._module.config.audio_token_id
    assert (int(mask.sum()), int(audio_mask.sum())) == (16, 25)
    assert not (mask & audio_mask).any()
    assert features.shape == (16, model.hidden_size) and heard.shape == (25, model.hidden_size)
    assert torch.equal(audio_scatter[0][1], heard)
    assert torch.equal(first[mask], features)
    assert torch.equal(first[audio_mask], heard)


def test_an_ablated_image_leaves_the_audio_rows(model):
    text = chat_prompt(model.processor, 1, "What do you see and hear?", audio=1)
    with model.trace(text, images=IMAGE, audio=AUDIO) as tracer:
        ids = model.input_ids.save()
        mask = model.vision.image_token_mask.save()
        heard = model.model.audio_tower.output.last_hidden_state.save()
        model.vision.image_features[:] = 0
        first = model.layers[0].input.save()
        tracer.stop()
    audio_mask = ids == model._module.config.audio_token_id
    assert torch.equal(first[mask], torch.zeros(16, model.hidden_size))
    assert torch.equal(first[audio_mask], heard)


def test_a_saved_processor_keeps_the_small_video_size(tiny_checkpoint):
    """The processor class's own video default is 128 to 768 times 28x28 pixels a frame; the tokenizer's ``size``
    default (the image processor's 256 to 4096 pixels) outranks it, saved: 4 frames of 32x32 are 2 temporal patches of
    8x8 patches, 32 video tokens, and images keep their sizes."""
    processor = AutoProcessor.from_pretrained(tiny_checkpoint("qwen2_5_omni_thinker"))
    assert processor.videos_kwargs["size"]["shortest_edge"] == 128 * 28 * 28  # the class's default, still there
    text = chat_prompt(processor, 1, "Describe.", videos=1)
    inputs = processor(text=text, images=IMAGE, videos=[noise_video(4, 32, 32)], return_tensors="pt")
    assert inputs["video_grid_thw"].tolist() == [[2, 8, 8]]
    assert inputs["image_grid_thw"].tolist() == [[1, 8, 8]]
    assert int((inputs["input_ids"] == processor.video_token_id).sum()) == 32
