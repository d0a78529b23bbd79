"""Video values on every checkpoint whose family serves videos (its row's ``video``): where the frames meet the
text model, the tower's run on them, writes, and the reasons a video value is unavailable.

Reads follow the forward: the masks, the tower's runs (the images' before the
videos'), the features the host scatters (the images' before the videos'),
then the text model. Expected sizes come from the table; the equalities are
the spec's, exact (float32, eager attention).
"""

from __future__ import annotations

import re

import pytest
import torch
from family_inputs import family_of
from nnsight.intervention.interleaver import OutOfOrderError
from rounding import assert_batch_close

from envoys import StandardizedTransformer
from envoys.core.values import Unavailable
from envoys.image.grids import GridError
from envoys.testing import CONTRACTS, NAMES, chat_prompt, noise_image, noise_video
from envoys.testing.contract import FRAMES, SIDE

BUILDERS = [name for name in NAMES if "video" in family_of(name).media]
IMAGE = noise_image(32, 32, seed=11)
VIDEO = noise_video(FRAMES, SIDE, SIDE, seed=12)


def test_a_checkpoint_has_a_video_row_exactly_where_its_family_takes_videos():
    rows = {name for name, row in CONTRACTS.items() if row.video is not None}
    assert set(BUILDERS) == rows, set(BUILDERS) ^ rows


@pytest.fixture(scope="module", params=BUILDERS)
def name(request):
    return request.param


@pytest.fixture(scope="module")
def model(name, tiny_checkpoint):
    return StandardizedTransformer(tiny_checkpoint(name), task="image-text-to-text", attn_implementation="eager")


@pytest.fixture(scope="module")
def row(name):
    return CONTRACTS[name].video


def video_prompt(model, images: int = 0) -> str:
    return chat_prompt(model.processor, images, "What happens in the video?", videos=1)


def video_only(model):
    """The video-only prompt's values: mask, the tower's run on the video (a block's output, tower_output), the
    features and the first block's input."""
    with model.trace(video_prompt(model), videos=[VIDEO]):
        mask = model.vision.video_token_mask.save()
        stream = model.video.layers[0].layer_output.save()
        tower = model.video.tower_output.save()
        features = model.vision.video_features.save()
        entering = model.layers[0].input.save()
    return mask, stream, tower, features, entering


def test_a_video_meets_the_text_model_at_its_tokens(model, row):
    mask, stream, tower, features, entering = video_only(model)
    assert mask.dtype == torch.bool and mask.shape == entering.shape[:2]
    assert int(mask.sum()) == row.tokens
    assert features.shape == (row.tokens, model.hidden_size)
    assert torch.equal(entering[mask], features)
    assert stream.shape == row.stream and tower.shape[:-1] == (row.tower or row.stream)[:-1]


def test_on_a_video_alone_the_tower_runs_once_and_model_vision_reads_that_run(model, row):
    if model.family.media.video_tower is not None:  # a tower of its own for videos: model.vision does not run
        pytest.skip("the image tower does not run on videos (test_video_llava)")
    _, stream, *_ = video_only(model)
    with model.trace(video_prompt(model), videos=[VIDEO]):
        first_run = model.vision.layers[0].layer_output.save()
    assert torch.equal(first_run, stream)


def test_an_image_and_a_video_in_one_prompt_each_meet_their_own_tokens(model, row):
    _, video_stream, video_tower, video_features, _ = video_only(model)
    with model.trace(chat_prompt(model.processor, 1, "What is in the picture?"), images=[IMAGE]):
        image_stream = model.vision.layers[0].layer_output.save()
        image_features = model.vision.image_features.save()
    with model.trace(video_prompt(model, images=1), images=[IMAGE], videos=[VIDEO]):
        image_mask = model.vision.image_token_mask.save()
        video_mask = model.vision.video_token_mask.save()
        both_image = model.vision.image_features.save()
        both_video = model.vision.video_features.save()
        entering = model.layers[0].input.save()
    assert not (image_mask & video_mask).any() and int(video_mask.sum()) == row.tokens
    assert torch.equal(entering[image_mask], both_image) and torch.equal(entering[video_mask], both_video)
    assert torch.equal(both_image, image_features) and torch.equal(both_video, video_features)
    # the tower's two runs: the images' on model.vision, the videos' on model.video, each as it is alone
    with model.trace(video_prompt(model, images=1), images=[IMAGE], videos=[VIDEO]):
        image_run = model.vision.layers[0].layer_output.save()
        video_run = model.video.layers[0].layer_output.save()
        video_run_output = model.video.tower_output.save()
    assert torch.equal(image_run, image_stream)
    assert torch.equal(video_run, video_stream) and torch.equal(video_run_output, video_tower)


