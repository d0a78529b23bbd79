"""DeepSeek-VL-Hybrid (model_type deepseek_vl_hybrid): DeepSeek-VL's SigLIP low-res tower plus a SAM high-res tower.

What differs from DeepSeek-VL (`deepseek_vl`): ``get_image_features`` runs
two towers on each image and the aligner reads both. The SigLIP tower
(``model.vision_model``, on ``pixel_values``) is ``model.vision``, as on
DeepSeek-VL: its ``tower_output`` (after ``post_layernorm``) is the aligner's
first argument, ``projector.input``, ``[images, patches, vision_hidden_size]``.
The SAM tower (``model.high_res_vision_model``, on ``high_res_pixel_values``,
`envoys.towers.sam`, `envoys.towers.sam.SamSecondTower`) is ``model.high_res_vision``, its
blocks ``high_res_vision.layers[i]`` with the stream values of a pre-norm block on
its patch grid, flattened in raster order. The host
(``get_high_res_image_features``) takes the tower's neck output and the
output of its first global block (``global_attn_indexes[0]``, through the
tower's ``hidden_states``), passes that one through a neck of its own
(``model.high_res_vision_neck``), brings each to the SigLIP grid with
``model.high_res_vision_proj`` (a bilinear resize to four times the SigLIP
grid's side, then two stride-2 convolutions), adds the second times
``model.high_res_vision_alpha`` to the first, and flattens the sum to
``[images, patches, 4 * output_channels]``: the aligner's second argument
(``projector.inputs[0][1]``). The aligner projects each argument to half the
text width, joins them (high-res first), and maps them to the text width;
``image_features`` is its output flattened, scattered as on DeepSeek-VL
(``inputs_embeds_masked_scatter_0``, argument 1). Both reach the scatter
through the aligner; ``model.vision`` is the SigLIP tower, whose patches are
the image tokens one for one, as on DeepSeek-VL. The SigLIP tower runs
first (``get_low_res_image_features``, then ``get_high_res_image_features``),
so reads of ``model.vision`` come before those of ``model.high_res_vision``,
and both before the projector's. The SAM tower's envoys are GOT-OCR 2.0's
(transformers generates both class families from one source): its blocks'
attention interior is served at the attention's modules and its softmax, and
a windowed block's ``attention_output`` at its return from windows
(`rewrites.sam_vision`), under eager attention; under SDPA SAM's attention
has no softmax, so its scores and probabilities are unavailable. The image processor
makes both pixel tensors from each image: the longer side resized to SAM's
``image_size`` and padded to a square, and that square resized to SigLIP's.
``model.support()`` lists ``model.vision``'s values; ``model.high_res_vision.support()``
lists the SAM tower's.
"""

from __future__ import annotations

from ..towers.sam import SAM_ENVOYS, SAM_RENAME
from . import Family
from .deepseek_vl import ENVOYS as DEEPSEEK_ENVOYS
from .deepseek_vl import RENAME as DEEPSEEK_RENAME
from .deepseek_vl import DeepseekGrids

RENAME = {**DEEPSEEK_RENAME, "model.high_res_vision_model": "high_res_vision", **SAM_RENAME}

ENVOYS = {**DEEPSEEK_ENVOYS, **SAM_ENVOYS}

#: ``model.vision``'s grids are DeepSeek-VL's (the SAM tower's values are on its own grid already).
FAMILY = Family("deepseek_vl_hybrid", RENAME, ENVOYS, "model.language_model.layers", grid_layout=DeepseekGrids())
