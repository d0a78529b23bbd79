"""DeepStack (Qwen3-VL, Granite-Docling): the text model adds a tapped tower block's merged features after its
first blocks.

``self._deepstack_process(hidden_states, visual_pos_masks, visual_embeds)``
runs inside the text model's layer loop, once per tap, on the prompt pass
only: occurrence k follows block k, and its argument 2 is the feature added at
the image positions, ``[image_tokens, hidden]``.
"""

from instrument import Rule

#: The text model's call adding block k's DeepStack feature (occurrence k): argument 2 is the feature.
DEEPSTACK_SITE = "self__deepstack_process_0"

RULES = (
    Rule(
        "qwen3_vl.deepstack",
        "transformers.models.qwen3_vl.modeling_qwen3_vl:Qwen3VLTextModel.forward",
        {"self._deepstack_process": (DEEPSTACK_SITE,)},
        "the DeepStack feature added after each of the first text blocks",
    ),
    Rule(
        "granite_docling.deepstack",
        "transformers.models.granite_docling.modeling_granite_docling:GraniteDoclingTextModel.forward",
        {"self._deepstack_process": (DEEPSTACK_SITE,)},
        "the DeepStack feature added after each of the first text blocks",
    ),
)
