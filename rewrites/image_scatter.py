"""Where image features enter the text stream: the ``inputs_embeds.masked_scatter`` call.

Each host's forward scatters the projected image features into the token
embeddings at the image tokens; the call's argument 1 is the features, what
the text model receives there (``vision.image_features``). Qwen-VL hosts
scatter video features with a second call (``_1``), exposed too and left
unused; Gemma 4 has a third, for audio (``_2``). Llama 4 has no inner host:
its root scatters in its own forward.
"""

from instrument import Rule

SCATTER = "inputs_embeds.masked_scatter"


def _host(model_type: str, target: str, labels: tuple[str, ...], purpose: str) -> Rule:
    return Rule(f"{model_type}.image-scatter", target, {SCATTER: labels}, (model_type,), purpose)


IMAGE_ONLY = ("inputs_embeds_masked_scatter_0",)
IMAGE_AND_VIDEO = ("inputs_embeds_masked_scatter_0", "inputs_embeds_masked_scatter_1")
IMAGE_VIDEO_AND_AUDIO = (*IMAGE_AND_VIDEO, "inputs_embeds_masked_scatter_2")

RULES = (
    _host("llava", "transformers.models.llava.modeling_llava:LlavaModel.forward", IMAGE_ONLY, "image features scattered into the embeddings"),
    _host("qwen2_vl", "transformers.models.qwen2_vl.modeling_qwen2_vl:Qwen2VLModel.forward", IMAGE_AND_VIDEO, "image (_0) and video (_1) features scattered into the embeddings"),
    _host("qwen2_5_vl", "transformers.models.qwen2_5_vl.modeling_qwen2_5_vl:Qwen2_5_VLModel.forward", IMAGE_AND_VIDEO, "image (_0) and video (_1) features scattered into the embeddings"),
    _host("qwen3_vl", "transformers.models.qwen3_vl.modeling_qwen3_vl:Qwen3VLModel.forward", IMAGE_AND_VIDEO, "image (_0) and video (_1) features scattered into the embeddings"),
    _host("qwen3_5", "transformers.models.qwen3_5.modeling_qwen3_5:Qwen3_5Model.forward", IMAGE_AND_VIDEO, "image (_0) and video (_1) features scattered into the embeddings"),
    _host("gemma4", "transformers.models.gemma4.modeling_gemma4:Gemma4Model.forward", IMAGE_VIDEO_AND_AUDIO, "image (_0), video (_1) and audio (_2) features scattered into the embeddings"),
    _host("llama4", "transformers.models.llama4.modeling_llama4:Llama4ForConditionalGeneration.forward", IMAGE_ONLY, "the root scatters the image features in its own forward"),
)
