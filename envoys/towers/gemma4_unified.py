"""Gemma 4 Unified's vision side: no tower blocks, a vision embedder projecting each raw patch into the text width.

``model.embed_vision`` (a ``Gemma4UnifiedVisionEmbedder``, standard
``model.vision``) takes the image processor's pre-patchified pixels, ``[images,
rows, 3 * model_patch_size**2]``: each image resized (aspect ratio kept) to at
most ``max_soft_tokens * pooling_kernel_size**2`` patches of ``patch_size``
pixels, each ``pooling_kernel_size``-square block of them merged by the
processor into one flat patch of ``model_patch_size = patch_size *
pooling_kernel_size`` pixels, in raster order over the merged grid, then padded
with zero patches at position (-1, -1) to exactly ``max_soft_tokens`` rows.
Which rows are real is read off the processor's ``image_position_ids``
(`Gemma4UnifiedVision.patch_mask`).

There are no blocks: per row, a layer norm, a linear map and a layer norm
(``patch_ln1``, ``patch_dense``, ``patch_ln2``: ``patch_embeddings`` is
``patch_ln2``'s output), plus a factorized 2D position embedding (zero on
padded rows), then a layer norm (``pos_norm``: ``tower_output``, the
embedder's ``last_hidden_state``). The projector is the embedder's own
``multimodal_embedder`` (a weightless RMSNorm, then a linear map to the text
width, as Gemma 4's ``embed_vision``), run on every row, padding included; the
host keeps the real rows, image after image (``get_image_features``), and
scatters them: each real merged patch is one image token, so
``image_features == projector.output[vision.patch_mask]``. The projector runs
inside ``model.vision``, so read ``projector.input`` and ``projector.output``
before ``tower_output``.
"""

from __future__ import annotations

from typing import Any

from ..core.layouts import Patches
from ..core.standard import child
from ..core.values import documented, value
from ..image.grids import ImageInputs
from ..vision.tower import no_images, variable_resolution
from .blockless import BlocklessVision
from .gemma4 import Gemma4Grids, Gemma4Vision

#: How the padded patch axis shows, said once for every value's docstring.
PADDING = (
    "Each image's real (merged) patches are its first rows, in raster order; the rows after them, up to the "
    "processor's max_soft_tokens, are padding: vision.patch_mask, off the processor's image_position_ids "
    "((-1, -1) on a padded row), says which."
)


class Gemma4UnifiedGrids(Gemma4Grids):
    """Where each image's rows are on Gemma 4 Unified's embedder: one image token per real merged patch.

    As `Gemma4Grids`, the patch grid off ``image_position_ids`` (the merged
    patches' (x, y)), but the image tokens are the real rows themselves
    (no pooling in the model: the processor merged the patches), raster
    order, image after image.
    """

    def token_kernel(self, inputs: ImageInputs) -> int:
        return 1


GEMMA4_UNIFIED_GRIDS = Gemma4UnifiedGrids()


def no_patch_norm(vision: Any) -> str | None:
    """Why ``vision.patch_embeddings`` is unavailable, or None."""
    reason = no_images(vision)
    if reason is not None:
        return reason
    return None if child(vision, "patch_ln2") is not None else "this embedder names no patch_ln2"


class Gemma4UnifiedVision(BlocklessVision):
    """Gemma 4 Unified's vision embedder as ``model.vision``: no blocks, each merged patch embedded on its own.

    Its values are `Patches`, ``[images, patches, vision_hidden_size]`` over
    the padded patch axis (`PADDING`; `patch_mask` says which rows are real,
    ``patch_grid`` puts an image's real rows on its merged-patch grid),
    ``vision_hidden_size`` the embedder's width (``mm_embed_dim``).
    ``patch_embeddings`` is the patch embedding (``patch_ln2``'s output),
    ``tower_output`` the embedder's ``last_hidden_state`` (position embedding
    added, ``pos_norm``'s output), which the projector (``multimodal_embedder``,
    inside this module) receives whole. ``patch_size`` is the merged patch's
    side in pixels (``model_patch_size``), the pixels one row holds.
    ``image_size`` is Unavailable: each image keeps its aspect ratio; so are
    the blocks' values and sizes (`envoys.towers.blockless`).
    """

    no_blocks_because = (
        "model.vision is Gemma 4 Unified's vision embedder (model.embed_vision), which maps each merged patch to "
        "its features with layer norms, a linear map and a position embedding, and no attention or MLP; read "
        "vision.patch_embeddings, vision.tower_output, the projector's values and vision.image_features"
    )
    image_sizes_are = (
        "each image is resized, keeping its aspect ratio, to fill the processor's patch budget "
        "(max_soft_tokens merged patches of model_patch_size pixels); its real patches are the rows of "
        "vision.patch_mask (the processor's image_position_ids hold each merged patch's (x, y))"
    )

    patch_mask = documented(
        Gemma4Vision.patch_mask,
        "Which rows of the padded patch axis hold a real merged patch, ``[images, patches]`` bool.\n\n"
        "Read off the root's ``image_position_ids`` (the processor's; ``(-1, -1)`` marks a padded row) before "
        "anything runs, so read it first, as ``image_token_mask``. Each image's True rows come first, and each is "
        "one image token.",
    )

    patch_embeddings = value(
        "patch_embeddings", Patches, description="every image's embedded patches before the position embedding",
        key=lambda v: f"{child(v, 'patch_ln2').path}.output", select=None, unavailable=no_patch_norm,
        doc="Every image's flat merged patches embedded (``patch_ln1``, ``patch_dense``, ``patch_ln2``: the last's "
        "output), ``[images, patches, vision_hidden_size]``, before the factorized 2D position embedding is added. "
        + PADDING + " A padded row is the embedding of the processor's zero patch, the same for every padded row; "
        "its position embedding is zero.",
    )

    tower_output = documented(
        BlocklessVision.tower_output,
        "The embedder's ``last_hidden_state``, ``[images, patches, vision_hidden_size]``: the patch embeddings plus "
        "the position embedding, normed (``pos_norm``'s output), padding included; no blocks come between. "
        + PADDING + " It is what the projector receives whole (projector.input); the projector runs inside "
        "model.vision, so read its values before this one.",
    )

    # -- sizes, off the vision config (no blocks; image_size: variable resolution) -------------------

    @property
    def vision_config(self) -> Any:
        return self.root.config.vision_config

    @property
    def vision_hidden_size(self) -> int:
        """The embedder's width: the vision config's ``mm_embed_dim``."""
        return self.vision_config.mm_embed_dim

    @property
    def patch_size(self) -> int:
        """The side, in pixels, of the merged patch one row holds: ``patch_size * pooling_kernel_size``."""
        return self.vision_config.model_patch_size

    image_size = property(variable_resolution, doc="Unavailable: each image keeps its aspect ratio (variable_resolution).")
