"""The layouts of the standard values: names for tensor shapes, shown in reprs and docstrings.

Each is an annotation only (the values are plain ``torch.Tensor``); its
docstring is the axes, in order.
"""

from __future__ import annotations


class Layout:
    """A tensor layout: the class name is what a repr shows, the docstring the axes."""

    @classmethod
    def shape(cls) -> str:
        """The axes, as the docstring gives them: ``[batch, seq, hidden_size]``."""
        return (cls.__doc__ or "").split(":")[0]


class Hidden(Layout):
    """[batch, seq, hidden_size]: the text model's stream."""


class TokenIds(Layout):
    """[batch, seq] long: the token ids the forward receives."""


class TokenMask(Layout):
    """[batch, seq]: the attention mask, 1 at real tokens and 0 at padding."""


class Patches(Layout):
    """[images, patches, vision_hidden_size]: a tower's stream, one row per image (or per tile)."""


class PackedPatches(Patches):
    """[1, patches, vision_hidden_size]: a packed tower's stream, one row holding every image's patches, image after image."""


class Pattern(Layout):
    """[batch, heads, query, key]: attention scores or probabilities."""


class Queries(Layout):
    """[batch, heads, query, head_dim]: the queries as the attention kernel receives them."""


class Keys(Layout):
    """[batch, key_value_heads, key, head_dim]: the keys as the attention kernel receives them."""


class Values(Layout):
    """[batch, key_value_heads, key, head_dim]: the values as the attention kernel receives them."""


class HeadOutputs(Layout):
    """[batch, query, heads, head_dim]: each head's output, before the output projection."""


class ImageTokenMask(Layout):
    """[batch, seq] bool: which positions of the text batch hold an image token."""


class ImageFeatures(Layout):
    """[image_tokens, hidden_size]: what the wrapper scatters into the token embeddings, flat over the image tokens."""


class VideoTokenMask(Layout):
    """[batch, seq] bool: which positions of the text batch hold a video token."""


class VideoFeatures(Layout):
    """[video_tokens, hidden_size]: what the wrapper scatters into the token embeddings at the video tokens, flat."""


class AudioTokenMask(Layout):
    """[batch, seq] bool: which positions of the text batch hold an audio token."""


class AudioFeatures(Layout):
    """[audio_tokens, hidden_size]: what the wrapper scatters into the token embeddings at the audio tokens, flat."""


class AudioFrames(Layout):
    """[clips, frames, audio_hidden_size]: an audio tower's stream, one row per clip (a packed tower's: one row)."""


class Logits(Layout):
    """[batch, seq, vocab]: the language-model head's output."""


class RouterLogits(Layout):
    """[tokens, experts]: a router's score for each expert, the batch's tokens flattened (batch * seq)."""


class PatchMask(Layout):
    """[images, patches] bool: which rows of the tower's padded patch axis hold a real patch."""
