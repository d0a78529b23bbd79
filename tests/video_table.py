"""What the video tests (tests/test_video_values.py) expect of each tiny checkpoint whose family serves videos.

The video is ``noise_video(4, 32, 32)``: four 32x32 noise frames. Every number
is read off the builder's documented configuration in ``envoys/tiny/`` (patch
sizes, merges, poolers, CLS tokens, frames sampled), never off the code
under test; each row's comment says how.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The test video: 4 frames of 32 x 32 pixels.
FRAMES, SIDE = 4, 32


@dataclass(frozen=True)
class VideoRow:
    """One checkpoint's video: its placeholder tokens, the tower's stream on it, and each frame's token grid.

    ``stream`` is the shape of a tower block's output on the video (the
    tower's run on the videos); ``grid`` is ``(frames, rows, columns)`` of the
    video tokens laid out per frame (``vision.video_grid``), the grid's
    frames being the tower's temporal units.
    """

    tokens: int
    stream: tuple[int, ...]
    grid: tuple[int, int, int]
    #: tower_output's shape where the tower drops rows of its stream after the last block (each frame's CLS row)
    tower: tuple[int, ...] | None = None


VIDEOS: dict[str, VideoRow] = {
    # envoys/tiny/qwen.py: patch 8, temporal patch 2, merge 2x2: 4 frames are 2 temporal units of 4x4 patches
    # (32 patches, packed) and 2x2 tokens each (8).
    "qwen2_vl": VideoRow(tokens=8, stream=(1, 32, 32), grid=(2, 2, 2)),
    # patch 4: 2 units of 8x8 patches (128) and 4x4 tokens (32).
    "qwen2_5_vl": VideoRow(tokens=32, stream=(1, 128, 32), grid=(2, 4, 4)),
    # envoys/tiny/llava_onevision1_5.py: patch 8, one frame a temporal unit, merge 2x2: 4 units of 4x4 patches (64),
    # each after its CLS row in the blocks (68 rows), and 2x2 tokens each (16).
    "llava_onevision1_5": VideoRow(tokens=16, stream=(1, 4 + 64, 32), grid=(4, 2, 2), tower=(1, 64, 32)),
    # envoys/tiny/ovis2_5.py: patch 8, one frame a temporal unit, merge 2x2: 4 units of 4x4 patches (64, one window
    # each), 2x2 tokens each (16).
    "ovis2_5": VideoRow(tokens=16, stream=(1, 64, 32), grid=(4, 2, 2)),
    "qwen3_vl": VideoRow(tokens=8, stream=(1, 32, 32), grid=(2, 2, 2)),
    "qwen3_vl_moe": VideoRow(tokens=8, stream=(1, 32, 32), grid=(2, 2, 2)),
    "qwen3_5": VideoRow(tokens=8, stream=(1, 32, 32), grid=(2, 2, 2)),
    "qwen3_5_moe": VideoRow(tokens=8, stream=(1, 32, 32), grid=(2, 2, 2)),
    # envoys/tiny/llava_next_video.py: the CLIP tower (patch 8, CLS first) on every frame, 1 + 16 rows; block -2's
    # 4x4 patches average-pooled 2x2: 2x2 tokens a frame.
    "llava_next_video": VideoRow(tokens=16, stream=(4, 17, 32), grid=(4, 2, 2)),
    # envoys/tiny/llava_onevision.py: SigLIP (patch 8, no CLS) on every frame, 16 rows; pooled 2x2 to 2x2 tokens a
    # frame, then one image_newline after the last frame (16 + 1 tokens; the newline is on no frame's grid).
    "llava_onevision": VideoRow(tokens=17, stream=(4, 16, 32), grid=(4, 2, 2)),
    # envoys/tiny/video_llava.py: the video tower (CLIP, patch 8) on every frame, CLS kept: 17 tokens a frame, the
    # CLS on no grid cell.
    "video_llava": VideoRow(tokens=68, stream=(4, 17, 32), grid=(4, 4, 4)),
    # envoys/tiny/qwen2_5_omni_thinker.py: Qwen2.5-VL's tower (patch 4) within the image processor's pixel bounds: 2
    # temporal units of 8x8 patches (128) and 4x4 tokens (32).
    "qwen2_5_omni_thinker": VideoRow(tokens=32, stream=(1, 128, 32), grid=(2, 4, 4)),
    # envoys/tiny/qwen3_omni_moe_thinker.py: Qwen3-VL's tower (patch 8): 2 units of 4x4 patches (32) and 2x2 tokens (8).
    "qwen3_omni_moe_thinker": VideoRow(tokens=8, stream=(1, 32, 32), grid=(2, 2, 2)),
    # envoys/tiny/gemma4.py: the video processor samples 2 frames; each is patchified like an image (280 padded
    # patches of 4 px) and pooled 2x2: a 32x32 frame becomes 64x64 pixels, 8x8 tokens.
    "gemma4": VideoRow(tokens=128, stream=(2, 280, 32), grid=(2, 8, 8)),
}
