"""StandardizedTransformer on a tiny Qwen3-Omni-MoE thinker: Qwen3-VL's ViT and DeepStack beside a Whisper-like audio
tower, on MoE text blocks.

What is particular to it (the spec's contracts run on it in
test_vision_contracts.py, the router's in test_moe_router.py): the thinker
scatters audio first (``_0``) and the image second (``_1``), so on a prompt
carrying both ``image_features`` is the image's and the audio tower's rows
reach the text model at the audio tokens; the audio tower's pre-norm blocks
sum; DeepStack adds the tower's tapped
block 0, merged by its own merger (native path ``merger_list``, which
transformers also names ``deepstack_merger_list``), after text block 0, at the
image positions only, the audio rows untouched (and, on a prompt with a video
too, at the image and video positions, in prompt order); block 0's MLP is the sparse
block and block 1's dense. Expected numbers come from the builder's documented
config, never from the code under test.
"""

from __future__ import annotations

import nnsight
import torch

from envoys.testing import chat_prompt, noise_audio, noise_image, noise_video

#: 32x32 noise (16 patches, 4 tokens) and 48 high x 64 wide (48 patches, 12 tokens).
IMAGES = [noise_image(32, 32, seed=0), noise_image(64, 48, seed=1)]
#: 1 s of noise at 16 kHz: 100 mel frames, 13 audio tokens.
AUDIO = [noise_audio(1.0, seed=0)]


CHECKPOINT = "qwen3_omni_moe_thinker"


def test_the_modules_are_the_omni_copys(model):
    inner = model._module.model
    assert type(inner.visual).__name__ == "Qwen3OmniMoeVisionEncoder"
    assert [type(block.mlp._module).__name__ for block in model.layers] == [
        "Qwen3OmniMoeThinkerTextSparseMoeBlock", "Qwen3OmniMoeThinkerTextMLP"]
    assert inner.visual.deepstack_merger_list is inner.visual.merger_list and len(inner.visual.merger_list) == 1
    assert type(inner.audio_tower).__name__ == "Qwen3OmniMoeAudioEncoder"


def test_audio_first_then_the_image_and_deepstack_at_the_image_positions_only(model):
    text = chat_prompt(model.processor, len(IMAGES), "What do you see and hear?", audio=1)
    with model.trace(text, images=IMAGES, audio=AUDIO) as tracer:
        mask = model.vision.image_token_mask.save()
        audio_mask = model.audio.audio_token_mask.save()
        heard = model.audio.audio_features.save()
        merged = model.vision.merger_list[0].output.save()
        features = model.vision.image_features.save()
        first = model.layers[0].input.save()
        out = model.layers[0].layer_output.save()
        added = model.layers[0].deepstack_output.save()
        entering = model.layers[1].input.save()
        tracer.stop()
    assert (int(mask.sum()), int(audio_mask.sum())) == (4 + 12, 13)
    assert features.shape == (16, model.hidden_size) and heard.shape == (13, model.hidden_size)
    assert torch.equal(first[mask], features) and torch.equal(first[audio_mask], heard)
    assert torch.equal(added, merged) and added.shape == (16, model.hidden_size)
    assert torch.equal(entering[mask], out[mask] + added) and torch.equal(entering[~mask], out[~mask])


def test_the_audio_towers_pre_norm_blocks_and_what_it_scatters(model):
    """Each audio block sums (fc2 is the MLP's last linear), packed over the clip's 13 frames after three stride-2
    convolutions; tower_output, normed and projected to the text width, is audio_features."""
    text = chat_prompt(model.processor, 0, "What do you hear?", audio=1)
    with model.trace(text, audio=AUDIO) as tracer:
        blocks = nnsight.save([])
        for block in model.audio.layers:
            blocks.append(nnsight.save([block.layer_input, block.attention_output, block.mlp_output,
                                        block.layer_output]))
        out = model.audio.tower_output.save()
        features = model.audio.audio_features.save()
        tracer.stop()
    for index, (layer_input, attention, mlp, output) in enumerate(blocks):
        assert layer_input.shape == (1, 13, 32), index
        assert torch.equal(layer_input + attention + mlp, output), index
    assert out.shape == (1, 13, model.hidden_size) and torch.equal(out[0], features)


def test_deepstack_adds_the_image_and_video_rows_in_prompt_order(model):
    """With an image and a video, the tapped features of both are added at their positions, in prompt order: the
    image's 4 rows, then the video's 8 (4 frames of 32x32: 2 temporal patches of 4x4 patches)."""
    text = chat_prompt(model.processor, 1, "Describe.", videos=1)
    with model.trace(text, images=IMAGES[:1], videos=[noise_video(4, 32, 32)]) as tracer:
        mask = model.vision.image_token_mask.save()
        video_mask = model.vision.video_token_mask.save()
        tapped = model.vision.merger_list[0].output.save()
        tapped_video = model.video.merger_list[0].output.save()
        features = model.vision.image_features.save()
        video_features = model.vision.video_features.save()
        first = model.layers[0].input.save()
        out = model.layers[0].layer_output.save()
        added = model.layers[0].deepstack_output.save()
        entering = model.layers[1].input.save()
        tracer.stop()
    visual = mask | video_mask
    assert (int(mask.sum()), int(video_mask.sum())) == (4, 8)
    assert torch.equal(first[mask], features) and torch.equal(first[video_mask], video_features)
    assert torch.equal(added, torch.cat([tapped, tapped_video]))  # the image precedes the video in the prompt
    assert torch.equal(entering[visual], out[visual] + added) and torch.equal(entering[~visual], out[~visual])
