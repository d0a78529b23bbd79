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


def _deepstack(model_type: str, target: str) -> Rule:
    return Rule(
        f"{model_type}.deepstack", target, {"self._deepstack_process": (DEEPSTACK_SITE,)},
        "the DeepStack feature added after each of the first text blocks",
    )


#: Qwen3-VL's text model, Qwen3-VL-MoE's and Qwen3-Omni-MoE's thinker's copies of it (the same loop over
#: mixture-of-experts blocks), Granite-Docling's and Cohere Compass's text models.
RULES = (
    _deepstack("qwen3_vl", "transformers.models.qwen3_vl.modeling_qwen3_vl:Qwen3VLTextModel.forward"),
    _deepstack("qwen3_vl_moe", "transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe:Qwen3VLMoeTextModel.forward"),
    _deepstack(
        "granite_docling",
        "transformers.models.granite_docling.modeling_granite_docling:GraniteDoclingTextModel.forward",
    ),
    _deepstack("cohere_compass", "transformers.models.cohere_compass.modeling_cohere_compass:CohereCompassTextModel.forward"),
    _deepstack(
        "qwen3_omni_moe",
        "transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe:Qwen3OmniMoeThinkerTextModel.forward",
    ),
)
