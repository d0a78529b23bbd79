"""Audio values on every checkpoint whose family serves audio: where a clip meets the text model (``model.audio``), the
audio tower's blocks, writes, and the reasons an audio value is unavailable.

The clip is one second of noise (``noise_audio(1.0)``). Expected sizes are the
builders' documented ones (the comments say how); the equalities are the
spec's, exact (float32, eager attention). Reads follow the forward: the masks
first, then the audio tower, the features, the text model; where a prompt
holds an image too, one medium's features are read per trace (the omni
thinkers scatter the audio first, Gemma 4 and Nemotron-H Omni last).
"""

from __future__ import annotations

import re

import pytest
import torch
from family_inputs import family_of

from envoys import StandardizedTransformer
from envoys.audio import AudioLayer, ConformerLayer
from envoys.core.values import Unavailable
from envoys.testing import CONTRACTS, NAMES, chat_prompt, noise_audio, noise_image

CLIP = noise_audio(1.0, seed=21)
IMAGE = noise_image(32, 32, seed=22)


BUILDERS = [name for name in NAMES if "audio" in family_of(name).media]


def test_a_checkpoint_has_an_audio_row_exactly_where_its_family_takes_audio():
    rows = {name for name, row in CONTRACTS.items() if row.audio is not None}
    assert set(BUILDERS) == rows, set(BUILDERS) ^ rows


@pytest.fixture(scope="module", params=BUILDERS)
def name(request):
    return request.param


@pytest.fixture(scope="module")
def model(name, tiny_checkpoint):
    return StandardizedTransformer(tiny_checkpoint(name), task="image-text-to-text", attn_implementation="eager")


@pytest.fixture(scope="module")
def row(name):
    return CONTRACTS[name].audio


def audio_prompt(model, images: int = 0) -> str:
    return chat_prompt(model.processor, images, "What do you hear?", audio=1)


def clip_alone(model):
    """The clip's values alone: mask, the first audio block's output, the tower's output, the features, and the
    first text block's input."""
    with model.trace(audio_prompt(model), audio=[CLIP]):
        mask = model.audio.audio_token_mask.save()
        stream = model.audio.layers[0].layer_output.save()
        tower = model.audio.tower_output.save()
        features = model.audio.audio_features.save()
        entering = model.layers[0].input.save()
    return mask, stream, tower, features, entering


def test_a_clip_meets_the_text_model_at_its_tokens(model, row):
    mask, stream, tower, features, entering = clip_alone(model)
    assert mask.dtype == torch.bool and mask.shape == entering.shape[:2] and int(mask.sum()) == row.tokens
    assert features.shape == (row.tokens, model.hidden_size)
    assert torch.equal(entering[mask], features)
    assert stream.shape == row.stream and tower.shape == row.output


def test_an_image_and_a_clip_in_one_prompt_each_meet_their_own_tokens(model, row):
    *_, alone, _ = clip_alone(model)
    prompt = audio_prompt(model, images=1)
    with model.trace(prompt, images=[IMAGE], audio=[CLIP]):
        image_mask = model.vision.image_token_mask.save()
        audio_mask = model.audio.audio_token_mask.save()
        features = model.audio.audio_features.save()
        entering = model.layers[0].input.save()
    assert not (image_mask & audio_mask).any() and int(audio_mask.sum()) == row.tokens
    assert torch.equal(entering[audio_mask], features) and torch.equal(features, alone)
    with model.trace(prompt, images=[IMAGE], audio=[CLIP]):
        image_features = model.vision.image_features.save()
        entering = model.layers[0].input.save()
    assert torch.equal(entering[image_mask], image_features)


