"""StandardizedTransformer on a tiny Ovis2.5 checkpoint: what is particular to it, exact.

The spec's contracts run on it in test_vision_contracts.py (and its video in
test_video_values.py); this file holds what only Ovis2.5 does: its tower's
windows of merge units; the projector reading the last block's output as it
leaves the block (window order, before ``post_layernorm``), not
``tower_output``; the visual tokenizer's probabilities (``projector.visual_tokens``)
and the embedding table's output under them; the scatter inside the host's
helper, which also writes the indicator words' rows at each image's (and
video's) start and end tokens; and each image token holding its merge unit in
window order. Every expected number comes from the builder's documented config
(patch 8, merge 2x2, windows of 2x2 merge units, a visual vocabulary of 60
words and 4 indicator rows), the processor and the modules' own weights, never
from the code under test.
"""

from __future__ import annotations

import nnsight
import pytest
import torch
from family_inputs import eager_attention, grid, prompt
from rounding import assert_batch_close

pytest.importorskip("transformers.models.ovis2_5", reason="target absent: ovis2_5 came in transformers 5.25")

from envoys import StandardizedTransformer  # noqa: E402
from envoys.testing import chat_prompt, noise_image, noise_video  # noqa: E402

#: 32x32 noise (4x4 patches, 2x2 merge units: one window, 4 tokens) and 64 wide x 48 high (6x8 patches, 3x4 merge
#: units: windows of 2x2, 2x2, 1x2 and 1x2 units, 12 tokens).
IMAGES = [noise_image(32, 32, seed=0), noise_image(64, 48, seed=1)]
MERGE_UNIT = 4  # 2x2 patches
WORDS, INDICATORS = 60, 4  # the visual vocabulary: 60 words, then the image start, image end, video start, video end


CHECKPOINT = "ovis2_5"


def window_order(rows: int, columns: int, side: int) -> list[int]:
    """A ``rows x columns`` merged grid's units (raster order) listed window by window: windows of ``side x side``
    units from the top left corner, windows in raster order, each window's units in raster order."""
    order = []
    for top in range(0, rows, side):
        for left in range(0, columns, side):
            order += [r * columns + c for r in range(top, min(top + side, rows))
                      for c in range(left, min(left + side, columns))]
    return order


#: Every merge unit of both images, in the tower's window order (image 1's units after image 0's 4).
WINDOW_ORDER = window_order(2, 2, 2) + [4 + unit for unit in window_order(3, 4, 2)]


def units_back(stream: torch.Tensor, window: list[int] | torch.Tensor) -> torch.Tensor:
    """``[patches, width]`` in window order, put back in merge-block order merge unit by merge unit."""
    back = torch.argsort(torch.as_tensor(window))
    return stream.reshape(-1, MERGE_UNIT, stream.shape[-1])[back].reshape(stream.shape)


def test_the_towers_sizes_and_token_grids(model):
    assert model.vision.num_heads == 2 and model.vision.spatial_merge_size == 2 and model.vision.window_size == 32
    assert [list(layer) for layer in grid(model, IMAGES)] == [[1, 4, 4], [1, 6, 8]]


def test_the_blocks_run_in_window_order_after_the_patch_embedding(model):
    """``window_index`` is the window order of the merge units; block 0's input is the embeddings' output (patches
    plus resampled positions, merge-block order) permuted unit by unit into it."""
    with torch.no_grad(), model.trace(prompt(model, IMAGES), images=IMAGES) as tracer:
        patches = model.vision.patch_embeddings.save()
        embedded = model.vision.embeddings.output.save()
        window = model.vision.window_index.save()
        entering = model.vision.layers[0].layer_input.save()
        tracer.stop()
    assert window.tolist() == WINDOW_ORDER
    assert patches.shape == entering.shape == (1, 64, 32) and not torch.equal(patches[0], embedded)
    in_windows = embedded.reshape(-1, MERGE_UNIT, 32)[torch.tensor(WINDOW_ORDER)].reshape(64, 32)
    assert torch.equal(entering[0], in_windows)


def test_block_0_attends_per_window_and_block_1_per_image(model):
    """The kernel runs once per window (16, 16, 16, 8, 8 patches) on block 0, once per image (16, 48) on block 1, each
    call eager attention over its slice of the whole queries, keys and values."""
    for block, bounds in ((0, [0, 16, 32, 48, 56, 64]), (1, [0, 16, 64])):
        attention = model.vision.layers[block].self_attn
        with torch.no_grad(), model.trace(prompt(model, IMAGES), images=IMAGES) as tracer:
            cu_seqlens = attention.inputs[1]["cu_seqlens"].save()
            queries = attention.attention_queries.save()
            keys = attention.attention_keys.save()
            values = attention.attention_values.save()
            heads = attention.attention_head_outputs.save()
            tracer.stop()
        assert cu_seqlens.tolist() == bounds, block
        expected = [eager_attention(*(t[:, :, a:b] for t in (queries, keys, values)), attention._module.scaling)
                    for a, b in zip(bounds, bounds[1:])]
        assert torch.equal(torch.cat(expected, dim=1), heads), block


