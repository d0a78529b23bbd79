"""The pictures (envoys.image.plots, each recipe's draw, the demo's --plot): every PNG opens, a picture over an image has
its aspect ratio panel by panel and a colour bar, the heatmap lands on the cells it belongs to over the image in grey
(so the image's own colours never read as heat), a chart's tick labels never overlap, and nothing is blank."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from PIL import Image

from envoys import StandardizedTransformer
from envoys.demo import scene
from envoys.image import plots, recipes
from envoys.testing import chat_prompt, noise_image, noise_video

GREY = (128, 128, 128)


def png(path) -> Image.Image:
    with Image.open(path) as image:
        assert image.format == "PNG"
        return image.convert("RGB")


def assert_aspect(picture: Image.Image, width: float, height: float) -> None:
    """The picture's panels (all but the colour bar's strip) are width / height, to a pixel."""
    panels = picture.width - plots.COLORBAR_PIXELS
    assert abs(panels - picture.height * width / height) <= 1, (picture.size, (width, height))


def not_blank(picture: Image.Image) -> bool:
    return len(set(picture.getdata())) > 16


def cell_centre(picture: Image.Image, rows: int, columns: int, r: int, c: int, panels: int = 1, panel: int = 0):
    width = (picture.width - plots.COLORBAR_PIXELS) / panels
    return picture.getpixel((int(panel * width + (c + 0.5) * width / columns), int((r + 0.5) * picture.height / rows)))


def test_overlay_colours_the_grid_cells_over_the_image_at_its_aspect_ratio(tmp_path):
    image = Image.new("RGB", (90, 60), GREY)
    grid = torch.zeros(2, 3)
    grid[0, 2] = 1  # top right
    grid[1, 0] = float("nan")  # a cell no token covers: the image shows through
    picture = png(plots.overlay(grid, image, tmp_path / "overlay.png"))
    assert_aspect(picture, 90, 60)
    hot = cell_centre(picture, 2, 3, 0, 2)
    cold = {cell_centre(picture, 2, 3, r, c) for r, c in [(0, 0), (0, 1), (1, 1), (1, 2)]}
    assert len(cold) == 1 and hot not in cold
    assert cell_centre(picture, 2, 3, 1, 0) == plots.backdrop(image).getpixel((0, 0))  # the image, in grey, dimmed


def test_the_heat_is_apart_from_the_images_colours(tmp_path):
    """The image is drawn grey: a red image and a grey one of the same luminance give the same picture, so a
    colour in it is the heat's, and a cell no token covers shows grey."""
    red, grey = Image.new("RGB", (60, 40), (200, 0, 0)), Image.new("RGB", (60, 40), (60, 60, 60))
    assert red.convert("L").getpixel((0, 0)) == grey.convert("L").getpixel((0, 0))
    grid = torch.tensor([[0.0, 1.0, 2.0], [3.0, float("nan"), 5.0]])
    over_red = png(plots.overlay(grid, red, tmp_path / "red.png"))
    assert list(over_red.getdata()) == list(png(plots.overlay(grid, grey, tmp_path / "grey.png")).getdata())
    uncovered = cell_centre(over_red, 2, 3, 1, 1)
    assert uncovered[0] == uncovered[1] == uncovered[2] < 128  # grey, dimmed
    assert plots.CMAP in ("viridis", "magma", "inferno", "plasma", "cividis")  # lightness rises with the value


def test_a_picture_over_an_image_has_a_colour_bar_of_its_scale(tmp_path):
    import matplotlib

    image = Image.new("RGB", (40, 40), GREY)
    grids = [torch.zeros(2, 2), torch.full((2, 2), 4.0)]
    figure = plots.panels_figure(grids, image, scale="attention")
    (bar,) = [axes for axes in figure.axes if axes.get_label() == "colorbar"]
    assert len(figure.axes) == 3 and bar.get_ylabel() == "attention"
    assert bar.get_ylim() == (0.0, 4.0)  # one scale over every panel
    picture = png(plots.side_by_side(grids, image, tmp_path / "bar.png", scale="attention"))
    x = 2 * picture.height + 10 + 7  # the bar's middle column, past the two square panels
    colours = matplotlib.colormaps[plots.CMAP]
    for down in (0.1, 0.5, 0.9):  # the bar spans 8% to 92% of the height, low values at the bottom
        expected = colours((1 - down - 0.08) / 0.84)[:3]
        shown = picture.getpixel((x, int(picture.height * down)))
        assert max(abs(a - round(255 * b)) for a, b in zip(shown, expected)) <= 6, (down, shown, expected)


