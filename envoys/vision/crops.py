"""``model.crops``: the tower's second run in one forward, on the local crops of the images the processor crops.

Some hosts encode an image twice, with the same tower: a global view of every
image (resized whole), then the local crops of the images large enough to be
cut (Step-3.7: ``get_image_features`` calls ``self.vision_model`` on
``pixel_values``, then on ``pixel_values_local``). Each of the tower's sites
then fires once per run. ``model.vision`` reads the first run, the global
views, ``[images, patches, vision_hidden_size]``; ``model.crops`` reads the
second, one row per crop, ``[crops, patches, vision_hidden_size]``, crops in
the order the processor made them (image after image, each image's row after
row). Where the host's projector runs once per view as well,
``model.crops.projector`` is its run on the crops (``model.projector`` its
run on the global views). What the text model receives, each image's crops'
rows then its global view's, is ``model.vision.image_features``, read at the
one scatter:

    with model.trace(prompt, images=[image]):
        views = model.vision.layers[0].layer_output.save()   # the global views' run
        crops = model.crops.layers[0].layer_output.save()    # the local crops' run, after it
        projected = model.crops.projector.output.save()
        features = model.vision.image_features.save()

`CropsRun` is that view of the tower (`envoys.vision.video.VideoRun`'s, pinned
to the run after the first: `envoys.core.passes`). Its values, its blocks'
and nnsight's own ``.input`` / ``.output`` of its modules read and write that
run. Where the forward makes no crops (no image of the trace is large enough,
so the processor gives no crop pixels and the host does not run the tower a
second time) every value of ``model.crops`` is `Unavailable`, saying so,
rather than waiting for a run that never comes. In a trace of several invokes
that carry images the crops' run is the batch's, not an invoke's: its values
are refused there, and read in a trace of one invoke. A family whose tower
runs once per forward has no ``model.crops``: its reads say why (`no_crops`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from nnsight.intervention.interleaver import Mediator

from ..core.values import Unavailable
from ..image.grids import Grid, GridError, gather, place, raster, tower_rows
from .tower import NoTower, Vision, no_images
from .video import VideoRun

#: Where the tower's run on the crops is in a forward, for an out-of-order read of it.
CROPS_RUN_ORDER = (
    "the tower runs on the local crops after the global views (and, where the host projects each run, after the "
    "views' projector): read model.crops's values after model.vision's and model.projector's, and before "
    "model.crops.projector's and image_features"
)


@dataclass(frozen=True)
class Crops:
    """A family whose host runs its tower a second time in one forward, on the local crops (`CropsRun`).

    ``carrier``: the forward's keyword that holds the crops' pixels
    (Step-3.7's ``pixel_values_local``), absent or empty where the processor
    made no crop. ``projector_per_run``: the host's projector runs once per
    run too (on the views' tower output, then on the crops'), so
    ``model.crops.projector`` is its second run. ``made_when``: when the
    processor crops an image, for the reason a crop-less forward gives.
    """

    carrier: str
    made_when: str
    projector_per_run: bool = True


def no_crops_here(root: Any) -> str | None:
    """Why the running forward has no crops' run: the family crops nothing, no batch carried images, this trace's
    several invokes share one, or its inputs carry no crop; None where the tower runs on crops (or outside a trace)."""
    crops = root.family.crops
    try:
        worker = Mediator.current("model.crops")
    except ValueError:
        return None
    batcher = getattr(worker.interleaver, "batcher", None)
    if getattr(batcher, "layout", None) is not None:
        return (
            "the tower's run on the local crops is the batch's, every invoke's crops in one run, so no invoke's rows "
            "of it are its own; read model.crops in a trace of one invoke"
        )
    inputs = root.__dict__.get("last_image_inputs")
    pixels = inputs.get(crops.carrier) if inputs is not None else None
    if isinstance(pixels, torch.Tensor) and pixels.shape[0] > 0:
        return None
    return (
        f"this forward makes no local crops ({crops.carrier} is absent: the processor crops {crops.made_when}), so "
        f"the tower runs once, on the global views, which model.vision holds; pass a larger image for model.crops"
    )


class CropsRun(VideoRun):
    """A tower envoy (``model.vision``, one of its blocks or parts, or the projector) as it runs on the local crops.

    Its reads and writes go to the module's second run in the forward; its
    modules are views of the same run; methods other than reads are the
    envoy's own.
    """

    run_order = CROPS_RUN_ORDER
    run_name = "the tower's run on the local crops"

    def _passes(self, name: str) -> int:
        """One run of the module comes before the crops': the global views'. `Unavailable` where there is none."""
        reason = no_images(self._tower) or no_crops_here(self._tower.root)
        if reason is not None:
            raise Unavailable(f"{self._label}.{name} is unavailable: {reason}")
        return 1

    def __getattr__(self, name: str) -> Any:
        if name == "projector" and self._label == "crops":
            root = self._tower.root
            if not root.family.crops.projector_per_run:
                raise Unavailable(
                    "crops.projector is unavailable: this family's projector runs once, on both runs' outputs "
                    "together; read model.projector")
            return CropsRun(root.projector, root.projector, "crops.projector")
        return super().__getattr__(name)

    def support(self, layer: int | None = None) -> dict[str, Any]:
        """The tower's values (`Vision.support`), served here on its run on the local crops."""
        return super().support(layer)

    # -- each crop on its own patch grid ------------------------------------------------------------------------------

    def crop_grid(self, crop: int, **options: Any) -> Grid:
        """Crop ``crop``'s grid over the crops' run's rows: row ``crop`` of the stream, its ``side x side`` patches in
        raster order (``side``: the crop's pixels over the tower's patch size), off the last batch's crop pixels; or
        the family's grid layout's ``crop_grid(pixels, crop, config, **options)`` where it has one (a tower whose rows
        are not one a patch: Unlimited-OCR's)."""
        root = self._tower.root
        inputs = root.__dict__.get("last_image_inputs")
        pixels = inputs.get(root.family.crops.carrier) if inputs is not None else None
        if pixels is None:
            raise Unavailable(f"crops.patch_grid is unavailable: {no_crops_here(root) or 'no batch carried crops'}")
        crops = pixels.shape[0]
        if not isinstance(crop, int) or isinstance(crop, bool) or not 0 <= crop < crops:
            raise GridError(f"crop={crop!r} is not a crop of this batch: it holds {crops} crop(s), 0..{crops - 1}")
        own = getattr(root.family.grid_layout, "crop_grid", None)
        if own is not None:
            return own(pixels, crop, root._module.config, **options)
        if options:
            raise TypeError(f"crops.patch_grid takes no options here: {', '.join(options)} given")
        side = pixels.shape[-1] // self._tower.patch_size
        start = crop * side * side
        return Grid(raster(side, side, start), slice(start, start + side * side), crops * side * side)

    def patch_grid(self, value: torch.Tensor, crop: int = 0, **options: Any) -> torch.Tensor:
        """A per-patch value of the crops' run, crop ``crop``'s on its patch grid, ``[grid_rows, grid_columns, ...]``:
        ``value`` is the run's stream (``[crops, patches, ...]``) or this crop's rows alone; trailing axes kept. Crops
        are numbered as the processor made them (image after image, each image's row after row), on the last batch
        that carried crops. ``options`` are the family layout's own (Unlimited-OCR's ``of=``)."""
        grid = self.crop_grid(crop, **options)
        return gather(tower_rows(value, grid, 2), grid)

    def place_patch_grid(self, grid: torch.Tensor, into: torch.Tensor, crop: int = 0, **options: Any) -> torch.Tensor:
        """Write ``grid`` (as `patch_grid` returns it) into the crops' run's value ``into`` in place, crop ``crop``'s
        rows; a grid of another shape is refused with nothing written. Returns ``into``."""
        cells = self.crop_grid(crop, **options)
        return place(grid, tower_rows(into, cells, 2), cells)

    def token_grid(self, value: torch.Tensor, image: int = 0, **options: Any) -> torch.Tensor:
        raise Unavailable(
            "crops.token_grid is not served: an image's tokens are its crops' then its global view's; "
            "model.vision.token_grid lays out the view's, and a crop's are the processor's num_patch_feature_size "
            "tokens, crop after crop, before them")


def no_crops(model_type: str) -> str:
    """Why a family has no ``model.crops``: its tower runs once a forward."""
    return (
        f"{model_type}'s tower runs once a forward, on every image, view and crop the processor makes, so "
        f"model.vision holds them all; model.crops is the second run of a tower that runs twice (Step-3.7's)"
    )


def crops_of(model: Any) -> Any:
    """``model.crops``: the tower's run on the local crops (`CropsRun`), or what says why the model has none."""
    family = model.family
    vision = model.__dict__.get("vision")
    if family.crops is None or not isinstance(vision, Vision):
        return NoTower("crops", no_crops(family.model_type) if isinstance(vision, Vision) else vision.reason
                       if isinstance(vision, NoTower) else "this model has no vision tower")
    return CropsRun(vision, vision, "crops")


__all__ = ["CROPS_RUN_ORDER", "Crops", "CropsRun", "crops_of", "no_crops", "no_crops_here"]
