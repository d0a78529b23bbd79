"""The rows of a fixed-resolution SigLIP or CLIP tower, as LLaVA and LLaVA-NeXT select its features.

The tower sees square tiles of ``image_size`` pixels (a whole image on LLaVA,
a base tile or a crop on LLaVA-NeXT): each is a row of its stream,
``[tiles, patches, vision_hidden_size]``, ``side = image_size // patch_size``
patches a side in raster order, after the CLS token on CLIP (first; SigLIP has
none). The projector reads each tile's rows as
``vision_feature_select_strategy`` says: "default" drops each tile's first
row (CLIP's CLS; on SigLIP, its first patch), "full" keeps every row (CLIP's
CLS included, as a token). So a tile is ``rows`` tower rows and ``tokens``
image tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..image.grids import raster


@dataclass(frozen=True)
class TileRows:
    """One tile's rows: ``side`` patches a side, ``cls`` rows before them, ``dropped`` rows the projector skips."""

    side: int
    cls: int
    dropped: int

    @classmethod
    def of(cls, config: Any) -> TileRows:
        """The tiles of a LLaVA-style ``config``: its vision config's sides and CLS, its select strategy (a wrapper
        that names none, VipLlava, drops the first row as "default" does)."""
        vision = config.vision_config
        dropped = 1 if getattr(config, "vision_feature_select_strategy", "default") == "default" else 0
        return cls(vision.image_size // vision.patch_size, int(vision.model_type == "clip_vision_model"), dropped)

    @property
    def rows(self) -> int:
        """Tower rows per tile: its patches and its CLS."""
        return self.side * self.side + self.cls

    @property
    def tokens(self) -> int:
        """Image tokens per tile: its rows less those the strategy drops."""
        return self.rows - self.dropped

    def patches(self, start: int) -> torch.Tensor:
        """long ``[side, side]``: the stream row of each patch of the tile whose rows begin at ``start``."""
        return raster(self.side, self.side, start + self.cls)

    def token_cells(self, start: int) -> torch.Tensor:
        """long ``[side, side]``: the image token of each patch of the tile whose tokens begin at ``start``; -1
        where the strategy dropped the patch's row (SigLIP's first patch under "default")."""
        cells = raster(self.side, self.side, start + self.cls - self.dropped)
        return torch.where(cells >= start, cells, -1)