def test_the_projector_reads_the_last_blocks_output_in_window_order_and_tower_output_feeds_nothing(model):
    """``get_image_features`` hands the projector the tower's ``hidden_states[-1]``: the last block's output as it
    leaves the block, not ``last_hidden_state`` (``post_layernorm`` over the stream back in merge-block order)."""
    with torch.no_grad(), model.trace(prompt(model, IMAGES), images=IMAGES) as tracer:
        window = model.vision.window_index.save()
        last = model.vision.layers[-1].layer_output.save()
        tower = model.vision.tower_output.save()
        received = model.projector.input.save()
        tracer.stop()
    norm = model._module.model.vision_tower.post_layernorm
    assert torch.equal(received, last[0])
    assert torch.equal(tower[0], norm(units_back(last[0], window)))
    assert not torch.equal(received, tower[0]) and not torch.equal(received, units_back(last[0], window))
    reason = model.vision.gradient_reason("tower_output")
    assert "hidden_states[-1]" in reason and "read vision.layers[-1].layer_output" in reason


def test_visual_tokens_are_the_visual_tokenizers_softmax_and_the_projector_embeds_them(model):
    """Each merge unit's 4 rows joined, mapped to logits over the 60 visual words, LayerNormed, softmaxed:
    ``visual_tokens``; padded with zeros for the 4 indicator words, times the embedding table: ``projector.output``."""
    with torch.no_grad(), model.trace(prompt(model, IMAGES), images=IMAGES) as tracer:
        received = model.projector.input.save()
        tokens = model.projector.visual_tokens.save()
        projected = model.projector.output.save()
        tracer.stop()
    tokenizer = model._module.model.multi_modal_projector.visual_tokenizer
    table = model._module.model.multi_modal_projector.visual_embeddings_table
    with torch.no_grad():
        logits = tokenizer.norm(tokenizer.linear(received.reshape(16, MERGE_UNIT * 32)))
        probabilities = torch.softmax(logits, dim=-1, dtype=torch.float32)
        embedded = table(torch.cat((probabilities, torch.zeros(16, INDICATORS)), dim=-1))
    assert tokens.shape == (16, WORDS) and torch.equal(tokens, probabilities)
    torch.testing.assert_close(tokens.sum(-1), torch.ones(16), rtol=0, atol=1e-6)
    assert projected.shape == (16, 32) and torch.equal(projected, embedded)


def test_a_write_to_the_visual_tokens_is_what_the_table_embeds(model):
    """Assigned or edited in place, the probabilities the embedding table weighs its rows by are the ones written."""
    table = model._module.model.multi_modal_projector.visual_embeddings_table
    uniform = torch.full((16, WORDS), 1.0 / WORDS)
    with torch.no_grad(), model.trace(prompt(model, IMAGES), images=IMAGES) as tracer:
        model.projector.visual_tokens = uniform
        assigned = model.vision.image_features.save()
        tracer.stop()
    with torch.no_grad(), model.trace(prompt(model, IMAGES), images=IMAGES) as tracer:
        model.projector.visual_tokens[:, 1:] = 0.0
        model.projector.visual_tokens[:, 0] = 1.0
        edited = model.vision.image_features.save()
        tracer.stop()
    padded = torch.zeros(16, WORDS + INDICATORS)
    padded[:, :WORDS] = uniform
    with torch.no_grad():
        assert torch.equal(assigned, table(padded))
    first_word = table.weight[:, 0]  # the table's row for word 0
    assert torch.equal(edited, first_word.expand(16, -1))


def test_the_helper_scatters_the_features_and_writes_the_indicator_rows_at_the_start_and_end_tokens(model):
    """``layers[0].input`` holds ``image_features`` (``projector.output``) at the image tokens, the indicator words'
    rows of the table (60: image start, 61: image end) at each image's start and end tokens, and the token
    embeddings elsewhere."""
    text = prompt(model, IMAGES)
    with torch.no_grad(), model.trace(text, images=IMAGES):
        ids = model.input_ids.save()
        mask = model.vision.image_token_mask.save()
        projected = model.projector.output.save()
        embedded = model.token_embeddings.save()  # embedded after the tower and projector ran, before the helper
        features = model.vision.image_features.save()
        first = model.layers[0].input.save()
    tokenizer = model.tokenizer
    rows = model._module.model.multi_modal_projector.visual_embeddings_table.weight.T  # [vocab_size, hidden]
    start, end = (ids == tokenizer.convert_tokens_to_ids(token) for token in ("<|image_start|>", "<|image_end|>"))
    assert int(start.sum()) == int(end.sum()) == 2 and int(mask.sum()) == 16
    assert torch.equal(features, projected) and torch.equal(first[mask], features)
    assert torch.equal(first[start], rows[WORDS].expand(2, -1)) and torch.equal(first[end], rows[WORDS + 1].expand(2, -1))
    rest = ~(mask | start | end)
    assert torch.equal(first[rest], embedded[rest])


