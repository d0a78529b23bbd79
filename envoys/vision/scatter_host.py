"""The scatter host: the module whose forward writes a medium's features into the token embeddings.

The family's `Scatter` (`rewrites.image_scatter`) says where: the wrapper's
inner model by default, another class, or the root itself. Every medium's
values (`envoys.vision.media`) and the tower's (`envoys.vision.tower`) find it
here.
"""

from __future__ import annotations

from typing import Any

from rewrites.image_scatter import Scatter

from ..core.standard import Standard
from ..core.values import Argument


def features_argument(scatter: Scatter) -> Argument:
    """The argument of the scatter's call that is the image features, as its `Scatter` says."""
    return Argument(*scatter.argument)


class ImageScatter(Standard):
    """The module whose forward scatters the image features into the token embeddings (the scatter host).

    ``scatter_operation`` is the site of the image's call in its forward
    (``inputs_embeds_masked_scatter_0`` for ``inputs_embeds.masked_scatter(mask,
    features)``) and ``scatter_argument`` which argument is the features, both
    as the family's `Scatter` says (`rewrites.image_scatter`). Carries no
    values of its own.
    """

    @property
    def scatter_operation(self) -> str:
        return self.root.family.scatter.site

    @property
    def scatter_argument(self) -> Argument:
        return features_argument(self.root.family.scatter)


def scatter_host(root: Any) -> tuple[Any, str, Argument] | None:
    """``(host envoy, operation, argument)`` of the image scatter, or None.

    The root itself when its family's `Scatter` says the root scatters in its
    own forward (``root_scatter``), else the root's child that is an
    `ImageScatter`.
    """
    family = getattr(root, "family", None)
    operation = getattr(family, "root_scatter", None)
    if operation is not None:
        return root, operation, features_argument(family.scatter)
    for candidate in root._children:
        if isinstance(candidate, ImageScatter):
            return candidate, candidate.scatter_operation, candidate.scatter_argument
    return None


__all__ = ["ImageScatter", "features_argument", "scatter_host"]
