"""Which tower values a LLaVA-style wrapper computes nothing from, so they have no gradient.

LLaVA, LLaVA-NeXT, VipLlava and Aria feed the projector the tower's ``hidden_states[k]`` for
``k`` in ``config.vision_feature_layer`` (an int or a list; ``hidden_states[i]``
is block ``i``'s input, ``hidden_states[-1]`` the last block's output), never
``last_hidden_state``. Blocks past the deepest selected state still run, but
nothing the logits depend on is computed from them, and SigLIP's final norm
(``post_layernorm``, whose output is ``tower_output``) feeds nothing either. A
value read there has no gradient; `FeatureLayerGradients.gradient_reason` says
why, so ``.grad`` on it raises `Unavailable` with the reason instead of
waiting for a gradient that never comes.
"""

from __future__ import annotations

from typing import Any


def feature_layers(config: Any) -> int | list[int]:
    """The ``hidden_states`` indexes the projector reads: ``vision_feature_layer``, or VipLlava's
    ``vision_feature_layers`` on releases before it took LLaVA's name (5.24 answers to both)."""
    chosen = getattr(config, "vision_feature_layer", None)
    return chosen if chosen is not None else config.vision_feature_layers


def deepest_feature_state(config: Any) -> int:
    """The deepest ``hidden_states`` index the projector reads, in ``0..num_hidden_layers``."""
    layers = config.vision_config.num_hidden_layers
    chosen = feature_layers(config)
    chosen = [chosen] if isinstance(chosen, int) else list(chosen)
    return max(index % (layers + 1) for index in chosen)


def block_index(envoy: Any) -> int | None:
    """The tower block ``envoy`` is (a block) or is in (its attention or MLP), by its path; None for the tower."""
    for segment in (envoy.path.rpartition(".")[2], envoy.path.rpartition(".")[0].rpartition(".")[2]):
        if segment.isdigit():
            return int(segment)
    return None


#: Towers whose ``last_hidden_state`` is after a final norm over every patch (CLIP's ``post_layernorm`` norms only its
#: pooled CLS): SigLIP's, and Idefics 3's ViT in Aria.
NORMED_TOWERS = ("siglip_vision_model", "idefics3_vision")


class FeatureLayerGradients:
    """A mixin for a LLaVA-style tower's envoys: `gradient_reason` for the values the projector never reads from."""

    def gradient_reason(self, name: str) -> str | None:
        """Why the value ``name`` on this envoy has no gradient, or None when the logits depend on it."""
        config = self.root.config
        deepest = deepest_feature_state(config)
        selected = f"the projector reads the tower's hidden_states[{deepest}] (vision_feature_layer={feature_layers(config)})"
        index = block_index(self)
        if index is None:
            last = config.vision_config.num_hidden_layers
            normed = config.vision_config.model_type in NORMED_TOWERS
            if name != "tower_output" or (deepest == last and not normed):
                return None
            read = f"vision.layers[{deepest - 1}].layer_output" if deepest else "vision.layers[0].layer_input"
            return (f"{selected}, not the tower's last_hidden_state, so the logits do not depend on it; "
                    f"read {read} for the gradient of what the projector reads")
        is_block = self.path.rpartition(".")[2].isdigit()
        if index < deepest or (index == deepest and is_block and name == "layer_input"):
            return None  # block `deepest`'s input is hidden_states[deepest] itself
        return (f"{selected}, the input of block {deepest}; block {index} runs after it and nothing the logits "
                f"depend on is computed from it")


def with_feature_layer_gradients(envoys: dict[type, type]) -> dict[type, type]:
    """A family's tower ``ENVOYS``, each envoy given `FeatureLayerGradients`."""
    made: dict[type, type] = {}

    def mixed(envoy: type) -> type:
        if envoy not in made:
            made[envoy] = type(envoy.__name__, (FeatureLayerGradients, envoy), {"__module__": envoy.__module__,
                                                                               "__doc__": envoy.__doc__})
        return made[envoy]

    return {module: mixed(envoy) for module, envoy in envoys.items()}
