"""A tower of two stacks: a SAM encoder, then a stack over its folded grid (Unlimited-OCR's CLIP-style encoder,
DeepSeek-OCR 2's decoder over the patches and learned queries).

The SAM stack embeds each view's patches (``vision.patch_embed``, its
``patch_embeddings`` `SamTower`'s) and runs its blocks (``vision.sam_layers``);
its neck and two 3x3 convolutions of stride 2 fold the grid (`folded_side`)
into the rows the second stack (``vision.layers``) runs over. `SamStackedVision`
holds the sizes both families read: the second stack's as the standard ones
(``encoder_config``), the SAM stack's under ``sam_`` (``sam_config``), and the
SAM patch convolution's side and the global view's side as ``patch_size`` and
``image_size``. A family subclass says where its ``sam_features`` and
``tower_output`` are.
"""

from __future__ import annotations

from typing import Any

from ..vision.tower import Vision
from .sam import SamTower


def folded_side(pixels: int, sam_patch: int) -> int:
    """The side of a view's (or crop's) folded grid: its SAM grid after two 3x3 convolutions of stride 2 and padding 1,
    each ``ceil(n / 2)``."""
    half = (pixels // sam_patch + 1) // 2
    return (half + 1) // 2


class SamStackedVision(Vision):
    """A tower whose SAM stack (``sam_layers``) runs before its second stack (``layers``), one row per view."""

    patch_embeddings = SamTower.patch_embeddings

    @property
    def encoder_config(self) -> Any:
        """The second stack's config."""
        return self._module.config.encoder_config

    @property
    def sam_config(self) -> Any:
        """The SAM stack's config."""
        return self._module.config.sam_config

    @property
    def vision_hidden_size(self) -> int:
        return self.encoder_config.hidden_size

    @property
    def num_heads(self) -> int:
        return self.encoder_config.num_attention_heads

    @property
    def intermediate_size(self) -> int:
        return self.encoder_config.intermediate_size

    @property
    def patch_size(self) -> int:
        """The SAM patch convolution's side in pixels (a row of the second stack covers four times it a side)."""
        return self.sam_config.patch_size

    @property
    def image_size(self) -> int:
        """The global view's side in pixels: the SAM stack's configured image size."""
        return self.sam_config.image_size

    @property
    def num_sam_layers(self) -> int:
        """How many SAM blocks run before the second stack."""
        return len(self.sam_layers)

    @property
    def sam_hidden_size(self) -> int:
        return self.sam_config.hidden_size

    @property
    def sam_num_heads(self) -> int:
        return self.sam_config.num_attention_heads

    @property
    def sam_intermediate_size(self) -> int:
        """A SAM block's MLP width: the SAM config's ``mlp_dim``."""
        return self.sam_config.mlp_dim

    @property
    def window_size(self) -> int:
        """The side, in SAM patches, of the windows the SAM blocks not in ``global_attn_indexes`` attend within."""
        return self.sam_config.window_size

    @property
    def global_attn_indexes(self) -> tuple[int, ...]:
        """The SAM blocks that attend over the whole grid."""
        return tuple(self.sam_config.global_attn_indexes)


__all__ = ["SamStackedVision", "folded_side"]
