"""The rules: which forwards are rewritten, and which calls in them become sites.

Each module holds one concern's rules as data (`instrument.Rule`); this module
gathers them. One rule per target forward.
"""

from instrument import Rule

from . import attention, deepstack, deltanet, image_scatter, llama4_feed_forward, qwen_vit_attention, qwen_vit_windows, radio_attention

#: Every rule, by concern.
RULES: tuple[Rule, ...] = (
    *image_scatter.RULES,
    *qwen_vit_attention.RULES,
    *qwen_vit_windows.RULES,
    *radio_attention.RULES,
    *deepstack.RULES,
    *llama4_feed_forward.RULES,
    *deltanet.RULES,
    *attention.RULES,
)


def rule_named(name: str) -> Rule:
    """The rule called ``name``; KeyError listing the names otherwise."""
    for rule in RULES:
        if rule.name == name:
            return rule
    raise KeyError(f"no rule {name!r}; rules: {', '.join(r.name for r in RULES)}")


def rules_for(model_type: str) -> tuple[Rule, ...]:
    """The rules of one model_type's forwards (empty for a model_type with none)."""
    return tuple(rule for rule in RULES if model_type in rule.model_types)
