"""The attention interior: the kernel call in an attention forward, and the softmax inside eager attention.

Every transformers attention forward on the shared attention interface binds
the kernel (``attention_interface_0``, an annotated assignment) and calls it
once (``attention_interface_1``) with ``(self, queries, keys, values,
attention_mask, ...)``, returning ``(head outputs [batch, query, heads,
head_dim], weights)``. When the kernel is the module's own
``eager_attention_forward``, the call drills into its rewritten form, whose
``nn.functional.softmax`` call (``nn_functional_softmax_0``) takes the scores
and returns the probabilities, ``[batch, heads, query, key]``, before they
multiply the values.
"""

from instrument import Rule

KERNEL = {"attention_interface": ("attention_interface_1",)}
SOFTMAX = {"nn.functional.softmax": ("nn_functional_softmax_0",)}

#: model_type -> (the attention classes in its modeling module, the model_types whose models hold them)
ATTENTION_CLASSES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "llama": (("LlamaAttention",), ("llama", "llava")),
    "mistral": (("MistralAttention",), ("mistral", "llava")),
    "qwen2": (("Qwen2Attention",), ("qwen2", "llava")),
    "siglip": (("SiglipAttention",), ("siglip", "llava")),
    "clip": (("CLIPAttention",), ("clip", "llava")),
    "qwen2_vl": (("Qwen2VLAttention",), ("qwen2_vl",)),
    "qwen2_5_vl": (("Qwen2_5_VLAttention",), ("qwen2_5_vl",)),
    "qwen3_vl": (("Qwen3VLTextAttention",), ("qwen3_vl",)),
    "qwen3_5": (("Qwen3_5Attention",), ("qwen3_5",)),
    "gemma4": (("Gemma4TextAttention", "Gemma4VisionAttention"), ("gemma4",)),
}


def _module(model_type: str) -> str:
    return f"transformers.models.{model_type}.modeling_{model_type}"


def _rules() -> tuple[Rule, ...]:
    rules: list[Rule] = []
    for model_type, (classes, users) in ATTENTION_CLASSES.items():
        eager = Rule(
            f"{model_type}.eager-attention",
            f"{_module(model_type)}:eager_attention_forward",
            SOFTMAX,
            users,
            "the softmax of eager attention: scores in, probabilities out",
        )
        rules.append(eager)
        for name in classes:
            rules.append(
                Rule(
                    f"{model_type}.{name}",
                    f"{_module(model_type)}:{name}.forward",
                    KERNEL,
                    users,
                    "the attention kernel call: queries, keys, values in, head outputs out",
                    drill={"attention_interface_1": eager},
                )
            )
    return tuple(rules)


RULES = _rules()
