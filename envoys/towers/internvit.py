"""InternViT (InternVL's tower): CLS-first tiles, and blocks whose sublayers are scaled before they join the stream.

An InternViT block computes::

    h   = x + lambda_1 * attention(layernorm_before(x))
    out = h + lambda_2 * mlp(layernorm_after(h))

with ``lambda_1`` and ``lambda_2`` learned per-channel layer scales. So what the
attention adds to the stream is ``lambda_1 * attention(...)``, not the
attention module's output, and likewise for the MLP. Neither product is a
call: each is an assignment of the block's forward (``attention_output =
self.lambda_1 * attention_output``), which nnsight's ``.source`` labels
(``attention_output_0``; the MLP's is ``layer_output_3`` on 5.24). The block's
envoy (`LayerScaledLayer`) opens nnsight's ``.source`` on its module when it is
built, so its forward runs nnsight's instrumented body, and serves
``attention_output`` and ``mlp_output`` at those two bindings, found on the
forward's syntax tree (`scaled_binding`), so ``layer_input + attention_output +
mlp_output == layer_output`` holds exactly and a write there is what the
stream receives. The sublayers' own outputs, before the scales, stay at their
native paths (``layers[i].self_attn.output``, ``layers[i].mlp.output``); on the
sublayers' envoys ``attention_output`` and ``mlp_output`` are the block's,
after the scales (`LayerScaledAttention`, `LayerScaledMlp`), as on every block.
A block with stochastic depth (Qianfan-OCR's: ``drop_path1`` / ``drop_path2``,
identities in eval, scaling or dropping the whole sublayer in training) passes
each scaled output through its drop-path module before the addition, so there
the two values are those modules' outputs, and no ``.source`` is needed.

The tower (`InternVitVision`) runs on tiles: ``[tiles, 1 + patches,
vision_hidden_size]``, the CLS token first, then the tile's patches in raster
order. Its config spells ``image_size`` and ``patch_size`` as ``[height,
width]`` lists; the tower's sizes are their side, the tiles being square.
"""

from __future__ import annotations

from functools import cache, partial
from typing import Any

import torch

from ..core.bindings import SourcedBlock, bound_label
from ..core.layouts import Patches
from ..core.values import Unavailable, value
from ..image.grids import ImageInputs, TokenRun
from ..text.blocks import either
from ..vision.tower import Vision, VisionAttention, VisionLayer, VisionMlp, as_patches, from_patches, no_images
from .cohere import ShuffledTileGrids, unexpected

#: The layer scale of each sublayer, by the block value it gives.
SCALES = {"attention_output": "lambda_1", "mlp_output": "lambda_2"}
#: The stochastic-depth module a block that has them (Qianfan-OCR's) passes each scaled output through, by value.
DROP_PATHS = {"attention_output": "drop_path1", "mlp_output": "drop_path2"}


def _scaled_by(scale: str) -> Any:
    """``self.<scale> * anything``: a sublayer's output scaled before it joins the stream (a libcst matcher)."""
    from libcst import matchers as m

    return m.BinaryOperation(left=m.Attribute(value=m.Name("self"), attr=m.Name(scale)), operator=m.Multiply())


@cache
def scaled_binding(block_class: type, scale: str) -> str:
    """nnsight's label of the assignment in ``block_class.forward`` that binds ``self.<scale> * ...``
    (`envoys.core.bindings.bound_label`): `Unavailable` naming the class when the forward binds no such product, or
    more than one."""
    return bound_label(block_class, partial(_scaled_by, scale), f"self.{scale} * ...")


def _block(envoy: Any) -> Any:
    """The block ``envoy`` is, or the block whose sublayer it is."""
    return envoy if isinstance(envoy, LayerScaledLayer) else envoy.parent


def has_drop_paths(block: torch.nn.Module) -> bool:
    """Whether the block passes its scaled sublayer outputs through stochastic-depth modules (`DROP_PATHS`)."""
    return all(isinstance(getattr(block, name, None), torch.nn.Module) for name in DROP_PATHS.values())


def _at_binding(name: str) -> Any:
    """The location of block value ``name`` (what a sublayer adds): the output of its drop-path module where the block
    has them, else its scale's binding in the block's ``.source``."""

    def locate(envoy: Any) -> str:
        block = _block(envoy)
        if has_drop_paths(block._module):
            return f"{block.path}.{DROP_PATHS[name]}.output"
        return f"{block.path}.source.{scaled_binding(type(block._module), SCALES[name])}.output"

    return locate


def _no_binding(name: str) -> Any:
    """Why the block has no binding for ``name``, or None."""

    def reason(envoy: Any) -> str | None:
        if has_drop_paths(_block(envoy)._module):
            return None
        try:
            scaled_binding(type(_block(envoy)._module), SCALES[name])
        except Unavailable as error:
            return str(error)
        return None

    return reason


def scaled_value(name: str, what: str, gate: Any) -> Any:
    """``attention_output`` or ``mlp_output`` of a layer-scaled block: what the sublayer adds, after its scale."""
    scale = SCALES[name]
    return value(
        name, Patches, description=f"what the {what} adds to the stream (after {scale})", key=_at_binding(name), select=None,
        unavailable=either(gate, _no_binding(name)), view=as_patches, inverse=from_patches,
        doc=f"What the {what} adds to the stream, ``{Patches.shape()}``: its output times the layer scale ``{scale}`` "
            f"(the {what}'s own output, before the scale, is at its native path's ``output``).",
    )


