"""Pictures of the image pathway: a grid over the original image, several layers side by side, per-layer curves.

Every function draws one figure and saves it as a PNG at ``path`` (returned).
A picture over an image has the image's aspect ratio: each panel is the image
(``[height, width]`` pixels, scaled so that its height is ``height`` pixels)
with the grid stretched over it as a heatmap, cells no token covers (NaN) left
clear, the panel's title and any cell labels drawn inside it. The grid covers
the whole image as the processor saw it, so on a processor that crops (a CLIP
center crop) the heatmap is stretched over the whole image, not the crop.

matplotlib is an optional dependency, the ``plot`` extra (``pip install
'vlm-instrument[plot]'``); it is imported when a picture is drawn, through its
object-oriented API (``matplotlib.figure.Figure``), so no global pyplot state is
touched.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

#: The pixel height of a panel over an image, unless a call says otherwise.
PANEL_HEIGHT = 384
DPI = 100


def matplotlib_figure() -> type:
    """matplotlib's ``Figure`` class; ImportError naming the ``plot`` extra when matplotlib is not installed."""
    try:
        from matplotlib.figure import Figure
    except ImportError as error:
        raise ImportError(
            "drawing pictures needs matplotlib, the optional 'plot' extra: pip install 'vlm-instrument[plot]' "
            "(or pip install matplotlib)"
        ) from error
    return Figure


def as_grid(grid: Any) -> torch.Tensor:
    """A grid as a float CPU tensor ``[grid_rows, grid_columns]``; ValueError naming the shape otherwise."""
    grid = torch.as_tensor(grid).detach().to("cpu", torch.float32)
    if grid.dim() != 2:
        raise ValueError(
            f"a grid to draw is [grid_rows, grid_columns]; got shape {tuple(grid.shape)} (sum or pick the "
            f"trailing axes first, e.g. grid.sum(-1) or grid[..., head])"
        )
    return grid


def overlay(
    grid: Any,
    image: Image.Image,
    path: str | Path,
    *,
    title: str | None = None,
    labels: Sequence[Sequence[str]] | None = None,
    alpha: float = 0.6,
    cmap: str = "inferno",
    height: int = PANEL_HEIGHT,
) -> Path:
    """Draw ``grid`` ([grid_rows, grid_columns]) as a heatmap over ``image`` and save it as a PNG at ``path``.

    ``labels`` (one string per cell, ``[grid_rows][grid_columns]``) are written
    at the cells' centres. The PNG has the image's aspect ratio.
    """
    return side_by_side([grid], image, path, titles=None if title is None else [title],
                        labels=None if labels is None else [labels], alpha=alpha, cmap=cmap, height=height)


def side_by_side(
    grids: Sequence[Any],
    image: Image.Image,
    path: str | Path,
    *,
    titles: Sequence[str] | None = None,
    labels: Sequence[Sequence[Sequence[str]]] | None = None,
    alpha: float = 0.6,
    cmap: str = "inferno",
    height: int = PANEL_HEIGHT,
) -> Path:
    """Draw several grids over the same image, one panel each, left to right, on one colour scale; save a PNG.

    Each panel has the image's aspect ratio, so the PNG is ``len(grids)``
    images wide and one high. ``titles`` (one per panel) and ``labels`` (one
    ``[grid_rows][grid_columns]`` table of strings per panel) are optional.
    """
    Figure = matplotlib_figure()
    cells = [as_grid(grid) for grid in grids]
    if not cells:
        raise ValueError("side_by_side needs at least one grid")
    for name, given in (("titles", titles), ("labels", labels)):
        if given is not None and len(given) != len(cells):
            raise ValueError(f"{len(cells)} grids but {len(given)} {name}: give one per grid")
    finite = torch.cat([grid[grid.isfinite()] for grid in cells])
    low, high = (float(finite.min()), float(finite.max())) if finite.numel() else (0.0, 1.0)
    pixels = image.convert("RGB")
    width = max(1, round(height * pixels.width / pixels.height))
    figure = Figure(figsize=(len(cells) * width / DPI, height / DPI), dpi=DPI)
    for index, grid in enumerate(cells):
        axes = figure.add_axes((index / len(cells), 0, 1 / len(cells), 1))
        draw_panel(axes, pixels, grid, low, high, alpha, cmap,
                   title=None if titles is None else titles[index],
                   labels=None if labels is None else labels[index], cell_pixels=height / grid.shape[0])
    return save(figure, path)


