"""Where image features enter the text stream: the ``inputs_embeds.masked_scatter`` call.

Each host's forward scatters the projected image features into the token
embeddings at the image tokens; the call's argument 1 is the features, what
the text model receives there (``vision.image_features``). Qwen-VL hosts
scatter video features with a second call (``_1``), exposed too and left
unused. LLaVA-NeXT's features at the scatter are not its projector's
output: the host unpads each image's tiles and adds ``image_newline`` rows
first. Idefics 3 scatters inside a helper, ``self.inputs_merger(input_ids=...,
inputs_embeds=..., image_hidden_states=...)``: the helper's call in the
host's forward is the site, its keyword ``image_hidden_states`` the features.
Gemma 4 has a third scatter, for audio (``_2``). SmolVLM scattered in a
helper, as Idefics 3 does, before transformers 5.21 (`SMOLVLM_BEFORE_5_21`).
Llama 4 and Nemotron-H Omni have no inner host: their roots scatter in their
own forwards (Nemotron-H Omni's video, ``_1``, and audio, ``_2``, too).
"""

from instrument import Rule, Variant

SCATTER = "inputs_embeds.masked_scatter"

#: SmolVLM before 5.21: ``self.inputs_merger(input_ids=..., inputs_embeds=..., image_hidden_states=...)``.
SMOLVLM_BEFORE_5_21 = Variant(
    "<5.21",
    sites={"self.inputs_merger": ("self_inputs_merger_0",)},
    note="the features are scattered by a helper, self.inputs_merger, keyword image_hidden_states",
)


def _host(model_type: str, target: str, labels: tuple[str, ...], purpose: str, callee: str = SCATTER, variants: tuple = ()) -> Rule:
    return Rule(f"{model_type}.image-scatter", target, {callee: labels}, (model_type,), purpose, variants=variants)


IMAGE_ONLY = ("inputs_embeds_masked_scatter_0",)
IMAGE_AND_VIDEO = ("inputs_embeds_masked_scatter_0", "inputs_embeds_masked_scatter_1")
IMAGE_VIDEO_AND_AUDIO = (*IMAGE_AND_VIDEO, "inputs_embeds_masked_scatter_2")

RULES = (
    _host("llava", "transformers.models.llava.modeling_llava:LlavaModel.forward", IMAGE_ONLY, "image features scattered into the embeddings"),
    _host(
        "llava_next",
        "transformers.models.llava_next.modeling_llava_next:LlavaNextModel.forward",
        IMAGE_ONLY,
        "image features scattered into the embeddings, after the host unpads the tiles and adds image_newline rows",
    ),
    _host(
        "qwen2_vl",
        "transformers.models.qwen2_vl.modeling_qwen2_vl:Qwen2VLModel.forward",
        IMAGE_AND_VIDEO,
        "image (_0) and video (_1) features scattered into the embeddings",
    ),
    _host(
        "qwen2_5_vl",
        "transformers.models.qwen2_5_vl.modeling_qwen2_5_vl:Qwen2_5_VLModel.forward",
        IMAGE_AND_VIDEO,
        "image (_0) and video (_1) features scattered into the embeddings",
    ),
    _host(
        "qwen3_vl",
        "transformers.models.qwen3_vl.modeling_qwen3_vl:Qwen3VLModel.forward",
        IMAGE_AND_VIDEO,
        "image (_0) and video (_1) features scattered into the embeddings",
    ),
    _host(
        "qwen3_5",
        "transformers.models.qwen3_5.modeling_qwen3_5:Qwen3_5Model.forward",
        IMAGE_AND_VIDEO,
        "image (_0) and video (_1) features scattered into the embeddings",
    ),
    _host(
        "mistral3", "transformers.models.mistral3.modeling_mistral3:Mistral3Model.forward", IMAGE_ONLY, "image features scattered into the embeddings"
    ),
    _host(
        "gemma3",
        "transformers.models.gemma3.modeling_gemma3:Gemma3Model.forward",
        IMAGE_ONLY,
        "pooled image features, [images, tokens, hidden], scattered into the scaled embeddings",
    ),
    _host(
        "idefics3",
        "transformers.models.idefics3.modeling_idefics3:Idefics3Model.forward",
        ("self_inputs_merger_0",),
        "the helper that scatters the image features into the embeddings",
        callee="self.inputs_merger",
    ),
    _host(
        "smolvlm",
        "transformers.models.smolvlm.modeling_smolvlm:SmolVLMModel.forward",
        IMAGE_ONLY,
        "image features scattered into the embeddings",
        variants=(SMOLVLM_BEFORE_5_21,),
    ),
    _host(
        "gemma4",
        "transformers.models.gemma4.modeling_gemma4:Gemma4Model.forward",
        IMAGE_VIDEO_AND_AUDIO,
        "image (_0), video (_1) and audio (_2) features scattered into the embeddings",
    ),
    _host(
        "llama4",
        "transformers.models.llama4.modeling_llama4:Llama4ForConditionalGeneration.forward",
        IMAGE_ONLY,
        "the root scatters the image features in its own forward",
    ),
    _host(
        "nemotron_h_omni",
        "transformers.models.nemotron_h_omni.modeling_nemotron_h_omni:NemotronH_Omni_Reasoning_V3.forward",
        IMAGE_VIDEO_AND_AUDIO,
        "the root scatters image (_0), video (_1) and audio (_2) features in its own forward",
    ),
)