def test_a_write_to_the_video_features_is_what_the_text_model_receives(model, row):
    written = torch.randn(row.tokens, model.hidden_size, generator=torch.Generator().manual_seed(0))
    with model.trace(video_prompt(model, images=1), images=[IMAGE], videos=[VIDEO]):
        image_mask = model.vision.image_token_mask.save()
        video_mask = model.vision.video_token_mask.save()
        image_features = model.vision.image_features.save()
        model.vision.video_features = written
        entering = model.layers[0].input.save()
    assert torch.equal(entering[video_mask], written)
    assert torch.equal(entering[image_mask], image_features)


def test_a_write_to_the_towers_run_on_the_video_reaches_the_video_tokens_only(model):
    with model.trace(video_prompt(model, images=1), images=[IMAGE], videos=[VIDEO]):
        clean = model.layers[0].input.save()
    with model.trace(video_prompt(model, images=1), images=[IMAGE], videos=[VIDEO]):
        image_mask = model.vision.image_token_mask.save()
        video_mask = model.vision.video_token_mask.save()
        model.video.layers[0].layer_output[:] = model.video.layers[0].layer_output * 2 + 1
        entering = model.layers[0].input.save()
    assert torch.equal(entering[image_mask], clean[image_mask])
    assert video_mask.any()  # every token on a frame changes (not OneVision's learned newline after the video)
    grid = model.vision.video_token_grid
    assert not torch.isclose(grid(entering), grid(clean)).all(-1).any()


def test_a_read_of_the_videos_run_after_the_forward_passed_it_says_so(model):
    """The host encodes the video before the image's scatter on most families, after it on Video-LLaVA: a read of the
    videos' run after the forward passed it is nnsight's OutOfOrderError, naming the value, not a silent wait."""
    with pytest.raises(OutOfOrderError, match=r"video\.layers\[0\]\.layer_output: .*already ran past it"):
        with model.trace(video_prompt(model, images=1), images=[IMAGE], videos=[VIDEO]):
            model.layers[0].input.save()
            model.video.layers[0].layer_output.save()


def test_a_video_value_on_a_prompt_without_a_video_says_why(model):
    image_prompt = chat_prompt(model.processor, 1, "What is in the picture?")
    for read in ("vision.video_features", "video.layers[0].layer_output", "video.tower_output"):
        with pytest.raises(Unavailable, match=re.escape(f"{read} is unavailable: no video reached this forward")):
            with model.trace(image_prompt, images=[IMAGE]):
                eval(f"model.{read}", {"model": model}).save()
    with model.trace(image_prompt, images=[IMAGE]):
        mask = model.vision.video_token_mask.save()  # all false, as the image's is on a prompt without one
    assert not mask.any()
    with pytest.raises(Unavailable, match=re.escape("vision.image_features is unavailable: no image reached this forward")):
        with model.trace(video_prompt(model), videos=[VIDEO]):
            model.vision.image_features.save()


def test_support_and_print_list_the_video_values(model):
    support = model.support()
    assert support["vision.video_token_mask"] is None and support["vision.video_features"] is None
    shown = repr(model)
    assert "video_token_mask -> VideoTokenMask" in shown and "video_features -> VideoFeatures" in shown
    assert re.search(r"\n  video: ", shown)


def test_a_family_without_videos_and_a_text_only_load_say_why(tiny_checkpoint):
    model = StandardizedTransformer(tiny_checkpoint("llava-siglip"), task="image-text-to-text")
    with pytest.raises(Unavailable, match="vision.video_features is unavailable: llava takes no video"):
        model.vision.video_features
    with pytest.raises(Unavailable, match="video.layers is unavailable: llava takes no video"):
        model.video.layers
    assert model.support()["video"].startswith("llava takes no video")
    text_only = StandardizedTransformer(tiny_checkpoint("qwen2_5_vl"))
    with pytest.raises(Unavailable, match="vision.video_features is unavailable: this model was loaded without task="):
        text_only.vision.video_features
    with pytest.raises(Unavailable, match="video.layers is unavailable: this model was loaded without task="):
        text_only.video.layers


# -- the video tokens on their frames' grids ------------------------------------------------------------------------


def frame_rows(stream: torch.Tensor, row, frame: int) -> tuple:
    """The index of frame ``frame``'s rows in the tower's stream on the video: a row of the batch axis, or, on a
    packed tower ([1, patches, ...]), its run of patches (every frame, a temporal unit, has as many)."""
    frames = row.grid[0]
    if row.stream[0] == 1 and frames > 1:
        per_frame = row.stream[1] // frames
        return (slice(None), slice(frame * per_frame, (frame + 1) * per_frame))
    return (frame,)


