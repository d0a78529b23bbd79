"""The SAM-style vision encoder of GOT-OCR 2.0 (and PP-Chart2Table, which runs its classes) and transformers' SAM
(DeepSeek-VL-Hybrid's high-res tower): its attention's softmax and its blocks' return from attention windows.

The two class families are generated from one modular source: their
attention and block forwards are the same text, so each rule below names
both targets and finds the same sites in each.

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

from instrument import Rule

#: The attention's softmax: argument 0 the scores, the output the probabilities.
SOFTMAX_SITE = "torch_nn_functional_softmax_0"
#: A windowed block's return from windows: its output is what the attention adds to the stream.
UNPARTITION_SITE = "self_window_unpartition_0"

#: The modules defining the two class families' forwards, and their classes' prefixes.
FAMILIES = (
    ("got_ocr2", "transformers.models.got_ocr2.modeling_got_ocr2", "GotOcr2"),
    ("sam", "transformers.models.sam.modeling_sam", "Sam"),
)

RULES = tuple(
    rule
    for name, module, prefix in FAMILIES
    for rule in (
        Rule(
            f"{name}.vision-attention",
            f"{module}:{prefix}VisionAttention.forward",
            {"torch.nn.functional.softmax": (SOFTMAX_SITE,)},
            "the inline kernel's softmax: the scores in, the probabilities out",
        ),
        Rule(
            f"{name}.vision-windows",
            f"{module}:{prefix}VisionLayer.forward",
            {"self.window_unpartition": (UNPARTITION_SITE,)},
            "a windowed block's attention output put back on the image's grid, padding cropped",
        ),
    )
)