def test_the_audio_blocks_values(model, row):
    block = model.audio.layers[0]
    if isinstance(block, ConformerLayer):
        for value in ("attention_output", "mlp_output"):
            with pytest.raises(Unavailable, match=f"audio.layers\\[0\\].{value} is unavailable: this is a Conformer"):
                getattr(block, value)
        with model.trace(audio_prompt(model), audio=[CLIP]):
            entering = block.layer_input.save()
            leaving = block.layer_output.save()
        assert entering.shape == leaving.shape == row.stream
        return
    assert isinstance(block, AudioLayer)  # pre-norm: the stream is the sum of its parts, exactly
    with model.trace(audio_prompt(model), audio=[CLIP]):
        entering = block.layer_input.save()
        attention = block.attention_output.save()
        mlp = block.mlp_output.save()
        leaving = block.layer_output.save()
    assert entering.shape == row.stream
    assert torch.equal(entering + attention + mlp, leaving)


def test_a_write_to_the_audio_features_is_what_the_text_model_receives(model, row):
    written = torch.randn(row.tokens, model.hidden_size, generator=torch.Generator().manual_seed(0))
    with model.trace(audio_prompt(model, images=1), images=[IMAGE], audio=[CLIP]):
        image_mask = model.vision.image_token_mask.save()
        audio_mask = model.audio.audio_token_mask.save()
        model.audio.audio_features = written
        entering = model.layers[0].input.save()
    with model.trace(audio_prompt(model, images=1), images=[IMAGE], audio=[CLIP]):
        clean = model.layers[0].input.save()
    assert torch.equal(entering[audio_mask], written)
    assert torch.equal(entering[image_mask], clean[image_mask])


def test_a_write_to_an_audio_block_reaches_the_audio_tokens_only(model):
    with model.trace(audio_prompt(model, images=1), images=[IMAGE], audio=[CLIP]):
        clean = model.layers[0].input.save()
    with model.trace(audio_prompt(model, images=1), images=[IMAGE], audio=[CLIP]):
        image_mask = model.vision.image_token_mask.save()
        audio_mask = model.audio.audio_token_mask.save()
        model.audio.layers[0].layer_output[:] = model.audio.layers[0].layer_output * 2 + 1
        entering = model.layers[0].input.save()
    assert torch.equal(entering[image_mask], clean[image_mask])
    assert not torch.isclose(entering[audio_mask], clean[audio_mask]).all(-1).any()


def test_an_audio_value_on_a_prompt_without_audio_says_why(model):
    image_prompt = chat_prompt(model.processor, 1, "What is in the picture?")
    for read in ("audio.audio_features", "audio.layers[0].layer_output", "audio.tower_output"):
        with pytest.raises(Unavailable, match=re.escape(f"{read} is unavailable: no audio reached this forward")):
            with model.trace(image_prompt, images=[IMAGE]):
                eval(f"model.{read}", {"model": model}).save()
    with model.trace(image_prompt, images=[IMAGE]):
        mask = model.audio.audio_token_mask.save()
    assert not mask.any()


def test_support_and_print_list_the_audio_values(model):
    support = model.support()
    assert support["audio.audio_token_mask"] is None and support["audio.audio_features"] is None
    assert support["audio.layer_output"] is None and support["audio.tower_output"] is None
    shown = repr(model)
    assert re.search(r"\n  audio: \w+", shown)
    assert "audio_token_mask -> AudioTokenMask" in shown and "audio_features -> AudioFeatures" in shown


def test_a_family_without_audio_and_a_text_only_load_say_why(tiny_checkpoint):
    model = StandardizedTransformer(tiny_checkpoint("qwen2_5_vl"), task="image-text-to-text")
    with pytest.raises(Unavailable, match="audio.layers is unavailable: qwen2_5_vl takes no audio"):
        model.audio.layers
    assert model.support()["audio"].startswith("qwen2_5_vl takes no audio")
    assert "\n  audio: none (qwen2_5_vl takes no audio" in repr(model)
    text_only = StandardizedTransformer(tiny_checkpoint(next(name for name in NAMES if CONTRACTS[name].audio)))
    with pytest.raises(Unavailable, match="audio.audio_features is unavailable: this model was loaded without task="):
        text_only.audio.audio_features