def test_side_by_side_puts_each_grid_in_its_own_panel_on_one_scale(tmp_path):
    image = Image.new("RGB", (40, 80), GREY)
    grids = [torch.zeros(2, 2), torch.ones(2, 2), torch.zeros(2, 2)]
    grids[2][1, 1] = 1
    picture = png(plots.side_by_side(grids, image, tmp_path / "panels.png", titles=["a", "b", "c"],
                                     labels=[[["x", "y"], ["z", "w"]]] * 3))
    assert_aspect(picture, 3 * 40, 80)
    low = cell_centre(picture, 2, 2, 0, 0, panels=3, panel=0)
    high = cell_centre(picture, 2, 2, 1, 0, panels=3, panel=1)
    assert low != high
    assert cell_centre(picture, 2, 2, 0, 0, panels=3, panel=2) == low
    with pytest.raises(ValueError, match="3 grids but 2 titles"):
        plots.side_by_side(grids, image, tmp_path / "bad.png", titles=["a", "b"])
    with pytest.raises(ValueError, match=r"\[grid_rows, grid_columns\]"):
        plots.overlay(torch.zeros(2, 2, 3), image, tmp_path / "bad.png")


def tick_boxes(figure) -> list:
    """The x tick labels' boxes on the drawn figure, left to right."""
    figure.draw_without_rendering()
    (axes,) = figure.axes
    return [label.get_window_extent() for label in axes.get_xticklabels() if label.get_text()]


def assert_apart_and_inside(figure, count: int) -> None:
    boxes = tick_boxes(figure)
    assert len(boxes) == count
    for left, right in zip(boxes, boxes[1:]):
        assert left.x1 <= right.x0, (left, right)  # no two overlap
    whole = figure.bbox
    assert all(whole.x0 <= box.x0 and box.x1 <= whole.x1 and whole.y0 <= box.y0 for box in boxes)


TOKENS = ["assistant", "USER", "photograph", "both", "briefly", "5", "\u2581background", "elephant", "\n",
          "red ball", "Nevertheless", "image", "blue", "a"]


def test_the_knockout_charts_labels_do_not_overlap(tmp_path):
    """However many tokens, and however long: the chart widens with their count and turns them upright where
    flat they would overlap; a few short ones stay flat."""
    groups = {"clean": {token: 0.1 / (i + 1) for i, token in enumerate(TOKENS)},
              "knocked out": {token: 0.01 * (i + 1) for i, token in enumerate(TOKENS)}}
    many = plots.bars_figure(groups, title="text-to-image attention knocked out at layers [0, 1]")
    assert_apart_and_inside(many, len(TOKENS))
    assert many.get_figwidth() > plots.CHART_INCHES
    few = plots.bars_figure({"clean": {"a": 0.5, "b": 0.2}, "knocked out": {"a": 0.1, "b": 0.4}})
    assert_apart_and_inside(few, 2)
    assert few.get_figwidth() == plots.CHART_INCHES
    assert all(label.get_rotation() == 0 for label in few.axes[0].get_xticklabels())
    crowded = plots.bars_figure({"clean": {f"token number {i}": 0.01 for i in range(60)}})
    assert_apart_and_inside(crowded, 60)  # wider than the widest chart: upright
    assert crowded.get_figwidth() == plots.CHART_MAX_INCHES
    assert not_blank(png(plots.bars(groups, tmp_path / "knockout.png")))


def test_the_patching_charts_ticks_do_not_overlap():
    ticks = ["image_features", *(f"layers[{i}]" for i in range(28))]
    figure = plots.curves_figure({"patched": [i / 28 for i in range(29)], "clean": [1.0] * 29}, ticks=ticks)
    assert_apart_and_inside(figure, 29)


def test_curves_and_bars_are_drawn(tmp_path):
    curve = png(plots.curves({"patched": [0.1, 0.5, 0.2], "clean": [0.6] * 3}, tmp_path / "curves.png",
                             ticks=["image_features", "layers[0]", "layers[1]"]))
    bars = png(plots.bars({"clean": {"a": 0.5, "b": 0.2}, "knocked out": {"a": 0.1, "b": 0.4}}, tmp_path / "bars.png"))
    assert not_blank(curve) and not_blank(bars)
    with pytest.raises(ValueError, match="one value per point"):
        plots.curves({"a": [1, 2], "b": [1, 2, 3]}, tmp_path / "bad.png")