def test_the_video_token_grid_has_a_grid_per_frame_and_reads_any_value_over_the_video_tokens(model, row):
    _, _, _, features, entering = video_only(model)
    grid = model.vision.video_token_grid(features)
    assert grid.shape == (*row.grid, model.hidden_size)
    assert torch.equal(model.vision.video_token_grid(entering), grid)  # the text stream, read at the video tokens
    covered = grid.isfinite().all(-1)
    assert int(covered.sum()) == row.grid[0] * row.grid[1] * row.grid[2]  # every cell a token
    # every cell a different token (the tokens the grid leaves out: a CLS a frame, a newline after the video)
    cells = grid.reshape(-1, model.hidden_size)
    assert torch.unique(cells, dim=0).shape[0] == cells.shape[0]


def test_an_edit_of_one_frame_in_the_tower_changes_that_frames_grid_only(model, row):
    """Where each frame's tokens are, by what the model computes: the tower's stream on frame f edited, only grid
    frame f of the features changes."""
    _, _, _, clean, _ = video_only(model)
    clean_grid = model.vision.video_token_grid(clean)
    frame = row.grid[0] - 1
    with model.trace(video_prompt(model), videos=[VIDEO]):
        stream = model.video.layers[0].layer_output
        stream[frame_rows(stream, row, frame)] += 1.0
        edited = model.vision.video_features.save()
    changed = (model.vision.video_token_grid(edited) != clean_grid).any(-1)
    assert changed[frame].all() and not changed[:frame].any()


def test_placing_a_frames_grid_writes_its_tokens(model, row):
    with model.trace(video_prompt(model), videos=[VIDEO]):
        mask = model.vision.video_token_mask.save()
        features = model.vision.video_features
        grid = model.vision.video_token_grid(features).clone()
        grid[0] = 0.0
        model.vision.place_video_token_grid(grid, features)
        entering = model.layers[0].input.save()
    after = model.vision.video_token_grid(entering)
    assert torch.equal(after[0], torch.zeros_like(after[0])) and not (after[1:] == 0).all(-1).any()
    with pytest.raises(GridError, match=r"video=1 is not a video of this batch: it holds 1 video\(s\)"):
        model.vision.video_token_grid(entering, video=1)
    assert int(mask.sum()) == row.tokens


def test_deepstack_adds_the_image_and_the_video_taps_at_every_visual_token(model):
    """Where the text model adds DeepStack features (Qwen3-VL and its kin), a prompt's videos are tapped too: after a
    tapped block the stream changes at the image and the video tokens, by ``deepstack_output``'s rows in prompt
    order, and nowhere else."""
    if model.layers[0].support().get("deepstack_output", "none") is not None:
        pytest.skip("no DeepStack on this family")
    with model.trace(video_prompt(model, images=1), images=[IMAGE], videos=[VIDEO]):
        image_mask = model.vision.image_token_mask.save()
        video_mask = model.vision.video_token_mask.save()
        leaving = model.layers[0].layer_output.save()
        added = model.layers[0].deepstack_output.save()
        entering = model.layers[1].input.save()
    visual = image_mask | video_mask
    assert added.shape == (int(visual.sum()), model.hidden_size)
    assert torch.equal(entering[visual], leaving[visual] + added) and torch.equal(entering[~visual], leaving[~visual])


@pytest.mark.batch_shapes
def test_two_videos_each_have_their_tokens_and_their_grids(tiny_checkpoint):
    """Two videos of two sizes in one prompt (Qwen2.5-VL): the packed tower's run holds both, video after video, as
    many patches each as its video_grid_thw says; each video's grid reads its own tokens, as it is alone."""
    model = StandardizedTransformer(tiny_checkpoint("qwen2_5_vl"), task="image-text-to-text", attn_implementation="eager")
    wide = noise_video(2, 64, 32, seed=13)  # one temporal unit of 8x16 patches of 4 px: 128 patches, 32 tokens
    prompt = chat_prompt(model.processor, 0, "Compare the videos.", videos=2)
    with model.trace(prompt, videos=[VIDEO, wide]):
        mask = model.vision.video_token_mask.save()
        stream = model.video.layers[0].layer_output.save()
        features = model.vision.video_features.save()
    sizes = model.last_image_inputs["video_grid_thw"]
    assert sizes.tolist() == [[2, 8, 8], [1, 8, 16]] and stream.shape == (1, 128 + 128, 32)
    assert int(mask.sum()) == 32 + 32 and features.shape == (64, model.hidden_size)
    first, second = model.vision.video_token_grid(features, video=0), model.vision.video_token_grid(features, video=1)
    assert first.shape == (2, 4, 4, model.hidden_size) and second.shape == (1, 4, 8, model.hidden_size)
    _, _, _, alone, _ = video_only(model)
    assert_batch_close(first.reshape(-1, model.hidden_size), alone)  # one packed run of two videos, then of one
