"""The Qwen ViT attention: one attention-kernel call per image (per window on Qwen2.5-VL's windowed blocks).

Sites, as nnsight names them (the kernel's annotated assignment is
``attention_interface_0``):

- ``attention_interface_1``: the flash-attention call, once, over every image;
- ``torch_split_0``: splits queries, keys and values at ``cu_seqlens``, fired
  three times (occurrence 0 queries, 1 keys, 2 values); its argument 0 is the
  whole tensor, ``[1, heads, patches, head_dim]``, queries and keys after the
  2D rotary embedding;
- ``attention_interface_2``: the kernel call per image (or window), once each;
- ``torch_cat_0``: joins the per-image outputs back, ``[1, patches, heads, head_dim]``.

Qwen2-VL, Qwen2.5-VL, Qwen3-VL and Qwen3.5 (and their MoE siblings' copies) share this forward's shape and names,
and so do the GLM ViTs (GLM-4.1V's, which GLM-4.6V and GLM-GA run too, GLM-4.5V's copy of it (glm4v_moe), and
GLM-OCR's, whose forward adds q/k norms before the rotary embedding), the packed SigLIP-shaped towers of PaddleOCR-VL
and VideoLLaMA 3, EXAONE 4.5's Qwen2.5-VL tower (its per-image calls inside a list comprehension, as LLaVA-OneVision
1.5's RICE ViT, whose every frame starts with a CLS row), Cohere Compass's
and Muse Glimmer's towers, Ovis2.5's packed SigLIP2-NaViT, Kimi K2.5's MoonViT and HunYuanVL's tower,
and MiniCPM-V's SigLIP-NaViT
attention (4.6's, 4.7's and MiniCPM-OCR's copies), whose queries and keys have no rotary embedding; so do
the Qwen omni thinkers' ViTs (Qwen2.5-Omni's, Qwen2.5-VL's copy, and Qwen3-Omni-MoE's, Qwen3-VL's) and their
Whisper-like audio attention (``audio-attention``: one kernel call per chunk of the packed clips, at ``cu_seqlens``,
no rotary embedding), whose calls the shared attention rule would not find once.
Before transformers 5.1 the kernel is assigned twice, so nnsight numbers the
two calls ``attention_interface_2`` and ``_3``; they are served as ``_1`` and
``_2`` (`BEFORE_5_1`).
"""

from instrument import Rule, Variant

FLASH_SITE = "attention_interface_1"  #: flash attention: one call over every image
PER_IMAGE_SITE = "attention_interface_2"  #: the kernel call per image (or window)
SPLIT_SITE = "torch_split_0"  #: queries (occurrence 0), keys (1), values (2), split at cu_seqlens
JOIN_SITE = "torch_cat_0"  #: the per-image outputs joined back

SITES = {
    "attention_interface": (FLASH_SITE, PER_IMAGE_SITE),
    "torch.split": (SPLIT_SITE,),
    "torch.cat": (JOIN_SITE,),
}


BEFORE_5_1 = Variant(
    "<5.1",
    sites={**SITES, "attention_interface": ("attention_interface_2", "attention_interface_3")},
    serve_as={"attention_interface_2": FLASH_SITE, "attention_interface_3": PER_IMAGE_SITE},
    note="the kernel is assigned twice before the calls, which nnsight numbers attention_interface_2 and _3",
)


def _attention(model_type: str, target: str) -> Rule:
    return Rule(
        f"{model_type}.vision-attention", target, SITES,
        "the per-image attention kernel calls and what surrounds them", variants=(BEFORE_5_1,),
    )


def _audio_attention(model_type: str, target: str) -> Rule:
    """The Qwen omni thinkers' Whisper-like audio attention: the same forward over a clip's packed chunks."""
    return Rule(
        f"{model_type}.audio-attention", target, SITES,
        "the per-chunk attention kernel calls of the audio tower and what surrounds them", variants=(BEFORE_5_1,),
    )


