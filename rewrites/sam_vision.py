"""A SAM-style vision encoder: its attention's softmax and its blocks' return from attention windows.

Found from the forwards' shapes (`TEMPLATES`, through `rewrites.found`): an
attention forward that projects with one fused ``self.qkv``, adds decomposed
relative positions (``self.get_decomposed_rel_pos``) and computes its softmax
inline; a block forward that calls ``self.window_partition`` and
``self.window_unpartition`` once each. GOT-OCR 2.0's encoder (which
PP-Chart2Table runs) and transformers' SAM (DeepSeek-VL-Hybrid's high-res
tower) have both, generated from one modular source.

``GotOcr2VisionAttention.forward`` (``SamVisionAttention.forward``) computes
its kernel inline, not through transformers' shared attention interface: the
scores (``attn_weights``, with the decomposed relative position terms added)
go through ``torch.nn.functional.softmax(attn_weights, dtype=torch.float32,
dim=-1)`` (`SOFTMAX_SITE`): argument 0 is the scores, the output the
probabilities, both ``[windows * heads, patches, patches]`` (a window being
the whole image on a global block). The queries, keys and values are the
``qkv`` linear's output, and the head outputs what ``proj`` receives: module
values, no site needed. SAM's ``SamVisionSdpaAttention`` (its SDPA variant)
has a forward of its own with no softmax, and no rule.

``GotOcr2VisionLayer.forward`` (``SamVisionLayer.forward``) cuts the normed
stream into windows (``self.window_partition``, padding the grid to a
multiple of the window) on its windowed blocks, runs the attention on them
and puts the result back on the image's grid with
``self.window_unpartition(...)`` (`UNPARTITION_SITE`), which also crops the
padding: its output, ``[images, height, width, width]``, is what the block
adds to its stream. A global block makes neither call.
"""

from .found import Template

#: The attention's softmax: argument 0 the scores, the output the probabilities.
SOFTMAX_SITE = "torch_nn_functional_softmax_0"
#: A windowed block's return from windows: its output is what the attention adds to the stream.
UNPARTITION_SITE = "self_window_unpartition_0"

TEMPLATES = (
    Template(
        "vision-attention",
        {"torch.nn.functional.softmax": (SOFTMAX_SITE,)},
        "the inline kernel's softmax: the scores in, the probabilities out",
        shape={"self.qkv": 1, "self.get_decomposed_rel_pos": 1},
    ),
    Template(
        "vision-windows",
        {"self.window_unpartition": (UNPARTITION_SITE,)},
        "a windowed block's attention output put back on the image's grid, padding cropped",
        shape={"self.window_partition": 1},
    ),
)
