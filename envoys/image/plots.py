"""Pictures of the image pathway: a grid over the original image, several layers side by side, a video's frames
side by side, per-layer curves.

Every function draws one figure and saves it as a PNG at ``path`` (returned);
the ``*_figure`` functions return the figure unsaved. A picture over an image
is its panels, each with the image's aspect ratio (``[height, width]`` pixels,
scaled so that its height is ``height`` pixels), then a colour bar
``COLORBAR_PIXELS`` wide giving the one scale of every panel. A panel is the
image in grey, dimmed (`backdrop`), so that its own colours do not mix with the
heat, and the grid stretched over it as a heatmap in a perceptual colormap
(``viridis``), cells no token covers (NaN) left clear, the panel's title and
any cell labels drawn inside it. The grid covers the whole image as the
processor saw it, so on a processor that crops (a CLIP center crop) the heatmap
is stretched over the whole image, not the crop. A chart's tick labels are laid
out along its axis and turned when they would overlap, the chart widened with
their count.

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
#: The colormap of the heat: perceptual (its lightness rises with the value), so it reads apart from the grey image.
CMAP = "viridis"
#: How much of the heat's colour covers the image (the rest is the dimmed grey image).
ALPHA = 0.6
#: The pixel width of the strip at the right of a picture over an image that holds its colour bar and tick labels.
COLORBAR_PIXELS = 96
#: The grey levels the image is mapped to under the heat: dimmed, so the heat's light end stands out.
BACKDROP_LEVELS = (24, 200)
#: A chart's width in inches: at least CHART_INCHES, at most CHART_MAX_INCHES, between them wide enough for its tick
#: labels laid flat, each in a slot of at least TICK_INCHES.
CHART_INCHES, CHART_MAX_INCHES, TICK_INCHES = 6.4, 16.0, 0.5


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


def backdrop(image: Image.Image) -> Image.Image:
    """``image`` as the panels show it under the heat: grey (its luminance), dimmed to `BACKDROP_LEVELS`, RGB."""
    low, high = BACKDROP_LEVELS
    return Image.eval(image.convert("L"), lambda level: low + level * (high - low) // 255).convert("RGB")


def overlay(
    grid: Any,
    image: Image.Image,
    path: str | Path,
    *,
    title: str | None = None,
    labels: Sequence[Sequence[str]] | None = None,
    scale: str | None = None,
    alpha: float = ALPHA,
    cmap: str = CMAP,
    height: int = PANEL_HEIGHT,
) -> Path:
    """Draw ``grid`` ([grid_rows, grid_columns]) as a heatmap over ``image`` and save it as a PNG at ``path``.

    ``labels`` (one string per cell, ``[grid_rows][grid_columns]``) are written
    at the cells' centres; ``scale`` names what the colour bar measures. The
    panel has the image's aspect ratio, the colour bar at its right.
    """
    return side_by_side([grid], image, path, titles=None if title is None else [title],
                        labels=None if labels is None else [labels], scale=scale, alpha=alpha, cmap=cmap,
                        height=height)


def side_by_side(
    grids: Sequence[Any],
    image: Image.Image,
    path: str | Path,
    *,
    titles: Sequence[str] | None = None,
    labels: Sequence[Sequence[Sequence[str]]] | None = None,
    scale: str | None = None,
    alpha: float = ALPHA,
    cmap: str = CMAP,
    height: int = PANEL_HEIGHT,
) -> Path:
    """Draw several grids over the same image, one panel each, left to right, on one colour scale; save a PNG.

    Each panel has the image's aspect ratio, so the PNG is ``len(grids)``
    images wide and one high, then the colour bar (`COLORBAR_PIXELS`).
    ``titles`` (one per panel) and ``labels`` (one ``[grid_rows][grid_columns]``
    table of strings per panel) are optional; ``scale`` names what the colour
    bar measures.
    """
    figure = panels_figure(grids, image, titles=titles, labels=labels, scale=scale, alpha=alpha, cmap=cmap,
                           height=height)
    return save(figure, path)


def per_frame(
    grid: Any,
    frames: Sequence[Image.Image],
    path: str | Path,
    *,
    title: str | None = None,
    scale: str | None = None,
    alpha: float = ALPHA,
    cmap: str = CMAP,
    height: int = PANEL_HEIGHT,
) -> Path:
    """Draw a video's grid (``vision.video_token_grid``'s, ``[frames, grid_rows, grid_columns]``) as one heatmap per
    frame, each over its own frame, left to right on one colour scale; save a PNG at ``path``.

    ``frames`` are the video's images, one per grid frame; where the tower
    encodes several frames as one (the Qwen ViT's temporal units of 2), pass
    them all: a multiple of the grid's frames is taken as runs of consecutive
    frames, each panel over its run's first. Panels are titled ``frame k``
    (``title`` before it where given).
    """
    cells = torch.as_tensor(grid).detach()
    if cells.dim() != 3:
        raise ValueError(f"a video's grid to draw is [frames, grid_rows, grid_columns]; got shape {tuple(cells.shape)}"
                         f" (sum or pick the trailing axes first, e.g. grid.sum(-1) or grid[..., head])")
    count = cells.shape[0]
    if not frames or len(frames) % count:
        raise ValueError(f"the grid has {count} frame(s) and {len(frames)} image(s) were given: pass the video's "
                         f"frames, one per grid frame or a run of as many for each")
    step = len(frames) // count
    shown = [frames[index * step] for index in range(count)]
    titles = [f"{title + ': ' if title else ''}frame {index * step}" for index in range(count)]
    return save(panels_figure(list(cells), shown, titles=titles, scale=scale, alpha=alpha, cmap=cmap, height=height),
                path)


def panels_figure(
    grids: Sequence[Any],
    image: Image.Image | Sequence[Image.Image],
    *,
    titles: Sequence[str] | None = None,
    labels: Sequence[Sequence[Sequence[str]]] | None = None,
    scale: str | None = None,
    alpha: float = ALPHA,
    cmap: str = CMAP,
    height: int = PANEL_HEIGHT,
) -> Any:
    """`side_by_side`'s figure, unsaved: the panels, then an axes labelled ``"colorbar"`` holding the colour bar.

    ``image`` is the image under every panel, or one image per panel (a video's frames, `per_frame`).
    """
    Figure = matplotlib_figure()
    cells = [as_grid(grid) for grid in grids]
    if not cells:
        raise ValueError("side_by_side needs at least one grid")
    images = list(image) if isinstance(image, Sequence) else [image] * len(cells)
    if len(images) != len(cells):
        raise ValueError(f"{len(cells)} grids but {len(images)} images: give one image, or one per grid")
    for name, given in (("titles", titles), ("labels", labels)):
        if given is not None and len(given) != len(cells):
            raise ValueError(f"{len(cells)} grids but {len(given)} {name}: give one per grid")
    finite = torch.cat([grid[grid.isfinite()] for grid in cells])
    low, high = (float(finite.min()), float(finite.max())) if finite.numel() else (0.0, 1.0)
    high = high if high > low else low + 1
    greys = [backdrop(each) for each in images]
    width = max(1, round(height * greys[0].width / greys[0].height))
    total = len(cells) * width + COLORBAR_PIXELS
    figure = Figure(figsize=(total / DPI, height / DPI), dpi=DPI)
    heat = None
    for index, grid in enumerate(cells):
        axes = figure.add_axes((index * width / total, 0, width / total, 1))
        heat = draw_panel(axes, greys[index], grid, low, high, alpha, cmap,
                          title=None if titles is None else titles[index],
                          labels=None if labels is None else labels[index], cell_pixels=height / grid.shape[0])
        if index:  # a white rule between panels
            axes.axvline(0, color="white", linewidth=2)
    bar = figure.add_axes(((len(cells) * width + 10) / total, 0.08, 14 / total, 0.84), label="colorbar")
    colours = figure.colorbar(heat, cax=bar)
    colours.solids.set_alpha(1)  # the scale's own colours, not blended with the image
    colours.ax.tick_params(labelsize=8)
    colours.ax.yaxis.get_offset_text().set_fontsize(8)
    if scale:
        colours.set_label(scale, fontsize=8)
    return figure


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
) -> Any:
    """One panel: the (grey, dimmed) image, the grid stretched over it, the title in its corner, a label at each
    cell's centre. Returns the heatmap (what the colour bar reads)."""
    width, height = image.size
    extent = (0, width, height, 0)
    axes.imshow(np.asarray(image), extent=extent, interpolation="bilinear")
    heat = axes.imshow(grid.numpy(), extent=extent, cmap=cmap, alpha=alpha, vmin=low, vmax=high,
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
                          bbox={"facecolor": "black", "alpha": 0.5, "edgecolor": "none", "pad": 0.5})
    return heat


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
    return save(curves_figure(series, ticks=ticks, xlabel=xlabel, ylabel=ylabel, title=title), path)


def curves_figure(
    series: Mapping[str, Any],
    *,
    ticks: Sequence[str] | None = None,
    xlabel: str = "layer",
    ylabel: str = "",
    title: str | None = None,
) -> Any:
    """`curves`' figure, unsaved."""
    values = {name: torch.as_tensor(points).detach().to("cpu", torch.float32).reshape(-1) for name, points in series.items()}
    if not values:
        raise ValueError("curves needs at least one series")
    lengths = {len(points) for points in values.values()}
    if len(lengths) != 1 or (ticks is not None and len(ticks) not in lengths):
        raise ValueError(f"every series, and the ticks, must have one value per point; got lengths "
                         f"{ {name: len(points) for name, points in values.items()} } and {None if ticks is None else len(ticks)} ticks")
    figure = chart_figure([str(i) for i in range(len(next(iter(values.values()))))] if ticks is None else ticks)
    axes = figure.add_subplot()
    for name, points in values.items():
        axes.plot(range(len(points)), points.numpy(), marker="o", label=name)
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    axes.axhline(0, color="grey", linewidth=0.5)
    if title:
        axes.set_title(title)
    axes.legend()
    if ticks is not None:
        tick_labels(axes, range(len(ticks)), ticks)
    return figure


def bars(
    groups: Mapping[str, Mapping[str, float]],
    path: str | Path,
    *,
    ylabel: str = "probability",
    title: str | None = None,
) -> Path:
    """Grouped bars: for each group (``"clean"``, ``"knocked out"``), a value per label (a token); save a PNG."""
    return save(bars_figure(groups, ylabel=ylabel, title=title), path)


def bars_figure(groups: Mapping[str, Mapping[str, float]], *, ylabel: str = "probability",
                title: str | None = None) -> Any:
    """`bars`' figure, unsaved: one tick label per label (its repr), none overlapping another."""
    labels = list(dict.fromkeys(label for group in groups.values() for label in group))
    if not labels:
        raise ValueError("bars needs at least one labelled value")
    shown = [repr(label) for label in labels]
    figure = chart_figure(shown)
    axes = figure.add_subplot()
    width = 0.8 / len(groups)
    for index, (name, group) in enumerate(groups.items()):
        axes.bar([i + index * width for i in range(len(labels))], [group.get(label, 0.0) for label in labels],
                 width=width, label=name)
    axes.set_ylabel(ylabel)
    if title:
        axes.set_title(title)
    axes.legend()
    tick_labels(axes, [i + width * (len(groups) - 1) / 2 for i in range(len(labels))], shown)
    return figure


def chart_figure(ticks: Sequence[str]) -> Any:
    """A figure for a chart with these tick labels along its x axis: 4 inches high, wide enough to lay them flat
    (about 0.09 inch a character at 10 points, a slot of `TICK_INCHES` at least), between `CHART_INCHES` and
    `CHART_MAX_INCHES`; constrained layout, so turned labels, titles and legends stay inside it."""
    Figure = matplotlib_figure()
    needed = 1.6 + sum(max(TICK_INCHES, 0.09 * len(tick) + 0.25) for tick in ticks)
    return Figure(figsize=(min(CHART_MAX_INCHES, max(CHART_INCHES, needed)), 4.0), dpi=DPI, layout="constrained")


def tick_labels(axes: Any, positions: Sequence[float], labels: Sequence[str]) -> None:
    """Label the x axis's ticks; laid flat where they fit, else turned upright (90 degrees), so no two overlap."""
    axes.set_xticks(list(positions), list(labels))
    axes.get_figure().draw_without_rendering()
    boxes = [label.get_window_extent() for label in axes.get_xticklabels()]
    if any(left.x1 + 2 > right.x0 for left, right in zip(boxes, boxes[1:])):
        axes.tick_params(axis="x", labelrotation=90)


def save(figure: Any, path: str | Path) -> Path:
    """Save ``figure`` as a PNG at ``path`` (its folder created), at the figure's own size; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png", dpi=DPI)
    return path