@pytest.mark.batch_shapes
def test_each_image_token_holds_its_merge_unit_in_window_order_and_the_token_grid_says_where(model):
    """The projector works on each merge unit alone, so run on the last block's output put back in merge-block order
    it gives each unit's embedding in the processor's order (each row now at another place of the product: equal up
    to rounding, `assert_batch_close`); the image tokens hold them in window order (image 1's differ), and
    ``vision.token_grid`` puts each at its unit's cell of the merged grid (a gather: exact)."""
    with torch.no_grad(), model.trace(prompt(model, IMAGES), images=IMAGES) as tracer:
        last = model.vision.layers[-1].layer_output.save()
        features = model.vision.image_features.save()
        tracer.stop()
    with torch.no_grad():
        in_order = model._module.model.multi_modal_projector(units_back(last[0], WINDOW_ORDER))  # merge-block order
    assert_batch_close(features, in_order[torch.tensor(WINDOW_ORDER)])
    assert not torch.allclose(features[4:], in_order[4:])
    placed = features[torch.argsort(torch.tensor(WINDOW_ORDER))]  # the features back in merge-block order
    assert torch.equal(model.vision.token_grid(features, image=0), placed[:4].reshape(2, 2, 32))
    assert torch.equal(model.vision.token_grid(features, image=1), placed[4:].reshape(3, 4, 32))
    assert torch.equal(model.vision.token_grid(features, image=1, of="projector_output"), placed[4:].reshape(3, 4, 32))
    # the stream's patch grid, window order, and the tower's output's, merge-block order, hold the same patches
    with torch.no_grad(), model.trace(prompt(model, IMAGES), images=IMAGES) as tracer:
        stream = model.vision.layers[-1].layer_output.save()
        tracer.stop()
    merge_order = units_back(stream[0], WINDOW_ORDER)[16:]  # image 1's 48 patches, 2x2 blocks in raster order
    by_hand = merge_order.reshape(3, 4, 2, 2, 32).permute(0, 2, 1, 3, 4).reshape(6, 8, 32)
    assert torch.equal(model.vision.patch_grid(stream, image=1), by_hand)


@pytest.mark.batch_shapes
def test_a_video_meets_its_tokens_frame_by_frame_in_window_order_between_its_indicator_rows(model):
    """Two 64 wide x 48 high frames, one temporal unit each (12 merge units, four windows a frame): the video tokens
    hold each frame's units in window order (the projector rerun on them in merge-block order agrees up to rounding),
    ``vision.video_token_grid`` places them (exact), and the video's start and end tokens hold the table's rows 62
    and 63."""
    video = noise_video(2, 64, 48, seed=3)
    text = chat_prompt(model.processor, 0, "What is in the picture?", videos=1)
    with torch.no_grad(), model.trace(text, videos=[video]):
        ids = model.input_ids.save()
        mask = model.vision.video_token_mask.save()
        last = model.video.layers[-1].layer_output.save()
        features = model.vision.video_features.save()
        first = model.layers[0].input.save()
    frame_order = window_order(3, 4, 2)
    order = frame_order + [12 + unit for unit in frame_order]
    with torch.no_grad():
        in_order = model._module.model.multi_modal_projector(units_back(last[0], order))
    assert int(mask.sum()) == 24 and torch.equal(first[mask], features)
    assert_batch_close(features, in_order[torch.tensor(order)])
    placed = features[torch.argsort(torch.tensor(order))]
    assert torch.equal(model.vision.video_token_grid(features), placed.reshape(2, 3, 4, 32))
    rows = model._module.model.multi_modal_projector.visual_embeddings_table.weight.T
    start, end = (ids == model.tokenizer.convert_tokens_to_ids(token) for token in ("<|video_start|>", "<|video_end|>"))
    assert torch.equal(first[start], rows[WORDS + 2][None]) and torch.equal(first[end], rows[WORDS + 3][None])


def test_the_scatter_is_read_where_nnsight_drills_into_the_helper(tiny_checkpoint):
    """``image_features`` is the helper's masked_scatter argument 1, at the label nnsight's own ``.source`` drill
    gives it; once a user has opened the host's ``.source`` (nnsight's body runs the host from then on), the value
    asks nnsight to drill into the helper, and reads the same tensor."""
    model = StandardizedTransformer(tiny_checkpoint("ovis2_5"), task="image-text-to-text", device="cpu",
                                    attn_implementation="eager")
    text = prompt(model, IMAGES)
    with torch.no_grad(), model.trace(text, images=IMAGES):
        ours = model.vision.image_features.save()
    host = model.model
    with torch.no_grad(), model.trace(text, images=IMAGES):
        native = host.source.self__merge_visual_features_0.source.inputs_embeds_masked_scatter_0.inputs
        native = nnsight.save(native[0][1])
    with torch.no_grad(), model.trace(text, images=IMAGES):  # the host's .source is open: nnsight's body runs it
        mask = model.vision.image_token_mask.save()
        again = model.vision.image_features.save()
        first = model.layers[0].input.save()
    assert torch.equal(native, ours) and torch.equal(again, ours) and torch.equal(first[mask], ours)
