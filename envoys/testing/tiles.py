"""Tiles for the tiny checkpoints of the tiled SigLIP towers (Aya Vision's kin, InternVL's kin): their sizes, the
tower on a tile, and GotOcr2's image processor cutting an image into tiles.

Tiles are ``TILE`` = 32 pixels (the vision config's ``image_size``) with
patches of ``PATCH`` = 4, so 64 patches (8x8) a tile; a pixel-shuffle
projector (``DOWNSAMPLE`` 2) folds each 2x2 block of patches into one image
token, so a tile gives ``TOKENS_PER_TILE`` = 16 image tokens (4x4). The image
processor picks a canvas of up to ``MAX_TILES`` = 4 tiles for the image's
aspect ratio, cuts the resized image into those tiles and appends a thumbnail
when there are several.
"""

from __future__ import annotations

from transformers import GotOcr2ImageProcessor, SiglipVisionConfig

from .sizes import vision_sizes

TILE = 32
PATCH = 4
DOWNSAMPLE = 2
TOKENS_PER_TILE = (TILE // PATCH // DOWNSAMPLE) ** 2  # 16
MAX_TILES = 4


def siglip_tiles(**particular) -> SiglipVisionConfig:
    """The SigLIP tower: 2 blocks, width 32, 2 heads, MLP 64 wide, patch 4 on 32x32 tiles, no pooling head."""
    return SiglipVisionConfig(**vision_sizes(image_size=TILE, patch_size=PATCH, vision_use_head=False, **particular))


def gotocr2_tiles() -> GotOcr2ImageProcessor:
    """GotOcr2's image processor cutting each image into 1 to ``MAX_TILES`` tiles of ``TILE`` pixels, a thumbnail
    appended where there are several (Aya Vision's and InternVL's)."""
    return GotOcr2ImageProcessor(
        size={"height": TILE, "width": TILE}, crop_to_patches=True, min_patches=1, max_patches=MAX_TILES,
    )