RULES = (
    _attention("qwen2_vl", "transformers.models.qwen2_vl.modeling_qwen2_vl:VisionAttention.forward"),
    _attention("qwen2_5_vl", "transformers.models.qwen2_5_vl.modeling_qwen2_5_vl:Qwen2_5_VLVisionAttention.forward"),
    _attention("qwen3_vl", "transformers.models.qwen3_vl.modeling_qwen3_vl:Qwen3VLVisionAttention.forward"),
    _attention(
        "qwen3_vl_moe", "transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe:Qwen3VLMoeVisionAttention.forward"
    ),
    _attention("qwen3_5", "transformers.models.qwen3_5.modeling_qwen3_5:Qwen3_5VisionAttention.forward"),
    _attention(
        "qwen3_5_moe", "transformers.models.qwen3_5_moe.modeling_qwen3_5_moe:Qwen3_5MoeVisionAttention.forward"
    ),
    _attention("glm4v", "transformers.models.glm4v.modeling_glm4v:Glm4vVisionAttention.forward"),
    _attention("glm4v_moe", "transformers.models.glm4v_moe.modeling_glm4v_moe:Glm4vMoeVisionAttention.forward"),
    _attention("glm_ocr", "transformers.models.glm_ocr.modeling_glm_ocr:GlmOcrVisionAttention.forward"),
    _attention("paddleocr_vl", "transformers.models.paddleocr_vl.modeling_paddleocr_vl:PaddleOCRVisionAttention.forward"),
    _attention(
        "video_llama_3", "transformers.models.video_llama_3.modeling_video_llama_3:VideoLlama3VisionAttention.forward"
    ),
    _attention("exaone4_5", "transformers.models.exaone4_5.modeling_exaone4_5:Exaone4_5_VisionAttention.forward"),
    _attention(
        "llava_onevision1_5",
        "transformers.models.llava_onevision1_5.modeling_llava_onevision1_5:LlavaOnevision15VisionAttention.forward",
    ),
    _attention("cohere_compass", "transformers.models.cohere_compass.modeling_cohere_compass:CohereCompassVisionAttention.forward"),
    _attention("muse_glimmer", "transformers.models.muse_glimmer.modeling_muse_glimmer:MuseGlimmerVisionAttention.forward"),
    _attention("ovis2_5", "transformers.models.ovis2_5.modeling_ovis2_5:Ovis2_5VisionAttention.forward"),
    _attention("kimi_k25", "transformers.models.kimi_k25.modeling_kimi_k25:Kimi_K25VisionAttention.forward"),
    _attention("hunyuan_vl", "transformers.models.hunyuan_vl.modeling_hunyuan_vl:HunYuanVLVisionAttention.forward"),
    _attention("minicpmv4_6", "transformers.models.minicpmv4_6.modeling_minicpmv4_6:MiniCPMV4_6VisionAttention.forward"),
    _attention("minicpmv4_7", "transformers.models.minicpmv4_7.modeling_minicpmv4_7:MiniCPMV4_7VisionAttention.forward"),
    _attention("minicpm_ocr", "transformers.models.minicpm_ocr.modeling_minicpm_ocr:MiniCPMOcrVisionAttention.forward"),
    _attention("dots3_note", "transformers.models.dots3_note.modeling_dots3_note:Dots3NoteVisionAttention.forward"),
    _attention("lfm3_vl", "transformers.models.lfm3_vl.modeling_lfm3_vl:Lfm3VlVisionAttention.forward"),
    _attention("ernie4_5_vl_moe", "transformers.models.ernie4_5_vl_moe.modeling_ernie4_5_vl_moe:Ernie4_5_VLMoeVisionAttention.forward"),
    _attention("qwen2_5_omni", "transformers.models.qwen2_5_omni.modeling_qwen2_5_omni:Qwen2_5OmniVisionAttention.forward"),
    _attention(
        "qwen3_omni_moe", "transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe:Qwen3OmniMoeVisionAttention.forward"
    ),
    _audio_attention(
        "qwen2_5_omni", "transformers.models.qwen2_5_omni.modeling_qwen2_5_omni:Qwen2_5OmniAudioAttention.forward"
    ),
    _audio_attention(
        "qwen3_omni_moe", "transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe:Qwen3OmniMoeAudioAttention.forward"
    ),
)
