"""The spatial layout of a video's tokens, by what the model computes, on a tower whose projector reads one block
patch by patch: an edit of one patch of one frame there changes one token, at its cell of that frame's grid."""

from __future__ import annotations

import torch

from envoys.testing import chat_prompt, noise_video
from envoys.testing.contract import FRAMES, SIDE

VIDEO = noise_video(FRAMES, SIDE, SIDE, seed=12)


def assert_a_patch_edit_moves_its_token(model, pooled: int) -> None:
    """Edit patch (3, 1) of frame 2 in block ``vision_feature_layer`` (after each frame's CLS row): exactly the video
    token at that frame's cell ``(3 // pooled, 1 // pooled)`` changes (``pooled``: the side of the average pool the
    projector's resampler applies after the tower, 1 for none)."""
    prompt = chat_prompt(model.processor, 0, "What happens in the video?", videos=1)
    with model.trace(prompt, videos=[VIDEO]):
        clean = model.vision.video_features.save()
    block = model.vision.num_layers + model.config.vision_feature_layer
    frame, patch_row, patch_column, side = 2, 3, 1, SIDE // model.vision.patch_size
    with model.trace(prompt, videos=[VIDEO]):
        model.video.layers[block].layer_output[frame, 1 + patch_row * side + patch_column] += 5.0
        edited = model.vision.video_features.save()
    changed = (model.vision.video_token_grid(edited) != model.vision.video_token_grid(clean)).any(-1)
    assert changed.nonzero().tolist() == [[frame, patch_row // pooled, patch_column // pooled]]
    assert torch.isfinite(edited).all()
