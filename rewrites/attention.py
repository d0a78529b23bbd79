"""The attention interior: the kernel call in an attention forward, and the softmax inside eager attention.

Every transformers attention forward on the shared attention interface binds
the kernel (``attention_interface_0``, an annotated assignment) and calls it
once (``attention_interface_1``) with ``(self, queries, keys, values,
attention_mask, ...)``, returning ``(head outputs [batch, query, heads,
head_dim], weights)``. When the kernel is the module's own
``eager_attention_forward``, the call drills into its rewritten form, whose
``nn.functional.softmax`` call (``nn_functional_softmax_0``) takes the scores
and returns the probabilities, ``[batch, heads, query, key]``, before they
multiply the values. A class whose eager kernel is another function of its
modeling module (Llama 4's tower: ``vision_eager_attention_forward``) drills
into that one instead (`OTHER_EAGER_KERNELS`).

Before transformers 5.1 (4.57 included) the forward assigns the kernel twice
(``attention_interface_0`` annotated, ``attention_interface_1`` from
``ALL_ATTENTION_FUNCTIONS``), so nnsight numbers the call
``attention_interface_2``; it is served as ``attention_interface_1``
(`BEFORE_5_1`). Gemma 4's text attention did so until 5.7
(`ASSIGNED_TWICE_LATER`).
"""

from instrument import Rule, Variant

KERNEL = {"attention_interface": ("attention_interface_1",)}


def kernel_assigned_twice(versions: str) -> Variant:
    """On ``versions`` the forward assigns the kernel once more before calling it: the call is numbered one higher."""
    return Variant(
        versions,
        sites={"attention_interface": ("attention_interface_2",)},
        serve_as={"attention_interface_2": "attention_interface_1"},
        note="the kernel is assigned twice before the call, which nnsight numbers attention_interface_2",
    )


BEFORE_5_1 = kernel_assigned_twice("<5.1")

#: Classes that kept the double assignment longer than the rest: class -> the releases where they have it.
#: Gemma 4 came in 5.5 with it; its text attention lost it in 5.7.
ASSIGNED_TWICE_LATER = {"Gemma4TextAttention": kernel_assigned_twice("<5.7")}
SOFTMAX = {"nn.functional.softmax": ("nn_functional_softmax_0",)}

#: model_type -> (the attention classes in its modeling module, the model_types whose models hold them)
ATTENTION_CLASSES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "llama": (("LlamaAttention",), ("llama", "llava", "idefics3", "smolvlm")),
    "mistral": (("MistralAttention",), ("mistral", "llava", "mistral3", "llava_next")),
    "qwen2": (("Qwen2Attention",), ("qwen2", "llava")),
    "siglip": (("SiglipAttention",), ("siglip", "llava", "gemma3")),
    "clip": (("CLIPAttention",), ("clip", "llava", "llava_next")),
    "pixtral": (("PixtralAttention",), ("pixtral", "mistral3", "llava")),
    "qwen2_vl": (("Qwen2VLAttention",), ("qwen2_vl",)),
    "qwen2_5_vl": (("Qwen2_5_VLAttention",), ("qwen2_5_vl",)),
    "qwen3_vl": (("Qwen3VLTextAttention",), ("qwen3_vl",)),
    "qwen3_5": (("Qwen3_5Attention",), ("qwen3_5",)),
    "gemma3": (("Gemma3Attention",), ("gemma3",)),
    "idefics3": (("Idefics3VisionAttention",), ("idefics3",)),
    "smolvlm": (("SmolVLMVisionAttention",), ("smolvlm",)),
    "llama4": (("Llama4TextAttention",), ("llama4",)),
    "nemotron_h": (("NemotronHAttention",), ("nemotron_h", "nemotron_h_omni")),
    "gemma4": (("Gemma4TextAttention", "Gemma4VisionAttention"), ("gemma4",)),
}

#: Attention classes whose eager kernel is another function of their modeling module than
#: ``eager_attention_forward``: model_type -> {kernel function: (its classes, their users)}.
#: Llama 4's tower defaults to ``vision_eager_attention_forward`` (scaled by head_dim ** -0.5 itself).
OTHER_EAGER_KERNELS: dict[str, dict[str, tuple[tuple[str, ...], tuple[str, ...]]]] = {
    "llama4": {"vision_eager_attention_forward": (("Llama4VisionAttention",), ("llama4",))},
}


def _module(model_type: str) -> str:
    return f"transformers.models.{model_type}.modeling_{model_type}"


def _kernel_rules(
    model_type: str, kernel: str, classes: tuple[str, ...], users: tuple[str, ...], name: str
) -> list[Rule]:
    """The eager kernel ``kernel``'s softmax rule (called ``name``), and a kernel-call rule per class drilling into it."""
    eager = Rule(
        name,
        f"{_module(model_type)}:{kernel}",
        SOFTMAX,
        users,
        "the softmax of eager attention: scores in, probabilities out",
    )
    return [eager] + [
        Rule(
            f"{model_type}.{owner}",
            f"{_module(model_type)}:{owner}.forward",
            KERNEL,
            users,
            "the attention kernel call: queries, keys, values in, head outputs out",
            drill={"attention_interface_1": eager},
            variants=(ASSIGNED_TWICE_LATER.get(owner, BEFORE_5_1),),
        )
        for owner in classes
    ]


def _rules() -> tuple[Rule, ...]:
    rules: list[Rule] = []
    for model_type, (classes, users) in ATTENTION_CLASSES.items():
        rules += _kernel_rules(model_type, "eager_attention_forward", classes, users, f"{model_type}.eager-attention")
    for model_type, kernels in OTHER_EAGER_KERNELS.items():
        for kernel, (classes, users) in kernels.items():
            name = f"{model_type}.{kernel.removesuffix('_forward').replace('_', '-')}"
            rules += _kernel_rules(model_type, kernel, classes, users, name)
    return tuple(rules)


RULES = _rules()
