"""Kinds of block: sandwich norms (GLM-4's too), parallel blocks, OPT's, hybrid mixers, DeltaNet, mixture-of-experts, indexers,
DeepStack."""
