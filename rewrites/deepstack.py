"""DeepStack: the text model adds a tapped tower block's merged features after its first blocks.

Found from the forward's shape (`TEMPLATES`, through `rewrites.found`): a text
model whose forward calls ``self._deepstack_process(hidden_states,
visual_pos_masks, visual_embeds)`` once, inside its layer loop. It runs once
per tap, on the prompt pass only: occurrence k follows block k, and its
argument 2 is the feature added at the image positions, ``[image_tokens,
hidden]``. Qwen3-VL's text model reads so, and the text models that copy its
loop (over dense or mixture-of-experts blocks).
"""

from .found import Template

#: The text model's call adding block k's DeepStack feature (occurrence k): argument 2 is the feature.
DEEPSTACK_SITE = "self__deepstack_process_0"

DEEPSTACK = Template(
    "deepstack", {"self._deepstack_process": (DEEPSTACK_SITE,)},
    "the DeepStack feature added after each of the first text blocks",
)

TEMPLATES = (DEEPSTACK,)
