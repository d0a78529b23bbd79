"""``model.video``: the tower's values on a prompt's videos.

Every family that serves videos but one runs its image tower on them too:
the host encodes the prompt's images (one run of the tower), then its
videos (a second run, after the image's scatter). ``model.vision`` reads the
tower's first run in the forward, so on a prompt with videos alone its values
are the videos'; ``model.video`` always reads the videos' run, also on a
prompt with both:

    with model.trace(prompt, images=[image], videos=[frames]):
        image_stream = model.vision.layers[0].layer_output.save()  # the images' run
        video_stream = model.video.layers[0].layer_output.save()   # the videos' run

`VideoRun` is that view of the tower: every value read or written through it
(its blocks' too, and nnsight's own ``.input`` / ``.output`` of its modules)
is pinned to the run after the images' (`envoys.core.passes`). Video-LLaVA has
a tower of its own for videos (`Media.video_tower`): its ``model.video`` is
that tower's envoy. A model that serves no videos answers every read with the
reason.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from nnsight import Envoy
from nnsight.intervention.eproperty import eproperty
from nnsight.intervention.interleaver import OutOfOrderError

from ..core.passes import on_pass, pinned
from ..core.paths import standard_path
from ..core.values import EProperty, Unavailable
from .media import absent_from_trace, not_served

#: Where the tower's run on the videos is in a forward, for an out-of-order read of it.
VIDEO_RUN_ORDER = (
    "the tower runs on a prompt's videos after its images: on the Qwen-VL hosts and the Qwen omni thinkers both runs "
    "come before the images' scatter (image_features), on LLaVA-NeXT-Video, LLaVA-OneVision, Video-LLaVA and Gemma 4 "
    "after it; read model.video's values after model.vision's and before video_features"
)


def _descriptor(envoy: Envoy, name: str) -> Any:
    """The class attribute ``name`` of ``envoy``'s class (a value's descriptor), or None."""
    for cls in type(envoy).__mro__:
        if name in vars(cls):
            return vars(cls)[name]
    return None


class VideoRun:
    """A tower envoy (``model.vision``, one of its blocks or parts) as it runs on the videos of the running forward.

    Reads and writes of its values go to the tower's run on the videos: its
    first run where the forward carries no image, its second where it does.
    Modules under it (``layers[i]``, ``self_attn``) are views of the same run.
    Methods other than reads (``skip``, the grids) are the envoy's own. A
    subclass pins another later run of the tower (`envoys.vision.crops.CropsRun`):
    its ``_passes``, ``run_order`` and ``run_name``.
    """

    #: where this run is in a forward, added to an out-of-order read's error
    run_order = VIDEO_RUN_ORDER
    #: what this run is, in its repr
    run_name = "the tower's run on the videos"

    def __init__(self, envoy: Envoy, tower: Envoy, label: str = "video") -> None:
        object.__setattr__(self, "_envoy", envoy)
        object.__setattr__(self, "_tower", tower)
        object.__setattr__(self, "_label", label)

    def _passes(self, name: str) -> int:
        """How many runs of the tower come before the videos' in the running forward: 1 where it carries images."""
        tower = self._tower
        reason = not_served(tower.root, "video") or absent_from_trace(tower, ("video",))
        if reason is not None:
            raise Unavailable(f"{self._label}.{name} is unavailable: {reason}")
        return 0 if absent_from_trace(tower, ("image",)) is not None else 1

    def _on_run(self, name: str):
        """The pin that makes a read or write of ``name`` the videos' run's: `on_pass` for a standard value (it pins
        itself, at its own location), a pin of ``{path}.{name}`` for nnsight's own ``input`` / ``output``."""
        passes = self._passes(name)
        if isinstance(_descriptor(self._envoy, name), EProperty):
            return on_pass(self._tower.path, passes)
        return pinned(f"{self._envoy.path}.{name}", None, 1, passes)

    @contextmanager
    def _named(self, name: str) -> Iterator[None]:
        """Errors raised in the block name the value as the user spelled it (``video.layers[0].layer_output``, not
        the tower's ``vision.`` name), and say where the videos' run is in the forward."""
        try:
            yield
        except (OutOfOrderError, Unavailable) as error:
            message = str(error.args[0]) if error.args else str(error)
            own = f"{standard_path(self._envoy)}.{name}"
            if message.startswith(own):
                message = f"{self._label}.{name}{message[len(own):]}"
            if isinstance(error, OutOfOrderError):
                message += f"; {self.run_order}"
            error.args = (message, *error.args[1:])
            raise

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if isinstance(_descriptor(self._envoy, name), eproperty):
            with self._named(name), self._on_run(name):
                return getattr(self._envoy, name)
        found = getattr(self._envoy, name)
        if isinstance(found, Envoy):
            return type(self)(found, self._tower, f"{self._label}.{name}")
        return found

    def __setattr__(self, name: str, value: Any) -> None:
        if not isinstance(_descriptor(self._envoy, name), eproperty):
            raise AttributeError(f"{self._label}.{name} cannot be set: only a value of the tower's run on the videos can")
        with self._named(name), self._on_run(name):
            setattr(self._envoy, name, value)

    def __getitem__(self, key: Any) -> VideoRun:
        return type(self)(self._envoy[key], self._tower, f"{self._label}[{key}]")

    def __len__(self) -> int:
        return len(self._envoy)

    def __iter__(self):
        return (type(self)(each, self._tower, f"{self._label}[{index}]") for index, each in enumerate(self._envoy))

    def support(self, layer: int | None = None) -> dict[str, Any]:
        """The tower's values (`Vision.support`), served here on its run on the videos."""
        return self._envoy.support(layer) if layer is not None else self._envoy.support()

    def __repr__(self) -> str:
        return f"{self._label}: {self.run_name} ({self._envoy.path})"
