"""StandardizedTransformer on a tiny Qwen2.5-Omni thinker: Qwen2.5-VL's windowed ViT beside a Whisper-like audio tower.

What is particular to it (the spec's contracts run on it in
test_vision_contracts.py): the thinker scatters audio first, so on a prompt
that carries audio and an image the image's scatter is the host's second
``masked_scatter`` call (``_1``) and ``image_features`` is the image's, not the
audio's; the audio tower (``model.audio``) has pre-norm blocks whose stream
sums, and its output is what reaches the text model at the audio tokens; the
videos' run of the tower comes before the image's scatter; the names land on
the omni copy's modules; the processor's video size comes from the
tokenizer's ``size`` default, so a video of 4 small frames is few tokens. Expected numbers come from the builder's
documented config and the processor, never from the code under test.
"""

from __future__ import annotations

import nnsight
import torch
from transformers import AutoProcessor

from envoys.testing import chat_prompt, noise_audio, noise_image, noise_video

#: 32x32 noise: 64 patches of 4 px, 16 image tokens.
IMAGE = [noise_image(32, 32, seed=0)]
#: 1 s of noise at 16 kHz: 100 mel frames, 25 audio tokens.
AUDIO = [noise_audio(1.0, seed=0)]


CHECKPOINT = "qwen2_5_omni_thinker"


def test_the_modules_are_the_omni_copys(model):
    inner = model._module.model
    assert type(inner.visual).__name__ == "Qwen2_5OmniVisionEncoder"
    assert type(inner.audio_tower).__name__ == "Qwen2_5OmniAudioEncoder"


def test_audio_is_scattered_first_and_image_features_are_the_images(model):
    """Audio (scatter _0) then the image (_1): image_features is the image's 16 rows, the text model receives them at
    the image tokens, and the audio tower's output (25 tokens, already the text width) at the audio tokens."""
    text = chat_prompt(model.processor, 1, "What do you see and hear?", audio=1)
    with model.trace(text, images=IMAGE, audio=AUDIO) as tracer:
        ids = model.input_ids.save()
        mask = model.vision.image_token_mask.save()
        audio_mask = model.audio.audio_token_mask.save()
        heard = model.model.audio_tower.output.last_hidden_state.save()
        audio_scatter = model.model.source.inputs_embeds_masked_scatter_0.inputs.save()
        features = model.vision.image_features.save()
        first = model.layers[0].input.save()
        tracer.stop()
    assert torch.equal(audio_mask, ids == model._module.config.audio_token_id)
    assert (int(mask.sum()), int(audio_mask.sum())) == (16, 25)
    assert not (mask & audio_mask).any()
    assert features.shape == (16, model.hidden_size) and heard.shape == (25, model.hidden_size)
    assert torch.equal(audio_scatter[0][1], heard)
    assert torch.equal(first[mask], features)
    assert torch.equal(first[audio_mask], heard)


def test_the_audio_towers_pre_norm_blocks_and_what_it_scatters(model):
    """Each audio block: layer_input + attention_output + mlp_output == layer_output (fc2 is the MLP's last linear),
    packed over the clip's 50 frames after the stride-2 convolution; tower_output, pooled 2 to 1 and projected, is
    audio_features, which the text model receives at the audio tokens."""
    text = chat_prompt(model.processor, 0, "What do you hear?", audio=1)
    with model.trace(text, audio=AUDIO) as tracer:
        mask = model.audio.audio_token_mask.save()
        blocks = nnsight.save([])
        for block in model.audio.layers:
            blocks.append(nnsight.save([block.layer_input, block.attention_output, block.mlp_output,
                                        block.layer_output]))
        out = model.audio.tower_output.save()
        features = model.audio.audio_features.save()
        first = model.layers[0].input.save()
        tracer.stop()
    assert model.audio.num_layers == 2 and model.audio.audio_hidden_size == 32 and model.audio.num_heads == 2
    for index, (layer_input, attention, mlp, output) in enumerate(blocks):
        assert layer_input.shape == (1, 50, 32), index
        assert torch.equal(layer_input + attention + mlp, output), index
    assert torch.equal(blocks[1][0], blocks[0][3])
    assert out.shape == (1, 25, model.hidden_size) and torch.equal(out[0], features)
    assert torch.equal(first[mask], features)


def test_an_ablated_image_leaves_the_audio_rows(model):
    text = chat_prompt(model.processor, 1, "What do you see and hear?", audio=1)
    with model.trace(text, images=IMAGE, audio=AUDIO) as tracer:
        mask = model.vision.image_token_mask.save()
        audio_mask = model.audio.audio_token_mask.save()
        heard = model.audio.audio_features.save()
        model.vision.image_features[:] = 0
        first = model.layers[0].input.save()
        tracer.stop()
    assert torch.equal(first[mask], torch.zeros(16, model.hidden_size))
    assert torch.equal(first[audio_mask], heard)


def test_the_videos_run_comes_before_image_features(model):
    """The host runs the tower on the image, then on the video, and only then scatters either: model.video's values
    are read before image_features; the video's 4 frames of 32x32 are 2 temporal patches of 8x8 patches (128 rows),
    32 video tokens scattered at _2."""
    text = chat_prompt(model.processor, 1, "Describe.", videos=1)
    with model.trace(text, images=IMAGE, videos=[noise_video(4, 32, 32)]) as tracer:
        mask = model.vision.image_token_mask.save()
        video_mask = model.vision.video_token_mask.save()
        seen = model.vision.layers[0].layer_output.save()
        watched = model.video.layers[0].layer_output.save()
        features = model.vision.image_features.save()
        video_features = model.vision.video_features.save()
        first = model.layers[0].input.save()
        tracer.stop()
    assert (int(mask.sum()), int(video_mask.sum())) == (16, 32)
    assert seen.shape == (1, 64, 32) and watched.shape == (1, 128, 32)
    assert video_features.shape == (32, model.hidden_size)
    assert torch.equal(first[mask], features) and torch.equal(first[video_mask], video_features)


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
