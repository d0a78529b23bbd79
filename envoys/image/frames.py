"""A video's tokens on its frames' grids: what ``vision.video_token_grid`` reads.

The host scatters a video's features at its placeholder tokens
(``vision.video_token_mask``) video after video, frame after frame, each
frame's tokens in raster order over that frame's (pooled) grid. A frame here
is what the tower encodes as one: a sampled frame, or the Qwen ViT's temporal
unit of two frames. A family's `GridLayout` places them with
``video_token_grid(inputs, video, mask)``: a `Grid` whose ``rows`` are
``[frames, grid_rows, grid_columns]``, the index of each cell's row among the
batch's video tokens (``out[video_token_mask]``), -1 where none. `uniform_frames`
serves the layouts whose every frame is encoded alike (LLaVA-NeXT-Video,
LLaVA-OneVision, Video-LLaVA); `gather` and `place` work on such a grid as on
an image's.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..core.values import Unavailable
from ..vision.media import not_served, placeholder_id
from .grids import Grid, GridError, ImageInputs, layout_and_inputs

#: The processor's output that holds a batch's video frames.
VIDEO_PIXELS = "pixel_values_videos"
#: The processor's output that gives each video's grid of patches (``[t, h, w]``) on a packed tower.
VIDEO_GRID = "video_grid_thw"


def check_video(video: int, videos: int) -> None:
    """`GridError` unless ``video`` indexes one of the batch's ``videos`` videos."""
    if not isinstance(video, int) or isinstance(video, bool) or not 0 <= video < videos:
        raise GridError(f"video={video!r} is not a video of this batch: it holds {videos} video(s), 0..{videos - 1}")


def frames_raster(start: int, frames: int, rows: int, columns: int, stride: int | None = None,
                  before: int = 0) -> torch.Tensor:
    """long ``[frames, rows, columns]``: frame ``f``'s cell ``(r, c)`` at ``start + f * stride + before + r * columns
    + c`` (``stride``, a frame's tokens, defaults to ``rows * columns``; ``before``: the tokens of a frame before its
    grid, a CLS)."""
    stride = rows * columns if stride is None else stride
    frame = torch.arange(frames, dtype=torch.long).reshape(frames, 1, 1) * stride
    cells = torch.arange(rows * columns, dtype=torch.long).reshape(1, rows, columns)
    return start + before + frame + cells


def uniform_frames(inputs: ImageInputs, video: int, mask: torch.Tensor, before: int = 0, after: int = 0) -> Grid:
    """Video ``video``'s grid where the batch's videos have one frame count (``pixel_values_videos``: ``[videos,
    frames, ...]``) and every frame the same tokens: ``before`` tokens (a CLS), then a square of tokens in raster
    order; ``after`` tokens follow the video's last frame (LLaVA-OneVision's ``image_newline``). The counts are the
    mask's: its tokens split evenly over the videos, then over the frames."""
    videos, frames = inputs[VIDEO_PIXELS].shape[:2]
    check_video(video, videos)
    per_video = int(mask.sum()) // videos
    per_frame = (per_video - after) // frames
    side = math.isqrt(max(per_frame - before, 0))
    if per_frame * frames + after != per_video or side * side != per_frame - before:
        raise GridError(f"{per_video} tokens a video do not make {frames} frames of {before} + a square grid of "
                        f"tokens (+ {after} after the last frame)")
    start = video * per_video
    return Grid(frames_raster(start, frames, side, side, per_frame, before), slice(start, start + per_video))


def video_mask(root: Any, inputs: ImageInputs) -> torch.Tensor:
    """bool ``[batch, seq]``: where the recorded batch holds video tokens (none where it carried no video)."""
    if inputs.get(VIDEO_PIXELS) is None:
        return torch.zeros_like(inputs.input_ids, dtype=torch.bool)
    return inputs.input_ids == placeholder_id(root, "video")


def video_layout(root: Any, grids: str, placed: str, method: str) -> tuple[Any, ImageInputs]:
    """The family's `GridLayout` and the recorded batch, for the video ``grids``; `Unavailable` where the model
    serves no video or its layout has no ``method`` (places no video ``placed``)."""
    reason = not_served(root, "video")
    if reason is not None:
        raise Unavailable(f"the video {grids} are unavailable: {reason}")
    layout, inputs = layout_and_inputs(root)
    if not hasattr(layout, method):
        raise Unavailable(f"the video {grids} are unavailable: the {root.family.model_type} family places no video "
                          f"{placed} on grids yet")
    return layout, inputs


def video_patches(root: Any, video: int) -> tuple[ImageInputs, Grid]:
    """The recorded batch and video ``video``'s patch grids over the tower's run on the videos; `Unavailable` where
    the model serves no video, its layout places no video patches, or the batch carried none."""
    layout, inputs = video_layout(root, "patch grids", "patches", "video_patch_grid")
    if inputs.get(VIDEO_GRID) is None:
        raise Unavailable("the video patch grids are unavailable: the last batch that carried images carried no "
                          "video; call them inside or after model.trace(prompt, videos=[frames])")
    return inputs, layout.video_patch_grid(inputs, video)


def video_grid(root: Any, video: int) -> tuple[ImageInputs, torch.Tensor, Grid]:
    """The recorded batch, its video-token mask, and video ``video``'s frames grid over the video tokens;
    `Unavailable` where the model serves no video, its layout places none, or the batch carried none."""
    layout, inputs = video_layout(root, "grids", "tokens", "video_token_grid")
    mask = video_mask(root, inputs)
    if not mask.any():
        raise Unavailable("the video grids are unavailable: the last batch that carried images carried no video; call "
                          "them inside or after model.trace(prompt, videos=[frames])")
    return inputs, mask, layout.video_token_grid(inputs, video, mask)
