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

Qwen2-VL, Qwen2.5-VL, Qwen3-VL and Qwen3.5 share this forward's shape and names.
Before transformers 5.1 the kernel is assigned twice, so nnsight numbers the
two calls ``attention_interface_2`` and ``_3``; they are served as ``_1`` and
``_2`` (`BEFORE_5_1`).
"""

from instrument import Rule, Variant

SITES = {
    "attention_interface": ("attention_interface_1", "attention_interface_2"),
    "torch.split": ("torch_split_0",),
    "torch.cat": ("torch_cat_0",),
}


BEFORE_5_1 = Variant(
    "<5.1",
    sites={**SITES, "attention_interface": ("attention_interface_2", "attention_interface_3")},
    serve_as={"attention_interface_2": "attention_interface_1", "attention_interface_3": "attention_interface_2"},
    note="the kernel is assigned twice before the calls, which nnsight numbers attention_interface_2 and _3",
)


def _attention(model_type: str, target: str) -> Rule:
    return Rule(
        f"{model_type}.vision-attention", target, SITES, (model_type,),
        "the per-image attention kernel calls and what surrounds them", variants=(BEFORE_5_1,),
    )


RULES = (
    _attention("qwen2_vl", "transformers.models.qwen2_vl.modeling_qwen2_vl:VisionAttention.forward"),
    _attention("qwen2_5_vl", "transformers.models.qwen2_5_vl.modeling_qwen2_5_vl:Qwen2_5_VLVisionAttention.forward"),
    _attention("qwen3_vl", "transformers.models.qwen3_vl.modeling_qwen3_vl:Qwen3VLVisionAttention.forward"),
    _attention("qwen3_5", "transformers.models.qwen3_5.modeling_qwen3_5:Qwen3_5VisionAttention.forward"),
)
