"""The audio side: ``model.audio``, an audio tower's root, its blocks, and where a clip meets the text model."""

from .tower import Audio, AudioLayer, ConformerLayer

__all__ = ["Audio", "AudioLayer", "ConformerLayer"]
