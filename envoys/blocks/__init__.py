"""Kinds of block: sandwich norms, hybrid mixers, DeltaNet, mixture-of-experts, indexers, DeepStack."""
