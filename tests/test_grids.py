"""The core of `envoys.image.grids` on plain tensors, and the test image the grid suites use.

Each batched tower's grids (``vision.patch_grid`` / ``token_grid`` and their
inverses) are checked by `tiled_grids.TiledGridSuite`, declared with the
family's facts in the family's own test file (``class TestGrids``); the packed
and padded towers' by the suites of `packed_grids`, declared the same way.
"""

from __future__ import annotations

import torch

from envoys.image.grids import Grid, gather, place, tower_rows
from envoys.testing import patch_coloured_image


def test_gather_fills_uncovered_cells_and_place_skips_them():
    value = torch.arange(12.0).reshape(2, 3, 2)  # [images, rows, width]
    grid = Grid(torch.tensor([[4, -1], [3, 5]]), slice(3, 6))
    rows = tower_rows(value, grid, stream_dims=2)
    gathered = gather(rows, grid)
    assert torch.equal(gathered[0, 0], value[1, 1]) and torch.equal(gathered[1, 0], value[1, 0])
    assert gathered[0, 1].isnan().all()
    copy = value.clone()
    place(torch.zeros(2, 2, 2), tower_rows(copy, grid, stream_dims=2), grid)
    expected = value.clone()
    expected[1, :] = 0
    assert torch.equal(copy, expected)
    # the image's rows only: indices count from the span's start
    assert torch.equal(gather(tower_rows(value[1], grid, stream_dims=2), grid)[1, 1], value[1, 2])


def test_patch_coloured_image_gives_each_patch_its_own_colour():
    image = patch_coloured_image(3, 5, 4)
    assert image.size == (20, 12)
    pixels = torch.tensor(list(image.getdata())).reshape(12, 20, 3)
    blocks = pixels.reshape(3, 4, 5, 4, 3).permute(0, 2, 1, 3, 4).reshape(15, 16, 3)
    assert (blocks == blocks[:, :1]).all()  # one colour per patch
    assert torch.unique(blocks[:, 0], dim=0).shape[0] == 15  # all different