def draw_panel(
    axes: Any,
    image: Image.Image,
    grid: torch.Tensor,
    low: float,
    high: float,
    alpha: float,
    cmap: str,
    title: str | None,
    labels: Sequence[Sequence[str]] | None,
    cell_pixels: float,
) -> None:
    """One panel: the image, the grid stretched over it, the title in its corner, a label at each cell's centre."""
    width, height = image.size
    extent = (0, width, height, 0)
    axes.imshow(np.asarray(image), extent=extent, interpolation="bilinear")
    axes.imshow(grid.numpy(), extent=extent, cmap=cmap, alpha=alpha, vmin=low, vmax=high if high > low else low + 1,
                interpolation="nearest")
    axes.set_xlim(0, width)
    axes.set_ylim(height, 0)
    axes.set_aspect("auto")
    axes.axis("off")
    if title:
        axes.text(0.02, 0.98, title, transform=axes.transAxes, va="top", ha="left", fontsize=10,
                  bbox={"facecolor": "white", "alpha": 0.8, "edgecolor": "none", "pad": 2})
    if labels is not None:
        rows, columns = grid.shape
        if len(labels) != rows or any(len(row) != columns for row in labels):
            raise ValueError(f"labels must be one string per cell, [{rows}][{columns}]")
        size = max(4.0, min(12.0, 0.3 * min(cell_pixels, cell_pixels * rows * width / (height * columns)) * 72 / DPI))
        for r in range(rows):
            for c in range(columns):
                axes.text((c + 0.5) * width / columns, (r + 0.5) * height / rows, labels[r][c], ha="center",
                          va="center", fontsize=size, color="white",
                          bbox={"facecolor": "black", "alpha": 0.4, "edgecolor": "none", "pad": 0.5})


def curves(
    series: Mapping[str, Any],
    path: str | Path,
    *,
    ticks: Sequence[str] | None = None,
    xlabel: str = "layer",
    ylabel: str = "",
    title: str | None = None,
) -> Path:
    """Per-layer curves: each series (a name and its values, one per layer or site) a line; save a PNG.

    ``ticks`` names the points along the x axis (``layers[0]``, ...); the
    default is their indices.
    """
    Figure = matplotlib_figure()
    values = {name: torch.as_tensor(points).detach().to("cpu", torch.float32).reshape(-1) for name, points in series.items()}
    if not values:
        raise ValueError("curves needs at least one series")
    lengths = {len(points) for points in values.values()}
    if len(lengths) != 1 or (ticks is not None and len(ticks) not in lengths):
        raise ValueError(f"every series, and the ticks, must have one value per point; got lengths "
                         f"{ {name: len(points) for name, points in values.items()} } and {None if ticks is None else len(ticks)} ticks")
    figure = Figure(figsize=(6.4, 4.0), dpi=DPI)
    axes = figure.add_subplot()
    for name, points in values.items():
        axes.plot(range(len(points)), points.numpy(), marker="o", label=name)
    if ticks is not None:
        axes.set_xticks(range(len(ticks)), list(ticks), rotation=45 if max(map(len, ticks)) > 4 else 0, ha="right")
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    axes.axhline(0, color="grey", linewidth=0.5)
    if title:
        axes.set_title(title)
    axes.legend()
    figure.tight_layout()
    return save(figure, path)


def bars(
    groups: Mapping[str, Mapping[str, float]],
    path: str | Path,
    *,
    ylabel: str = "probability",
    title: str | None = None,
) -> Path:
    """Grouped bars: for each group (``"clean"``, ``"knocked out"``), a value per label (a token); save a PNG."""
    Figure = matplotlib_figure()
    labels = list(dict.fromkeys(label for group in groups.values() for label in group))
    if not labels:
        raise ValueError("bars needs at least one labelled value")
    figure = Figure(figsize=(6.4, 4.0), dpi=DPI)
    axes = figure.add_subplot()
    width = 0.8 / len(groups)
    for index, (name, group) in enumerate(groups.items()):
        axes.bar([i + index * width for i in range(len(labels))], [group.get(label, 0.0) for label in labels],
                 width=width, label=name)
    axes.set_xticks([i + width * (len(groups) - 1) / 2 for i in range(len(labels))], [repr(label) for label in labels])
    axes.set_ylabel(ylabel)
    if title:
        axes.set_title(title)
    axes.legend()
    figure.tight_layout()
    return save(figure, path)


def save(figure: Any, path: str | Path) -> Path:
    """Save ``figure`` as a PNG at ``path`` (its folder created), at the figure's own size; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png", dpi=DPI)
    return path

