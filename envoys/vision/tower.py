"""The vision side's standard envoys: the tower, its blocks, and where the image meets the text model.

The tower answers to ``model.vision``, its blocks to ``vision.layers[i]`` (the
same block values as a text block, as `Patches`), the last module before the
scatter to ``model.projector``. Two values say where the image enters the text
model: ``vision.image_token_mask``, off the root's inputs, and
``vision.image_features``, read at the scatter call in the forward of the
module the family keys `ImageScatter` on (or the root's own, for a family
with ``root_scatter``, the spec's ROOT_SCATTER), so
``layers[0].input[vision.image_token_mask] == vision.image_features``.

Every tower value is gated by `no_images`: a load no image can reach (no
processor) has no vision values, and a trace whose inputs carry no image
refuses them (`Unavailable`) when they are requested, before nnsight waits
for a tower that does not run.

``vision.patch_grid`` / ``token_grid`` lay a tower value or a value over the
image tokens out on one image's own grid, and ``place_patch_grid`` /
``place_token_grid`` write a grid back, as the family's layout says
(`envoys.image.grids`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from ..core.layouts import ImageFeatures, ImageTokenMask, PackedPatches, Patches, VideoFeatures, VideoTokenMask
from ..core.standard import Standard, child, rows_over
from ..core.values import EProperty, Field, Unavailable, value
from ..image.frames import video_grid, video_patches
from ..image.grids import gather, image_grid, place, token_rows, tower_rows
from ..text.blocks import interior_values, own_output, stream_values
from .media import (
    CARRIERS,
    TEXT_ONLY,
    TOWER_MEDIA,
    absent_from_trace,
    carries,
    not_served,
    scattered_features,
    token_id,
    token_mask,
)
from .scatter_host import scatter_host

#: The forward arguments that carry an image (pixels, or what the tower made of them; Video-LLaVA's processor names
#: the pixels ``pixel_values_images``).
IMAGE_INPUTS = CARRIERS["image"][1:]

#: The video's values on the tower's root, served where the family serves videos.
VIDEO_VALUES = ("video_token_mask", "video_features")

#: What an out-of-order read of a vision value adds to nnsight's error.
VISION_ORDER = (
    "reads follow the forward: image_token_mask, the tower's values, the projector's, image_features, then the "
    "text model's; and the tower's values exist only in a forward an image reaches (pass images= with a prompt "
    "that holds the image placeholder)"
)

#: Why a value of the image's pathway is not served on a later step of generate.
FIRST_STEP_ONLY = (
    "the image is encoded once, in the forward of generate's step 0 (the tower, the projector and "
    "image_features run there only); read it in step 0 (tracer.iter[0]), or in a trace"
)

class NoTower:
    """``model.vision`` (or ``model.projector``) on a checkpoint of the text model alone: there is no tower.

    Every attribute raises `Unavailable` with the reason; ``support()`` is empty.
    """

    def __init__(self, name: str, reason: str) -> None:
        self._name = name
        self._reason = reason

    def support(self, layer: int | None = None) -> dict[str, Any]:
        return {}

    def __getattr__(self, attribute: str) -> Any:
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        raise Unavailable(f"{self._name}.{attribute} is unavailable: {self._reason}")

    @property
    def reason(self) -> str:
        """Why there is none."""
        return self._reason

    def __repr__(self) -> str:
        return f"{self._name}: none ({self._reason})"


def carries_images(inputs: Mapping[str, Any]) -> bool:
    """Whether keyword inputs hold what a tower runs on: images or videos (``images=`` or ``videos=`` for the
    processor, or what the forward takes: `IMAGE_INPUTS`, video pixels)."""
    return carries(inputs, TOWER_MEDIA)


def tower_media(envoy: Any) -> tuple[str, ...]:
    """What the tower ``envoy`` is in runs on: videos alone in a family's separate video tower (Video-LLaVA's), images
    alone in the image tower beside it, else images and videos (one tower, run once for each)."""
    family = getattr(envoy.root, "family", None)
    video_tower = family.media.video_tower if family is not None else None
    if video_tower is None:
        return TOWER_MEDIA
    inside = envoy.path == f"{envoy.root.path}.{video_tower}" or envoy.path.startswith(f"{envoy.root.path}.{video_tower}.")
    return ("video",) if inside else ("image",)


def no_image_in_trace(envoy: Any, media: tuple[str, ...] | None = None) -> str | None:
    """Inside a trace, why nothing the tower ``envoy`` is in runs on reaches its forward (none of its inputs carries
    ``media``, by default the tower's: `tower_media`), or None: outside a trace, or where an input may carry one."""
    return absent_from_trace(envoy, media or tower_media(envoy))


def no_images(envoy: Any) -> str | None:
    """Why no image reaches the model ``envoy`` belongs to, or ``envoy`` itself, or the running trace's forward
    (`no_image_in_trace`), or None: the one place that decides."""
    return never_an_image(envoy) or no_image_in_trace(envoy)


def never_an_image(envoy: Any) -> str | None:
    """Why no image reaches the model ``envoy`` belongs to, or ``envoy`` itself, in any forward, or None.

    ``envoy`` itself: a module the tower's envoys reach by its class that no
    image runs through, which its family does not serve (`Family.not_served`).
    """
    root = envoy.root
    if getattr(root, "processor", None) is None:
        return TEXT_ONLY
    if scatter_host(root) is None:
        return "this model's family names no module that scatters the image features into the text stream"
    family = getattr(root, "family", None)
    return family.not_served(envoy) if family is not None else None


def norm_output(vision: Any) -> str:
    """The location of the tower's final norm's output (``vision.norm``), where a tower's ``tower_output`` is served
    when its own output is not that stream (it folds, merges or reorders it after the norm)."""
    return f"{child(vision, 'norm').path}.output"


def no_patch_embed(vision: Any) -> str | None:
    """Why ``vision.patch_embeddings`` is unavailable, or None."""
    return no_images(vision) or (None if child(vision, "patch_embed") is not None else "this tower names no patch_embed")


def image_token_id(config: Any) -> int:
    """The id of the token the processor puts where an image's features go."""
    return token_id(config, "image")


def patch_rows(grid: torch.Tensor) -> torch.Tensor:
    """A convolution's ``[images, width, rows, columns]`` as one row per patch, ``[images, patches, width]`` (a view)."""
    return grid.flatten(2).transpose(1, 2)


def onto_patch_grid(written: torch.Tensor, current: torch.Tensor) -> torch.Tensor:
    """Rows per patch back on the convolution's grid ``current``: `patch_rows` undone."""
    return written.transpose(1, 2).reshape(current.shape)


def tower_values(layout: type) -> tuple[EProperty, EProperty]:
    """A tower's ``patch_embeddings`` and ``tower_output`` in ``layout`` (`Patches`, or a packed tower's `PackedPatches`).

    ``patch_embeddings`` is the patch embedding's output, one row per patch in
    raster order, before position embeddings, CLS or pre-norm;
    ``tower_output`` the tower's ``last_hidden_state``.
    """
    return (
        value("patch_embeddings", layout, description="the patch embedding's output", key=lambda v: f"{v.patch_embed.path}.output",
              select=None, unavailable=no_patch_embed, view=patch_rows, inverse=onto_patch_grid,
              doc=f"The patch embedding's output, ``{layout.shape()}``, one row per patch in raster order, before "
              "position embeddings, CLS or pre-norm."),
        value("tower_output", layout, description="the last block's stream after the tower's final norm", key="output",
              select=Field("last_hidden_state"), unavailable=no_images,
              doc=f"The tower's last_hidden_state, ``{layout.shape()}``: the last block's stream after its final norm "
              "where it has one, before pooling or CLS dropping."),
    )


class Vision(Standard):
    """``model.vision``: a vision tower's root. Its blocks are ``layers``; its sizes are its own config's."""

    order_hint = VISION_ORDER
    first_step_only = FIRST_STEP_ONLY

    #: On a tower with no fixed resolution, where each image's size is (`variable_resolution` says it).
    image_sizes_are: str | None = None

    # Where the image meets the text model (`envoys.vision.media`): ``layers[0].input[image_token_mask] ==
    # image_features``; the video's pair likewise, where the family serves videos.
    image_token_mask = token_mask("image", ImageTokenMask, never_an_image)
    image_features = scattered_features("image", ImageFeatures, never_an_image)
    video_token_mask = token_mask("video", VideoTokenMask)
    video_features = scattered_features("video", VideoFeatures)

    patch_embeddings, tower_output = tower_values(Patches)

    # -- sizes, off the tower's own config ----------------------------------------------------

    @property
    def vision_config(self) -> Any:
        return self._module.config

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @property
    def vision_hidden_size(self) -> int:
        return self.vision_config.hidden_size

    @property
    def num_heads(self) -> int:
        return self.vision_config.num_attention_heads

    @property
    def head_dim(self) -> int:
        """Width of one head: the config's head_dim when it says, else vision_hidden_size // num_heads."""
        return getattr(self.vision_config, "head_dim", None) or self.vision_hidden_size // self.num_heads

    @property
    def intermediate_size(self) -> int:
        return self.vision_config.intermediate_size

    @property
    def patch_size(self) -> int:
        return self.vision_config.patch_size

    @property
    def image_size(self) -> int:
        """Side of the square image the tower is configured for, in pixels."""
        return self.vision_config.image_size

    # -- values on the image's own grid (`envoys.image.grids`) ---------------------------------------

    def patch_grid(self, value: torch.Tensor, image: int = 0, **options: Any) -> torch.Tensor:
        """A per-patch tower value of image ``image`` on that image's patch grid, ``[grid_rows, grid_columns, ...]``.

        ``value`` is in the tower's stream layout (``[images_or_tiles, patches,
        ...]``, a packed tower's ``[all_patches, ...]`` or ``[1, all_patches,
        ...]``) or over this image's rows only (first axis the image's rows,
        e.g. one head's attention from one patch over the image's keys);
        trailing axes are kept. CLS, register and padding rows are dropped,
        tiles placed where they came from, as the family's layout says; a
        cell no row covers is NaN (0 on an integer value). Inside a trace (on
        the real values) or after it, on the last batch that carried images;
        inside an invoke of several that carry images, on that invoke's own
        images (``image`` 0 its first), as its values are its own.
        ``options`` are the family layout's own, where its rows depend on
        which value is passed (Qwen's and RADIO's ``of=``); an option the
        layout does not take is a TypeError naming those it does.
        """
        layout, _, grid = image_grid(self.root, "patch_grid", image, options)
        return gather(tower_rows(value, grid, layout.stream_dims), grid)

    def token_grid(self, value: torch.Tensor, image: int = 0, **options: Any) -> torch.Tensor:
        """A value over the image tokens, image ``image``'s on the grid its tokens cover, ``[grid_rows, grid_columns, ...]``.

        ``value`` is a text-stream value ``[batch, seq, ...]`` (read at the
        image-token mask), the image tokens' rows ``[image_tokens, ...]`` over
        the batch (like ``image_features``), or this image's tokens only.
        ``options`` as `patch_grid`'s.
        """
        _, inputs, grid = image_grid(self.root, "token_grid", image, options)
        return gather(token_rows(value, grid, inputs), grid)

    def video_token_grid(self, value: torch.Tensor, video: int = 0) -> torch.Tensor:
        """A value over the video tokens, video ``video``'s on its frames' grids, ``[frames, grid_rows, grid_columns,
        ...]``.

        A frame is what the tower encodes as one: a sampled frame, or the Qwen
        ViT's temporal unit of ``temporal_patch_size`` frames. ``value`` is a
        text-stream value ``[batch, seq, ...]`` (read at the video-token mask),
        the video tokens' rows ``[video_tokens, ...]`` over the batch (like
        ``video_features``), or this video's tokens only; tokens on no frame's
        grid (a CLS, a newline) are left out. On the last batch that carried a
        video, inside a trace or after it.
        """
        inputs, mask, grid = video_grid(self.root, video)
        return gather(token_rows(value, grid, inputs, "video", mask), grid)

    def video_patch_grid(self, value: torch.Tensor, video: int = 0) -> torch.Tensor:
        """A per-patch value of the tower's run on the videos, video ``video``'s on its frames' patch grids,
        ``[frames, grid_rows, grid_columns, ...]``.

        ``value`` is in that run's stream layout (``model.video``'s values, or
        ``model.vision``'s on a prompt whose only medium is videos), or over
        this video's rows only; a frame is what the tower encodes as one (the
        Qwen ViT's temporal unit). On the last batch that carried a video,
        inside a trace or after it; `Unavailable` on a family whose layout
        places no video patches.
        """
        inputs, grid = video_patches(self.root, video)
        return gather(tower_rows(value, grid, self.root.family.grid_layout.stream_dims), grid)

    def place_video_token_grid(self, grid: torch.Tensor, into: torch.Tensor, video: int = 0) -> torch.Tensor:
        """Write ``grid`` (as `video_token_grid` returns it) into ``into``'s rows of video ``video``, in place.

        Returns ``into``; a grid of another shape is refused with nothing written.
        """
        inputs, mask, cells = video_grid(self.root, video)
        return place(grid, token_rows(into, cells, inputs, "video", mask), cells)

    def place_patch_grid(self, grid: torch.Tensor, into: torch.Tensor, image: int = 0, **options: Any) -> torch.Tensor:
        """Write ``grid`` (as `patch_grid` returns it) into the tower value ``into`` in place, image ``image``'s rows.

        Uncovered cells are skipped; a grid of another shape is refused with
        nothing written. Returns ``into``.
        """
        layout, _, cells = image_grid(self.root, "patch_grid", image, options)
        return place(grid, tower_rows(into, cells, layout.stream_dims), cells)

    def place_token_grid(self, grid: torch.Tensor, into: torch.Tensor, image: int = 0, **options: Any) -> torch.Tensor:
        """Write ``grid`` (as `token_grid` returns it) into ``into``'s image-token rows of image ``image``, in place.

        Returns ``into``; refused, with nothing written, as `place_patch_grid` is.
        """
        _, inputs, cells = image_grid(self.root, "token_grid", image, options)
        return place(grid, token_rows(into, cells, inputs), cells)

    def support(self, layer: int | None = None) -> dict[str, Any]:
        """Which tower values this checkpoint has: None when available (on every block), else the reason.

        The tower's own values plus every block value over ``layers``
        (``"layer_output"``, ``"self_attn.attention_probabilities"``, ...), a
        block value being ``{layer: reason}`` where some blocks lack it. With
        ``layer``, that block's values alone. Empty on a load no image reaches.
        The video's values (``video_token_mask``, ``video_features``) are
        listed where the family serves videos; elsewhere ``model.support()``'s
        ``video`` row says why it has none.
        """
        if no_images(self) is not None:
            return {}
        rows = rows_over(list(self.layers), layer)
        if layer is not None:
            return rows
        return {**self.own_support(), **rows}

    def own_support(self) -> dict[str, str | None]:
        """The tower root's own values (`Standard.support`), the video's where the family serves videos."""
        own = super().support()
        if not_served(self.root, "video") is None:
            return own
        return {name: reason for name, reason in own.items() if name not in VIDEO_VALUES}


def variable_resolution(vision: Vision) -> int:
    """``image_size`` on a tower with no fixed resolution: Unavailable, saying where each image's size is.

    A tower class uses it as ``image_size = property(variable_resolution)`` and
    says where the sizes are in its ``image_sizes_are``.
    """
    where = f"; {vision.image_sizes_are}" if vision.image_sizes_are else ""
    raise Unavailable(f"{type(vision._module).__name__} takes images of any resolution, so it has no image_size{where}")


def as_patches(tensor: torch.Tensor) -> torch.Tensor:
    """A tower's stream as `Patches`: a packed tower's ``[patches, vision_hidden_size]`` gets a leading
    images axis of 1 (a view); ``[images, patches, vision_hidden_size]`` is already Patches."""
    return tensor.unsqueeze(0) if tensor.dim() == 2 else tensor


def from_patches(written: torch.Tensor, current: torch.Tensor) -> torch.Tensor:
    """`Patches` back in the shape of the module's own tensor ``current``: a packed tower's drops the leading 1."""
    return written.reshape(current.shape)


class VisionLayer(Standard):
    """A tower block: the text block's values as Patches, ``layer_input + attention_output + mlp_output == layer_output``.

    ``[images, patches, vision_hidden_size]``, one row per image; a packed tower's
    block is a `PackedVisionLayer`.
    """

    order_hint = VISION_ORDER
    first_step_only = FIRST_STEP_ONLY

    layer_input, attention_output, mlp_output, layer_output = stream_values(Patches, no_images, as_patches, from_patches)


class VisionAttention(Standard):
    """A tower block's attention: the text attention's interior, one row per image, no causal mask."""

    order_hint = VISION_ORDER
    first_step_only = FIRST_STEP_ONLY

    attention_output = own_output("attention_output", Patches, "what the attention adds to the stream", no_images,
                                  as_patches, from_patches)
    (
        attention_queries,
        attention_keys,
        attention_values,
        attention_scores,
        attention_probabilities,
        attention_head_outputs,
    ) = interior_values("image", no_images)


class VisionMlp(Standard):
    """A tower block's MLP: ``mlp_output`` is what it adds to the stream (the block's ``mlp_output``)."""

    order_hint = VISION_ORDER
    first_step_only = FIRST_STEP_ONLY

    mlp_output = own_output("mlp_output", Patches, "what the MLP adds to the stream", no_images, as_patches, from_patches)


# -- a packed tower: the same values, every image's patches in one row --------------------------------------------


class PackedVision(Vision):
    """A packed tower's root (the Qwen ViT, Pixtral, RADIO, ...): every image's patches run in one row.

    Its stream values are `PackedPatches`, ``[1, patches, vision_hidden_size]``,
    image after image; its blocks are `PackedVisionLayer`, `PackedVisionAttention`
    and `PackedVisionMlp`. A family's tower says the rest (where the patches are
    read, in which order).
    """

    patch_embeddings, tower_output = tower_values(PackedPatches)


class PackedVisionLayer(VisionLayer):
    """A packed tower's block (the Qwen ViT, Pixtral, ...): `VisionLayer`'s values as `PackedPatches`.

    The module runs on ``[patches, vision_hidden_size]`` (or already ``[1, patches,
    vision_hidden_size]``), every image's patches one after another, so each
    value is ``[1, patches, vision_hidden_size]``.
    """

    layer_input, attention_output, mlp_output, layer_output = stream_values(
        PackedPatches, no_images, as_patches, from_patches
    )


class PackedVisionAttention(VisionAttention):
    """A packed tower block's attention: ``attention_output`` is `PackedPatches`, ``[1, patches, vision_hidden_size]``."""

    attention_output = own_output("attention_output", PackedPatches, "what the attention adds to the stream",
                                  no_images, as_patches, from_patches)


class PackedVisionMlp(VisionMlp):
    """A packed tower block's MLP: ``mlp_output`` is `PackedPatches`, ``[1, patches, vision_hidden_size]``."""

    mlp_output = own_output("mlp_output", PackedPatches, "what the MLP adds to the stream", no_images, as_patches,
                            from_patches)
