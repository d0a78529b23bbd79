"""A vision side with no tower blocks: ``model.vision`` is an embedder that maps each patch straight to its features.

Some checkpoints have no tower of blocks at all (Gemma 4 Unified's vision
embedder: layer norms, a linear map and a position embedding per patch, no
attention, no MLP). Their ``model.vision`` is that embedder, so the values
it has (the mask, ``image_features``, the patch embeddings, ``tower_output``,
the projector's) keep the standard names, and the values of a tower block
have nothing to be read at: ``vision.layers`` is empty, ``vision.layers[i]``
raises `Unavailable` saying there are no blocks, ``num_layers`` is 0, the
block sizes (heads, head width, MLP width) are `Unavailable`, and
``support()`` lists every block value with that reason.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..core.values import Unavailable, standard_values
from ..vision.tower import Vision, VisionAttention, VisionLayer, VisionMlp, no_images

#: A tower block's values as ``support()`` names them (the block's, its attention's, its MLP's).
BLOCK_VALUES = (
    *standard_values(VisionLayer),
    *(f"self_attn.{name}" for name in standard_values(VisionAttention)),
    *(f"mlp.{name}" for name in standard_values(VisionMlp)),
)


def no_blocks(vision: Any) -> str:
    """Why a block value of the blockless ``vision`` is unavailable: no image reaches it, or there are no blocks."""
    return no_images(vision) or (
        f"{type(vision._module).__name__} has no blocks (vision.num_layers is 0): {vision.no_blocks_because}"
    )


class NoBlocks:
    """``vision.layers`` on a tower with no blocks: empty, and any block of it `Unavailable` with the reason."""

    def __init__(self, vision: Any) -> None:
        self._vision = vision

    def __len__(self) -> int:
        return 0

    def __iter__(self) -> Iterator[Any]:
        return iter(())

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return []
        raise Unavailable(f"vision.layers[{index}] is unavailable: {no_blocks(self._vision)}")

    def __repr__(self) -> str:
        return f"vision.layers: none ({no_blocks(self._vision)})"


class BlocklessVision(Vision):
    """``model.vision`` on a checkpoint with no tower blocks: the embedder's values, and every block value
    `Unavailable` saying there are none. A subclass says what the embedder does instead (`no_blocks_because`)."""

    #: What the embedder does in place of blocks, for the reason every block value gives.
    no_blocks_because = "the patches go straight from the embedder to the projector"

    @property
    def layers(self) -> NoBlocks:
        """No blocks: empty; ``layers[i]`` raises `Unavailable` saying why."""
        return NoBlocks(self)

    @property
    def num_layers(self) -> int:
        return 0

    def _no_block_size(self, size: str) -> int:
        raise Unavailable(f"vision.{size} is unavailable: {no_blocks(self)}")

    num_heads = property(lambda self: self._no_block_size("num_heads"), doc="Unavailable: no blocks, no attention.")
    head_dim = property(lambda self: self._no_block_size("head_dim"), doc="Unavailable: no blocks, no attention.")
    intermediate_size = property(lambda self: self._no_block_size("intermediate_size"),
                                 doc="Unavailable: no blocks, no MLP.")

    def support(self, layer: int | None = None) -> dict[str, Any]:
        """The embedder's values, then every block value with the reason there is none (with ``layer``, those alone)."""
        if no_images(self) is not None:
            return {}
        blocks = dict.fromkeys(BLOCK_VALUES, no_blocks(self))
        if layer is not None:
            return blocks
        return {**self.own_support(), **blocks}