def test_a_missing_matplotlib_names_the_plot_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ImportError, match=r"vlm-instrument\[plot\]"):
        plots.overlay(torch.zeros(2, 2), Image.new("RGB", (8, 8)), tmp_path / "never.png")
    assert not (tmp_path / "never.png").exists()


CHECKPOINT = "llava-siglip"


def test_each_recipe_draws_itself(model, tmp_path):
    image = noise_image(60, 40, seed=0)
    prompt = chat_prompt(model.processor, 1, "What is it?")
    lens = png(recipes.logit_lens(model, prompt, [image]).draw(tmp_path / "lens.png"))
    assert_aspect(lens, model.num_layers * 60, 40)
    attention = png(recipes.attention_to_image(model, prompt, [image], layer=0).draw(tmp_path / "attention.png"))
    assert_aspect(attention, 60, 40)
    heads = png(recipes.attention_to_image(model, prompt, [image], layer=0, per_head=True).draw(tmp_path / "heads.png"))
    assert_aspect(heads, model.num_heads * 60, 40)
    patching = recipes.patch_image_rows(model, prompt, [image], [noise_image(60, 40, seed=1)], target=(3, 4))
    knockout = recipes.knock_out_image_attention(model, prompt, [image], layers=[0, 1])
    for picture in (lens, attention, heads, png(patching.draw(tmp_path / "patching.png")),
                    png(knockout.draw(tmp_path / "knockout.png"))):
        assert not_blank(picture)


def test_the_demo_writes_its_pictures(tmp_path):
    done = subprocess.run([sys.executable, "-m", "envoys.demo", "--plot", str(tmp_path / "out.png")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    attention = png(tmp_path / "out.png")
    width, height = scene().size
    panel = round(attention.height * width / height)  # one panel per text block, each the scene's aspect ratio
    panels = attention.width - plots.COLORBAR_PIXELS  # then the colour bar
    assert panels % panel == 0 and panels >= 2 * panel
    for name in ("out.png", "out-lens.png", "out-patching.png", "out-knockout.png", "out-tower.png", "out-qwen.png"):
        assert not_blank(png(tmp_path / name)), name
    assert "wrote" in done.stdout


def test_per_frame_puts_each_frames_grid_over_its_own_frame(tmp_path):
    frames = [Image.new("RGB", (40, 80), (0, 0, 0)), Image.new("RGB", (40, 80), (255, 255, 255))]
    grid = torch.zeros(2, 2, 2)
    grid[1, 0, 1] = 1.0
    picture = png(plots.per_frame(grid, frames, tmp_path / "frames.png", scale="norm"))
    assert_aspect(picture, 2 * 40, 80)
    # the same heat over a dark and a light frame: the frames show through, each under its own panel
    assert cell_centre(picture, 2, 2, 0, 0, panels=2, panel=0) != cell_centre(picture, 2, 2, 0, 0, panels=2, panel=1)
    assert cell_centre(picture, 2, 2, 0, 1, panels=2, panel=1) != cell_centre(picture, 2, 2, 0, 0, panels=2, panel=1)
    # four frames for two grid frames (temporal units of 2): each panel over its run's first frame
    assert png(plots.per_frame(grid, frames * 2, tmp_path / "units.png")).size == picture.size
    with pytest.raises(ValueError, match=r"the grid has 2 frame\(s\) and 3 image\(s\) were given"):
        plots.per_frame(grid, frames + frames[:1], tmp_path / "bad.png")
    with pytest.raises(ValueError, match=r"\[frames, grid_rows, grid_columns\]; got shape \(2, 2\)"):
        plots.per_frame(grid[0], frames, tmp_path / "bad.png")


def test_a_videos_token_grid_is_drawn_per_frame(tiny_checkpoint, tmp_path):
    model = StandardizedTransformer(tiny_checkpoint("qwen3_vl"), task="image-text-to-text")
    video = noise_video(4, 32, 32, seed=2)
    with model.trace(chat_prompt(model.processor, 0, "What happens?", videos=1), videos=[video]):
        features = model.vision.video_features.save()
    grid = model.vision.video_token_grid(features.norm(dim=-1))
    picture = png(plots.per_frame(grid, video, tmp_path / "video.png", title="feature norm"))
    assert_aspect(picture, 2 * 32, 32) and not_blank(picture)
