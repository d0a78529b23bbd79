"""``model.audio``: an audio tower's root, its blocks, and where the audio meets the text model.

A family whose host scatters audio features (`Family.media` holds "audio")
names its audio tower ``audio`` and keys `Audio` to the tower's class. Two
values say where the audio enters the text model, as the image's do:
``audio.audio_token_mask``, off the root's ``input_ids``, and
``audio.audio_features``, read at the host's audio scatter, so
``layers[0].input[audio.audio_token_mask] == audio.audio_features``.

The tower's blocks are ``audio.layers[i]``. A pre-norm block (Whisper's
encoder layer: ``x + attn(norm(x))``, then ``x + mlp(norm(x))``) is an
`AudioLayer` with the text block's four stream values,
``layer_input + attention_output + mlp_output == layer_output``. A Conformer
block (Gemma 4's and Parakeet's: half a feed-forward, attention, a
convolution, another half feed-forward, a final norm) is a `ConformerLayer`:
its stream in and out, and the reason the sum has no parts.

Every tower value is gated by `no_audio`: a load no audio can reach, or a
trace whose inputs carry none, refuses them (`Unavailable`).
"""

from __future__ import annotations

from typing import Any

from ..core.layouts import AudioFeatures, AudioFrames, AudioTokenMask
from ..core.standard import Standard, rows_over
from ..core.values import EProperty, Field, value
from ..text.blocks import stream_values
from ..vision.media import absent_from_trace, not_served, scattered_features, token_mask
from ..vision.tower import as_patches, from_patches

#: What an out-of-order read of an audio value adds to nnsight's error.
AUDIO_ORDER = (
    "reads follow the forward: the audio tower's values, audio_features, then the text model's; and the audio tower's "
    "values exist only in a forward a clip reaches (pass audio= with a prompt that holds the audio placeholder)"
)

#: Why an audio tower value is not served on a later step of generate.
FIRST_STEP_ONLY = (
    "the audio is encoded once, in the forward of generate's step 0 (the audio tower and audio_features run there "
    "only); read it in step 0 (tracer.iter[0]), or in a trace"
)


def no_audio(envoy: Any) -> str | None:
    """Why no audio reaches the audio tower ``envoy`` is in: the model takes none, or the running trace carries none."""
    return not_served(envoy.root, "audio") or absent_from_trace(envoy, ("audio",))


class Audio(Standard):
    """``model.audio``: an audio tower's root. Its blocks are ``layers``; its sizes are its own config's."""

    order_hint = AUDIO_ORDER
    first_step_only = FIRST_STEP_ONLY

    audio_token_mask = token_mask("audio", AudioTokenMask)
    audio_features = scattered_features("audio", AudioFeatures)

    tower_output = value("tower_output", AudioFrames, description="the audio tower's output", key="output", select=Field("last_hidden_state"),
                         unavailable=no_audio, view=as_patches, inverse=from_patches,
                         doc="The audio tower's last_hidden_state, ``[clips, frames, audio_hidden_size]`` (a tower that "
                             "packs every clip's frames in one row: ``[1, frames, audio_hidden_size]``), before the "
                             "host's projection into the text model's width.")

    @property
    def audio_config(self) -> Any:
        return self._module.config

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @property
    def audio_hidden_size(self) -> int:
        config = self.audio_config
        return getattr(config, "hidden_size", None) or config.d_model

    @property
    def num_heads(self) -> int:
        config = self.audio_config
        return getattr(config, "num_attention_heads", None) or config.encoder_attention_heads

    def support(self, layer: int | None = None) -> dict[str, Any]:
        """Which audio values this checkpoint has: None when available (on every block), else the reason; with
        ``layer``, that block's values alone."""
        rows = rows_over(list(self.layers), layer)
        if layer is not None:
            return rows
        return {**super().support(), **rows}


class AudioLayer(Standard):
    """A pre-norm audio block: the text block's values as `AudioFrames`,
    ``layer_input + attention_output + mlp_output == layer_output``."""

    order_hint = AUDIO_ORDER
    first_step_only = FIRST_STEP_ONLY

    layer_input, attention_output, mlp_output, layer_output = stream_values(AudioFrames, no_audio, as_patches,
                                                                            from_patches)


#: Why a Conformer block's stream has no attention_output / mlp_output parts.
CONFORMER = (
    "this is a Conformer block: half a feed-forward, the attention, a convolution module and another half "
    "feed-forward each add to the stream, and a final norm rescales the sum, so layer_output is no sum of an "
    "attention part and an MLP part; read layer_input and layer_output, or the block's modules' own outputs "
    "(nnsight's .output on self_attn)"
)


def conformer_part(name: str) -> EProperty:
    """A stream part a Conformer block does not have, `Unavailable` with `CONFORMER`."""
    return value(name, AudioFrames, description=f"not served on a Conformer block ({name})", key="output", unavailable=CONFORMER)


class ConformerLayer(AudioLayer):
    """A Conformer audio block (Gemma 4's, Parakeet's): ``layer_input`` and ``layer_output``, ``[clips, frames,
    audio_hidden_size]``; its ``attention_output`` and ``mlp_output`` are `Unavailable` (`CONFORMER`)."""

    attention_output = conformer_part("attention_output")
    mlp_output = conformer_part("mlp_output")
