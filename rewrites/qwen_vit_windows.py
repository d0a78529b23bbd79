"""A windowed tower's window order: where the tower puts its stream into attention windows.

Found from the forward's shape (`TEMPLATES`, through `rewrites.found`): a tower
forward that computes ``window_index`` (which merge unit, or patch, goes where,
over every image of the call), puts its stream in that order before the first
block, and restores the original order after the last with
``torch.argsort(window_index)``, once. Every block, the tower's
``last_hidden_state`` and the merger's output are in window order. How the
forward reorders decides the sites, first match wins:

- `PERMUTED`: ``self.permute_input_for_window_attn(hidden_states, window_index,
  seq_len=...)`` permutes the patch embeddings (``self_permute_input_for_window_attn_0``),
  then the rotary cos and sin with the same call inside a generator
  (``self_permute_input_for_window_attn_1``, fired twice): argument 1 is the
  window index (Qwen2.5-VL's tower from transformers 5.17, and the towers
  built on its forward);
- `INDEXED`: the forward permutes inline (``hidden_states[window_index, :, :]``,
  an indexing, not a call) and computes the index with
  ``get_vision_window_index(...)``, whose item 0 is the index
  (``get_vision_window_index_0``, `INDEX_SITE`; Qwen2.5-VL's tower from 5.9 to
  5.16, before or after the patch embedding);
- `BY_METHOD`: the same inline permutation, the index computed by
  ``self.get_window_index(grid_thw)`` (Qwen2.5-VL's tower before 5.9), served
  as `INDEX_SITE` too.

A forward that reorders windows without restoring the order (a merger pooling
each window, which calls ``self.get_window_index`` too) does not have the
shape.
"""

from .found import Template

#: The tower's permutation of its stream into windows: argument 1 is the window index (occurrence 0; the two
#: later calls permute the rotary cos and sin).
WINDOW_SITE = "self_permute_input_for_window_attn_0"
#: The call computing the window index, on towers that permute inline: its output's item 0 is the index.
INDEX_SITE = "get_vision_window_index_0"

#: Restoring the original order after the last block: part of every windowed tower's shape.
RESTORED = {"torch.argsort": 1}

PERMUTED = Template(
    "vision-windows",
    {"self.permute_input_for_window_attn": (WINDOW_SITE, "self_permute_input_for_window_attn_1")},
    "the tower's permutation into attention windows: argument 1 is the window index",
    shape=RESTORED,
)

INDEXED = Template(
    "vision-windows",
    {"get_vision_window_index": (INDEX_SITE,)},
    "the tower's window index (the permutation into windows is an inline indexing): item 0 of the call",
    shape={**RESTORED, "self.permute_input_for_window_attn": 0},
)

BY_METHOD = Template(
    "vision-windows",
    {"self.get_window_index": ("self_get_window_index_0",)},
    "the tower's window index (the permutation into windows is an inline indexing): item 0 of "
    "self.get_window_index(grid_thw)",
    shape={**RESTORED, "self.permute_input_for_window_attn": 0},
    serve_as={"self_get_window_index_0": INDEX_SITE},
)

TEMPLATES = (PERMUTED, INDEXED, BY_METHOD)