class LayerScaledLayer(SourcedBlock, VisionLayer):
    """An InternViT block: ``layer_input + attention_output + mlp_output == layer_output``, ``[tiles, 1 + patches,
    vision_hidden_size]``, where ``attention_output`` and ``mlp_output`` are after the layer scales ``lambda_1`` and
    ``lambda_2``."""

    attention_output = scaled_value("attention_output", "attention", no_images)
    mlp_output = scaled_value("mlp_output", "MLP", no_images)

    def sourced(self) -> bool:
        """A block with drop-path modules needs no instrumented body: its values are those modules' outputs."""
        return not has_drop_paths(self._module)


class LayerScaledAttention(VisionAttention):
    """An InternViT block's attention: ``attention_output`` is its block's (after ``lambda_1``); the interior is
    `VisionAttention`'s."""

    attention_output = scaled_value("attention_output", "attention", no_images)


class LayerScaledMlp(VisionMlp):
    """An InternViT block's MLP: ``mlp_output`` is its block's (after ``lambda_2``)."""

    mlp_output = scaled_value("mlp_output", "MLP", no_images)


def square_side(sizes: Any, what: str) -> int:
    """The side of a square ``[height, width]`` (or an int): InternViT's config spells its sizes as lists."""
    if isinstance(sizes, int):
        return sizes
    height, width = sizes
    if height != width:
        raise Unavailable(f"the tower's {what} is {height}x{width}, not square, so it has no one side")
    return height


class InternVitVision(Vision):
    """InternViT at ``model.vision_tower``: each tile a row, ``[tiles, 1 + patches, vision_hidden_size]``, CLS first.

    ``patches`` is ``(image_size // patch_size) ** 2`` in raster order.
    ``tower_output`` is the tower's ``last_hidden_state``: after its
    ``layernorm``, which is an identity on a mean-pooling tower
    (``use_mean_pooling``, InternVL's), so there it is the last block's
    output. ``image_size`` and ``patch_size`` are the sides of the config's
    square ``[height, width]``.
    """

    @property
    def patch_size(self) -> int:
        """The side of a patch, in pixels (the vision config's ``patch_size``, ``[height, width]``)."""
        return square_side(self.vision_config.patch_size, "patch_size")

    @property
    def image_size(self) -> int:
        """The side of a tile, in pixels (the vision config's ``image_size``, ``[height, width]``)."""
        return square_side(self.vision_config.image_size, "image_size")


#: InternViT's native names under the standard ones, from the tower (``encoder.layer``, the patch convolution) down
#: to a block's parts.
INTERNVIT_RENAME = {
    "encoder.layer": "layers",
    "embeddings.patch_embeddings.projection": "patch_embed",
    "layernorm_before": "input_layernorm",
    "layernorm_after": "post_attention_layernorm",
    "attention": "self_attn",
    "attention.projection_layer": "attention.o_proj",
    "mlp.fc1": "mlp.up_proj",
    "mlp.fc2": "mlp.down_proj",
}



def internvit_envoys(tower: type, block: type, attention: type, mlp: type) -> dict[type, type]:
    """A family's ``ENVOYS`` for its InternViT classes: the tower, a block, its attention and its MLP."""
    return {tower: InternVitVision, block: LayerScaledLayer, attention: LayerScaledAttention, mlp: LayerScaledMlp}


def tower_norm(config: Any) -> dict[str, str]:
    """The tower's final ``layernorm`` is its ``norm`` where it is one (a tower without mean pooling); on a
    mean-pooling tower (InternVL's, Qianfan-OCR's) it is an identity, and the tower has no norm."""
    return {} if config.vision_config.use_mean_pooling else {"model.vision_tower.layernorm": "norm"}


class InternVitGrids(ShuffledTileGrids):
    """The grids of InternVL and Qianfan-OCR: GotOcr2's tiles (Aya Vision's canvas rule) of a CLS-first tower.

    The tower's rows of a tile are its CLS, then its patches in raster order;
    the host's pixel shuffle folds each ``1 / downsample_ratio`` square block
    of patches into one image token. The prompt writes each image as
    ``<img>``, every tile's image tokens in one run, ``</img>``: the run is cut
    into tiles of ``token_side ** 2`` tokens, the last being the thumbnail (or
    the image's one tile).
    """

    def patch_side(self, config: Any) -> int:
        vision = config.vision_config
        return square_side(vision.image_size, "image_size") // square_side(vision.patch_size, "patch_size")

    def rows_per_tile(self, config: Any) -> int:
        return self.patch_side(config) ** 2 + 1

    def rows_before_patches(self, config: Any) -> int:
        return 1

    def token_side(self, config: Any) -> int:
        return self.patch_side(config) // round(1 / config.downsample_ratio)

    def image_runs(self, inputs: ImageInputs) -> list[tuple[list[TokenRun], TokenRun]]:
        start = inputs.processor.start_image_token
        per_tile = self.token_side(inputs.config) ** 2
        images = []
        for run in inputs.token_runs():
            if inputs.token_before(run) != start or run.length % per_tile:
                raise unexpected(inputs, run, f"{start}, with a whole number of tiles of {per_tile} tokens")
            tiles = [TokenRun(run.batch, run.position + k, run.first + k, per_tile)
                     for k in range(0, run.length, per_tile)]
            images.append((tiles[:-1], tiles[-1]))
        return images
