"""The spec's vision contracts, once, on every tiny checkpoint: each contract runs on every builder in
``envoys.testing.NAMES`` with the row its builder module declares (``CONTRACTS``, `envoys.testing.contract`).

What is checked, exactly (``torch.equal`` on float32 under eager attention,
the shapes, the errors): that each standard name the row declares (``native``)
reaches its native module; where the image meets the text model (the mask is the
processor's image tokens, ``layers[0].input[mask] == image_features``, times the
text model's ``embedding_multiplier`` where it scales the embeddings, with one
image and with two of different sizes), the tower's stream layout and
``layer_input + attention_output + mlp_output == layer_output`` on every tower
block, the pattern (its shape and rows summing to 1, or ``Unavailable`` with
the reason), what the projector reads and gives, the forwards rewritten (the rules found
from the model, and ``show``'s listing of them), the text stream between blocks
(with DeepStack's additions), an ablation that reaches the logits and a clean
rerun that is bit-identical, the sizes, ``support()``, a text-only load,
generation (the mask per step, the tower at step 0 only, the plain model's
tokens), and outputs outside a trace identical to the plain model's.

A family's own test file holds only what is particular to it. Reads follow the
forward's order (the mask, the tower's values, the projector's,
``image_features``, then the text model's); every trace stops after its last
read (``tracer.stop()``), as Llama 4's must on releases whose root forward fails
on its last line, which changes nothing elsewhere.
"""

from __future__ import annotations

import importlib
import itertools
import pkgutil
import re

import nnsight
import pytest
import torch
from rounding import assert_batch_close
from transformers import AutoModelForImageTextToText

import envoys.testing
from envoys import StandardizedTransformer, Unavailable
from envoys.core.layouts import PackedPatches
from envoys.core.standard import Standard
from envoys.core.values import standard_values
from envoys.core.wording import article
from envoys.testing import CONTRACTS as ROWS
from envoys.testing import NAMES, chat_prompt, image_prompts, noise_image
from envoys.testing.contract import Row
from envoys.towers.timm_eager import run_eager_where_asked
from envoys.vision.media import token_id
from envoys.vision.tower import VIDEO_VALUES
from instrument import installed
from instrument.show import main as show

#: The standard values every tower serves (vision.support()'s rows; a family may add its own).
TOWER_VALUES = (
    "image_token_mask", "image_features", "patch_embeddings", "tower_output", "layer_input", "attention_output",
    "mlp_output", "layer_output", "self_attn.attention_queries", "self_attn.attention_keys", "self_attn.attention_values",
    "self_attn.attention_scores", "self_attn.attention_probabilities", "self_attn.attention_head_outputs",
)
PATTERN = ("self_attn.attention_scores", "self_attn.attention_probabilities")

#: The prefixes of a block's values in support()'s rows.
BLOCK_VALUES = ("layer_", "attention_", "mlp_", "self_attn.", "mlp.")
#: The rows of model.support() a transformers bug of the root's forward adds while it is present.
BUG_ROWS = ("output", "generate")
COUNTS = pytest.mark.parametrize("count", [1, 2], ids=["one-image", "two-images"])
STEPS = 3


def test_every_builder_has_a_row():
    missing = sorted(set(NAMES) - set(ROWS))
    assert not missing, f"add a row to the CONTRACTS of the builder module of {', '.join(missing)}"


def test_every_row_is_a_builder_of_its_module():
    """A builder module's rows name its own builders (a misspelt row would never run)."""
    for info in pkgutil.iter_modules(envoys.testing.__path__):
        if info.name in envoys.testing.ABSENT:
            continue
        module = importlib.import_module(f"envoys.testing.{info.name}")
        stray = set(getattr(module, "CONTRACTS", {})) - set(getattr(module, "BUILDERS", {}))
        assert not stray, f"envoys/testing/{info.name}.py declares rows for no builder of its own: {sorted(stray)}"


@pytest.mark.parametrize("name", sorted(ROWS))
def test_the_rows_numbers_agree_with_each_other(name):
    row = ROWS[name]
    for count in (1, 2):  # a batched layout's rows are all as long (shape() unpacks their one length)
        assert row.stream.shape(count) and row.projected.shape(count)
    assert row.stream.rows_per_image or all(rows == 1 for rows, _ in row.stream.per_image)  # packed: a row an image
    if row.features_are_projected and not row.cross_layers:  # one image token per position of the projector's output
        assert tuple(rows * positions for rows, positions in row.projected.per_image) == row.image_tokens
    assert 0 <= row.prefix < min(positions for _, positions in row.stream.per_image)
    assert row.second_image != (32, 32)


# -- fixtures: one checkpoint, one load, one plain model per builder ---------------------------------------------


@pytest.fixture(scope="module", params=NAMES)
def name(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def row(name) -> Row:
    if name not in ROWS:
        pytest.fail(f"no row for the tiny checkpoint {name!r}: add one to its builder module's CONTRACTS")
    return ROWS[name]


@pytest.fixture(scope="module")
def model(name, tiny_checkpoint) -> StandardizedTransformer:
    return StandardizedTransformer(tiny_checkpoint(name), task="image-text-to-text", device="cpu",
                                   attn_implementation="eager")


@pytest.fixture(scope="module")
def plain(model):
    """The same checkpoint loaded by transformers alone; a timm tower's attention set to its eager branch as the library
    sets it (transformers does not pass attn_implementation on to timm: `envoys.towers.timm_eager`)."""
    loaded = AutoModelForImageTextToText.from_pretrained(model._module.name_or_path, attn_implementation="eager").eval()
    run_eager_where_asked(loaded)
    return loaded


def prompt(model, images) -> str | list[str]:
    """One prompt holding every image, or one prompt an image where the processor takes one a prompt (BLIP-2's)."""
    return image_prompts(model.processor, len(images), "What is in the picture?")


def processed(model, images):
    """The stock processor's outputs, floating-point ones in float32 (as transformers' pipeline casts them)."""
    text = prompt(model, images)
    return model.processor(text=text if isinstance(text, list) else [text], images=images,
                           return_tensors="pt").to(torch.float32)


def positions(model, row: Row):
    """Inside a trace: the position embeddings the text model adds before its first block (its row's ``positions``,
    a native path), saved."""
    module = model
    for name in row.positions.split("."):
        module = getattr(module, name)
    return module.output.save()


def bug_present(model) -> bool:
    """Whether the family's known transformers bug of the root's forward is present on the installed release."""
    bug = model.family.quirks.forward_bug
    return bug is not None and bug.present()


# -- the names -------------------------------------------------------------------------------------------------------


def standard_envoy(model, path: str):
    """The envoy at the standard dotted ``path`` (a row's ``native`` key): attributes, a digit indexing a stack."""
    envoy = model
    for part in path.split("."):
        envoy = envoy[int(part)] if part.isdigit() else getattr(envoy, part)
    return envoy


def native_names(model, row: Row):
    """The row's ``native`` entries, each ``*`` made every block of its stack in turn: (standard, native) paths."""
    for standard, native in row.native.items():
        stack, star, rest = standard.partition(".*.")
        if not star:
            yield standard, native
            continue
        native_stack, _, native_rest = native.partition(".*.")
        for index in range(len(standard_envoy(model, stack))):
            yield f"{stack}.{index}.{rest}", f"{native_stack}.{index}.{native_rest}"


def test_the_standard_names_reach_the_native_modules(model, row):
    """Each name of the row's ``native``: the standard envoy's module is the native module, and a stack's blocks are
    the native stack's, in order."""
    assert row.native, "state the checkpoint's native names in its row's native (its builder module's CONTRACTS)"
    required = {"vision", "projector", "layers"} | ({"vision.layers"} if row.sizes.num_layers else set())
    assert required <= set(row.native), f"name these in the row's native: {sorted(required - set(row.native))}"
    for standard, native in native_names(model, row):
        envoy, module = standard_envoy(model, standard), model._module.get_submodule(native)
        assert envoy._module is module, f"{standard} is not {native}"
        if isinstance(module, torch.nn.ModuleList):
            assert len(envoy) == len(module), standard
            assert all(block._module is native_block for block, native_block in zip(envoy, module)), standard


# -- the rewritten forwards ------------------------------------------------------------------------------------------


def test_the_forwards_rewritten_on_the_loaded_model_are_the_rows(model, row):
    """The rules found from the model and installed on it: each installed rule, and the eager kernels they drill into."""
    assert row.rules, "state the rules that rewrite this checkpoint's forwards in its row (its builder module's CONTRACTS)"
    assert model.rewrite_failures == {}
    installed_here = {name: rule for module in model._module.modules() for name, rule in installed(module).items()}
    drilled = {inner.rule.name for rule in installed_here.values() for inner in rule.drills.values()}
    assert sorted(set(installed_here) | drilled) == sorted(row.rules)


def test_show_lists_every_rewritten_forward_with_its_sites(model, row, capsys):
    assert show([model.family.model_type]) == 0
    out = capsys.readouterr().out
    listed = {line.split(":")[0].removeprefix("# rule ") for line in out.splitlines() if line.startswith("# rule ")}
    assert set(row.rules) <= listed
    for rule in (rule for module in model._module.modules() for rule in installed(module).values()):
        for label in (*rule.site_names, *(site for inner in rule.drills.values() for site in inner.site_names)):
            assert re.search(rf"^{label} +-> ", out, re.MULTILINE), label


# -- where the image meets the text model ---------------------------------------------------------------------------


@COUNTS
def test_image_features_are_what_the_text_model_receives_at_the_image_tokens(model, row, count):
    images = row.images[:count]
    if row.cross_layers:
        image_features_are_what_every_cross_layer_reads(model, row, images)
        return
    added = None  # bound before the trace: nnsight hands back the values its body sets, and None is none of them
    with model.trace(prompt(model, images), images=images) as tracer:
        mask = model.vision.image_token_mask.save()
        features = model.vision.image_features.save()
        if row.positions is not None:
            added = positions(model, row)
        first = model.layers[0].input.save()
        tracer.stop()
    ids = processed(model, images)["input_ids"]
    tokens = sum(row.image_tokens[:count])
    assert mask.dtype == torch.bool and torch.equal(mask, ids == model.config.image_token_id)
    assert int(mask.sum()) == tokens
    assert features.shape == (tokens, model.hidden_size)
    # a text model that multiplies its embeddings after the scatter (Granite, HyperCLOVAX) multiplies the features too
    # (x * 1.0 is x, exactly), and one that adds learned positions before its first block (OPT) adds them too
    scattered = features * row.embedding_multiplier
    assert torch.equal(first[mask], scattered if added is None else scattered + added[mask])


def image_features_are_what_every_cross_layer_reads(model, row: Row, images) -> None:
    """Where the image enters through cross-attention (Mllama's): the mask marks each image's token, and every
    cross-attention block's attention reads image_features as its ``cross_attention_states``; no token holds them,
    so the first block's input is the token embeddings alone."""
    with model.trace(prompt(model, images), images=images) as tracer:
        mask = model.vision.image_token_mask.save()
        features = model.vision.image_features.save()
        embedded = model.embed_tokens.output.save()
        first = model.layers[0].input.save()
        read = nnsight.save([model.layers[k].cross_attn.inputs[1]["cross_attention_states"] for k in row.cross_layers])
        tracer.stop()
    ids = processed(model, images)["input_ids"]
    assert mask.dtype == torch.bool and torch.equal(mask, ids == token_id(model.config, "image"))
    assert int(mask.sum()) == sum(row.image_tokens[:len(images)])
    assert features.shape[-1] == model.hidden_size
    assert len(read) == len(row.cross_layers) and all(torch.equal(states, features) for states in read)
    assert torch.equal(first, embedded)


# -- the tower -------------------------------------------------------------------------------------------------------


@COUNTS
def test_the_tower_stream_and_every_block_adds_up(model, row, count):
    images = row.images[:count]
    with model.trace(prompt(model, images), images=images) as tracer:
        if row.restores_window_order and row.window_unit == 1:  # computed before the patch embedding (Muse's)
            window = model.vision.window_index.save()
        patches = model.vision.patch_embeddings.save()
        if row.restores_window_order and row.window_unit > 1:  # one entry a merge unit, computed after it (Ovis2.5's)
            window = model.vision.window_index.save()
        blocks = nnsight.save([])
        for index, block in enumerate(model.vision.layers):
            mixer = row.tower_mixers.get(index)  # a block whose mixer is not attention adds its output instead
            layer_input = block.layer_input
            added = block.attention_output if mixer is None else getattr(block, mixer).output
            blocks.append(nnsight.save([layer_input, added, block.mlp_output, block.layer_output]))
        tower = model.vision.tower_output.save()
        tracer.stop()
    width = row.sizes.vision_hidden_size
    merge, merged = row.merged_after or (None, row.stream)  # a merger inside the tower: later blocks on its rows
    assert patches.shape == (*(row.patch_embeddings or row.stream.without(row.prefix)).shape(count), width)
    assert len(blocks) == row.sizes.num_layers
    for index, (layer_input, attention, mlp, output) in enumerate(blocks):
        stream = (*(row.stream if merge is None or index <= merge else merged).shape(count), width)
        if index in row.tower_mixers:  # the mixer's own output, in the module's shape
            attention = attention.reshape(stream)
        assert layer_input.shape == attention.shape == mlp.shape == output.shape == stream, index
        assert torch.equal(layer_input + attention + mlp, output), index
        if index and index - 1 != merge:
            assert torch.equal(layer_input, blocks[index - 1][3]), index
    if not blocks:  # no tower blocks (Gemma 4 Unified's embedder): its family's test says what tower_output is
        assert tower.shape == (*merged.shape(count), width)
        return
    if row.tower_output is not None:  # no block's stream (Mllama's): its family's test says what it is
        assert tower.shape == (*row.tower_output.shape(count), model.vision.vision_config.vision_output_dim)
        return
    last = blocks[-1][3]
    if row.restores_window_order:  # the blocks' rows in window order, the tower's output back in raster order
        units = torch.argsort(window).unsqueeze(1) * row.window_unit + torch.arange(row.window_unit)
        last = last[:, units.reshape(-1)]
    if row.drops_prefix:  # each image's prefix rows dropped after the last block
        last, merged = without_prefix(last, merged, row.prefix, count), merged.without(row.prefix)
    assert tower.shape == (*merged.shape(count), width)
    if row.final_norm:  # after the tower's final norm over the patches
        assert torch.equal(tower, model.vision.norm._module(last)) and not torch.equal(tower, last)
    else:
        assert torch.equal(tower, last)


def without_prefix(stream: torch.Tensor, layout, prefix: int, count: int) -> torch.Tensor:
    """``stream`` (``[rows, positions, width]`` in ``layout``, of the first ``count`` images) without each image's
    first ``prefix`` positions: on a packed row, each image's segment of it."""
    if not layout.one_row:
        return stream[:, prefix:]
    lengths = [positions for _, positions in layout.per_image[:count]]
    return torch.cat([part[:, prefix:] for part in stream.split(lengths, dim=1)], dim=1)


#: The tower's stream values, as print(model) names them: the tower's own and every block's (and its parts').
STREAM_VALUES = ("patch_embeddings", "tower_output", "layer_input", "attention_output", "mlp_output", "layer_output")


def test_print_gives_the_tower_streams_layout(model, row):
    """``print(model)`` shows every tower stream value (patch_embeddings, tower_output, each block's) in the
    layout a read of it has: `PackedPatches`, ``[1, patches, vision_hidden_size]``, on a packed tower; one row per
    image or tile (`Patches`, ``[images, patches, vision_hidden_size]``, or the family's own) otherwise. A block's
    own repr (nnsight's) says the same."""
    shown = repr(model).splitlines()
    start = next(index for index, line in enumerate(shown) if line.startswith("  vision: "))
    tower = list(itertools.takewhile(lambda line: line.startswith("    "), shown[start + 1:]))
    stream = [re.fullmatch(r"\s+(\w+) -> (\w+): .* (\[[^]]*\])", line) for line in tower]
    stream = [found.groups() for found in stream if found is not None and found[1] in STREAM_VALUES]
    blocks = ("layer_input", "layer_output") if row.sizes.num_layers else ()  # a tower may have no blocks
    assert {"tower_output", *blocks} <= {name for name, _, _ in stream}, "\n".join(tower)
    packed = row.stream.one_row
    for name, layout, shape in stream:
        if packed:
            assert (layout, shape) == ("PackedPatches", PackedPatches.shape()), (name, layout, shape)
        else:
            assert layout != "PackedPatches" and not shape.startswith("[1, "), (name, layout, shape)
    if not blocks:
        return
    block = repr(model.vision.layers[0])
    if packed:
        assert f"(layer_output) -> PackedPatches: the stream leaving the block {PackedPatches.shape()}" in block, block
    else:
        assert "PackedPatches" not in block, block


def test_the_pattern_or_why_it_is_unavailable(model, row):
    images = row.images
    attention = {index: block.self_attn for index, block in enumerate(model.vision.layers)
                 if index not in row.tower_mixers}  # a block whose mixer is not attention has none
    if row.pattern.unavailable is not None:
        for index, block in attention.items():
            for value in ("attention_probabilities", "attention_scores"):
                with pytest.raises(Unavailable, match=rf"vision\.layers\[{index}\]\.self_attn\.{value} is unavailable: "
                                                      rf".*{row.pattern.unavailable}"):
                    getattr(block, value)
        with pytest.raises(Unavailable, match=row.pattern.unavailable):
            with model.trace(prompt(model, images), images=images):
                # the first attention block's; with no tower blocks, block 0, whose read raises the reason
                first = next(iter(attention.values())) if attention else model.vision.layers[0].self_attn
                first.attention_probabilities.save()
        return
    if row.pattern.per_call:
        check_the_block_identity(model, images, attention, row.sizes.num_heads)
        return
    with model.trace(prompt(model, images), images=images) as tracer:
        patterns = nnsight.save([block.attention_probabilities for block in attention.values()])
        tracer.stop()
    heads = row.sizes.num_heads
    rows, positions = row.stream.rows_and_positions(2)
    for index, pattern in zip(attention, patterns):
        block_rows, block_positions = row.pattern.rows.get(index, (rows, positions))  # a windowed block's: per window
        assert pattern.shape == (block_rows, heads, block_positions, block_positions), index
        torch.testing.assert_close(pattern.sum(-1), torch.ones(pattern.shape[:-1]), rtol=0, atol=1e-5)
        if row.stream.one_row:  # one call under a block-diagonal mask: each image sees itself alone
            for i, (a, b) in enumerate(row.stream.spans(2)):
                for j, (c, d) in enumerate(row.stream.spans(2)):
                    block = pattern[..., a:b, c:d]
                    assert bool((block > 0).all()) if i == j else torch.equal(block, torch.zeros_like(block))
        elif not row.pattern.padded and not row.pattern.masked:  # no mask: every position sees every position
            assert bool((pattern > 0).all()), index


def check_the_block_identity(model, images, attention, heads: int) -> None:
    """An attention that calls its kernel once per image or window: each call's scores are its scaled queries times
    its keys (the whole queries and keys split at the attention's own cu_seqlens), its probabilities their softmax,
    each on the diagonal of ``[1, heads, rows, rows]``; between the blocks the scores are ``finfo.min`` and the
    probabilities 0. Read in forward order, block after block: the input's bounds, queries, keys, scores,
    probabilities."""
    with torch.no_grad(), model.trace(prompt(model, images), images=images) as tracer:
        reads = nnsight.save([])
        for block in attention.values():
            reads.append([block.inputs[1].get("cu_seqlens"), block.attention_queries, block.attention_keys,
                          block.attention_scores, block.attention_probabilities])
        tracer.stop()
    for (index, block), (cu_seqlens, queries, keys, scores, probabilities) in zip(attention.items(), reads):
        rows = queries.shape[2]
        bounds = [0, rows] if cu_seqlens is None else cu_seqlens.tolist()  # RADIO: no bounds for one image
        assert scores.shape == probabilities.shape == (1, heads, rows, rows), index
        keys = keys.repeat_interleave(heads // keys.shape[1], dim=1)  # repeat_kv, where heads share keys
        inside = torch.zeros(rows, rows, dtype=torch.bool)
        for start, stop in zip(bounds, bounds[1:]):
            inside[start:stop, start:stop] = True
            scaled = torch.matmul(queries[..., start:stop, :], keys[..., start:stop, :].transpose(2, 3))
            scaled = scaled * block._module.scaling
            assert torch.equal(scores[..., start:stop, start:stop], scaled), index
            softmax = torch.softmax(scaled, dim=-1, dtype=torch.float32).to(queries.dtype)
            assert torch.equal(probabilities[..., start:stop, start:stop], softmax), index
        assert len(bounds) > 2 or len(images) == 1, index  # two images, two calls at least
        assert bool((scores[..., ~inside] == torch.finfo(scores.dtype).min).all()), index
        assert torch.equal(probabilities[..., ~inside], torch.zeros_like(probabilities[..., ~inside])), index
    first = reads[0]
    check_a_written_pattern_is_what_each_call_uses(model, images, next(iter(attention.values())), first[0],
                                                   first[4].shape)


def check_a_written_pattern_is_what_each_call_uses(model, images, block, cu_seqlens, shape) -> None:
    """The whole pattern assigned before the calls run (each call's rows attending evenly within it): each call's
    head outputs are its block times its values."""
    rows = shape[-1]
    bounds = [0, rows] if cu_seqlens is None else cu_seqlens.tolist()
    evenly = torch.zeros(shape)
    for start, stop in zip(bounds, bounds[1:]):
        evenly[..., start:stop, start:stop] = 1.0 / (stop - start)
    with torch.no_grad(), model.trace(prompt(model, images), images=images) as tracer:
        values = block.attention_values.save()
        block.attention_probabilities = evenly
        outputs = block.attention_head_outputs.save()
        tracer.stop()
    values = values.repeat_interleave(shape[1] // values.shape[1], dim=1)  # repeat_kv, where heads share values
    for start, stop in zip(bounds, bounds[1:]):
        expected = torch.matmul(evenly[..., start:stop, start:stop], values[..., start:stop, :]).transpose(1, 2)
        assert torch.equal(outputs[:, start:stop], expected), (start, stop)


def test_what_the_projector_reads_and_gives(model, row):
    images, reads, hidden = row.images, row.projector_reads, model.hidden_size
    last_block = row.sizes.num_layers - 1
    earlier = reads is not None and reads.value == "layer_output" and reads.block not in (-1, last_block)
    with model.trace(prompt(model, images), images=images) as tracer:
        if reads is not None and reads.value == "layer_output":
            source = model.vision.layers[reads.block].layer_output.save()
        if earlier:  # a block before the last: the last one still runs, unread by the host
            last = model.vision.layers[-1].layer_output.save()
        if reads is not None and reads.value == "tower_output":
            source = model.vision.tower_output.save()
        if row.projector_per_image:  # image i's at the projector's i-th call
            received, projected = nnsight.save([]), nnsight.save([])
            for _ in tracer.iter[0:len(images)]:
                received.append(model.projector.input.save())
                projected.append(model.projector.output.save())
        else:
            received = model.projector.input.save()
            projected = model.projector.output.save()
        features = model.vision.image_features.save()
        tracer.stop()
    if row.projector_per_image:
        received, projected = torch.cat(list(received), dim=1), torch.cat(list(projected), dim=1)
    if row.projector_item is not None:  # a projector returning its features with more (DeepStack's)
        projected = projected[row.projector_item]
    if row.projector_list:  # one tensor per image unit, concatenated by the host
        projected = torch.cat(projected)

    def as_read(value):
        taken = value[:, reads.drop_first:]
        return taken[0] if reads.unbatched else taken

    if reads is not None:
        assert torch.equal(received, as_read(source))
    if earlier:
        assert not torch.equal(received, as_read(last))
    assert projected.shape == (*row.projected.shape(2), hidden)
    flattened = projected.reshape(-1, hidden) if projected.numel() == features.numel() else None
    assert (flattened is not None and torch.equal(flattened, features.reshape(-1, hidden))) == row.features_are_projected


# -- the text model --------------------------------------------------------------------------------------------------


@COUNTS
def test_the_text_stream_passes_from_block_to_block_with_what_deepstack_adds(model, row, count):
    """``layers[k+1].input == layers[k].layer_output``, but after each DeepStack tap k, where
    ``layers[k+1].input[mask] == layers[k].layer_output[mask] + layers[k].deepstack_output``."""
    images = row.images[:count]
    with model.trace(prompt(model, images), images=images) as tracer:
        mask = model.vision.image_token_mask.save()
        outputs, added, following = nnsight.save([]), nnsight.save([]), nnsight.save([])
        for k in range(model.num_layers - 1):
            outputs.append(model.layers[k].layer_output.clone())  # a copy: 4.57's DeepStack adds to it in place
            if k < row.deepstack_taps:
                added.append(model.layers[k].deepstack_output.save())
            following.append(model.layers[k + 1].input.save())
        tracer.stop()
    assert len(added) == row.deepstack_taps
    for k in range(model.num_layers - 1):
        if k < row.deepstack_taps:
            assert added[k].shape == (int(mask.sum()), model.hidden_size)
            assert torch.equal(following[k][mask], outputs[k][mask] + added[k]), k
            assert torch.equal(following[k][~mask], outputs[k][~mask]), k
        else:
            assert torch.equal(following[k], outputs[k]), k


@COUNTS
def test_an_ablation_reaches_the_logits_and_a_clean_rerun_is_identical(model, row, count):
    images = row.images[:count]
    text = prompt(model, images)
    with model.trace(text, images=images) as tracer:
        clean_first = model.layers[0].input.save()
        clean = model.logits.save()
        tracer.stop()
    added = None
    with model.trace(text, images=images) as tracer:
        mask = model.vision.image_token_mask.save()
        model.vision.image_features[:] = 0
        if row.positions is not None:
            added = positions(model, row)
        first = model.layers[0].input.save()
        if row.cross_layers:  # what the first cross-attention block reads
            received = model.layers[row.cross_layers[0]].cross_attn.inputs[1]["cross_attention_states"].save()
        ablated = model.logits.save()
        tracer.stop()
    with model.trace(text, images=images) as tracer:
        again = model.logits.save()
        tracer.stop()
    vocab = model.config.get_text_config().vocab_size
    assert clean.shape == (*processed(model, images)["input_ids"].shape, vocab)
    if row.cross_layers:  # no token holds the features: the stream enters untouched, the cross layers read zeros
        assert torch.equal(first, clean_first) and torch.equal(received, torch.zeros_like(received))
    else:
        assert torch.equal(first[mask], torch.zeros_like(first[mask]) if added is None else added[mask])
        assert torch.equal(first[~mask], clean_first[~mask])  # the text rows untouched
    assert not torch.equal(ablated, clean)
    assert torch.equal(again, clean)


# -- sizes and support -----------------------------------------------------------------------------------------------


def test_the_sizes_are_the_towers(model, row):
    sizes, vision = row.sizes, model.vision
    assert (vision.num_layers, vision.vision_hidden_size, vision.patch_size) == (
        sizes.num_layers, sizes.vision_hidden_size, sizes.patch_size)
    if sizes.num_layers:
        assert (vision.num_heads, vision.head_dim, vision.intermediate_size) == (
            sizes.num_heads, sizes.head_dim, sizes.intermediate_size)
    else:  # no blocks: no heads, no MLP
        for size in ("num_heads", "head_dim", "intermediate_size"):
            with pytest.raises(Unavailable, match=rf"vision\.{size} is unavailable: .*{row.pattern.unavailable}"):
                getattr(vision, size)
    assert len(vision.layers) == sizes.num_layers
    if isinstance(sizes.image_size, int):
        assert vision.image_size == sizes.image_size
    else:
        with pytest.raises(Unavailable, match=rf"any resolution.*{sizes.image_size}"):
            vision.image_size


def gap(row: Row, name: str) -> tuple[int, ...] | None:
    """The text blocks lacking the value ``name`` of model.support(), from the row: by its name or its prefix."""
    for key, blocks in row.text_gaps.items():
        if name == key or (key.endswith(".") and name.startswith(key)):
            return blocks
    return None


#: An indefinite article and the word after it, in a generated text.
ARTICLE = re.compile(r"\b(a|an|A|An) ([A-Za-z0-9][\w-]*)")


def test_every_description_says_a_or_an_as_the_word_after_it_is_said(model):
    """The texts the library writes around a word it knew only when it ran (a medium, a model_type, a family's size):
    ``print(model)``, and each standard value's description, docstring and reason: "an image token", "a video
    token" (`envoys.core.wording`)."""
    texts = [repr(model)]
    for envoy in model.modules():
        if isinstance(envoy, Standard) or envoy is model:
            for prop in standard_values(type(envoy)).values():
                texts += [prop.description or "", prop.__doc__ or "", prop.reason(envoy) or ""]
    wrong = {f"{said} {word}" for text in texts for said, word in ARTICLE.findall(text)
             if article(word) != said.lower()}
    assert not wrong, sorted(wrong)


def test_support_lists_every_value_and_says_why_one_is_missing(model, row):
    tower = model.vision.support()
    assert set(TOWER_VALUES) <= set(tower), set(TOWER_VALUES) - set(tower)
    layers = set(range(row.sizes.num_layers)) - set(row.tower_mixers)
    assert all(value in tower for value in VIDEO_VALUES) == ("video" in model.family.media)  # else: support()["video"]
    for value, reason in tower.items():
        if value in VIDEO_VALUES:  # test_video_values
            assert reason is None, (value, reason)
            continue
        if row.tower_mixers and (value == "attention_output" or value.startswith("self_attn.")):
            reason = dict(reason)  # a block whose mixer is not attention says so, naming it
            for index, mixer in row.tower_mixers.items():
                assert re.search(rf"token mixer is .*{mixer}, not softmax attention", reason.pop(index)), value
            reason = reason or None
        expected = row.pattern.unavailable if value in PATTERN else row.vision_unavailable.get(value)
        if expected is None:
            assert reason is None, (value, reason)
        elif value in PATTERN and layers:  # per block, on every block
            assert set(reason) == layers and all(re.search(expected, why) for why in reason.values()), value
        else:  # on the tower, or per block
            assert all(re.search(expected, why) for why in (reason.values() if isinstance(reason, dict) else [reason]))
    assert set(model.vision.support(layer=0)) == {value for value in tower if value.startswith(BLOCK_VALUES)}
    assert set(row.vision_unavailable) <= set(tower)

    support = model.support()
    assert {value: support[f"vision.{value}"] for value in tower} == tower
    assert (model.family.quirks.forward_bug is not None) == row.forward_bug
    blocks = set(range(model.num_layers))
    assert (support.get("video", None) is None) == ("video" in model.family.media), support.get("video")
    if "video" not in model.family.media:
        assert re.search("takes no video|video is not served", support["video"])
    if "audio" in model.family.media and "audio.audio_features" in support:  # values: test_audio_values
        assert support["audio.audio_features"] is None and support["audio.audio_token_mask"] is None
    else:
        assert re.search("takes no audio|audio is not served|has no audio tower", support["audio"])
    for value, reason in support.items():
        if value.startswith(("vision.", "video", "audio")):
            continue
        if value in BUG_ROWS:
            assert row.forward_bug and bug_present(model) and "tracer.stop()" in reason, value
            continue
        lacking = gap(row, value)
        assert (reason is None) if lacking is None else (set(reason) == set(lacking) <= blocks), (value, reason)
    assert all(value in support for value in BUG_ROWS) == bug_present(model)
    for key in row.text_gaps:
        assert any(value == key or (key.endswith(".") and value.startswith(key)) for value in support), key


def test_a_text_only_load_has_no_vision_values(row, tiny_checkpoint, name):
    model = StandardizedTransformer(tiny_checkpoint(name), attn_implementation="eager")
    assert model.processor is None and model.tokenizer is not None
    assert model.vision.support() == {}
    assert not [value for value in model.support() if value.startswith("vision.")]
    for read in (lambda: model.vision.image_features, lambda: model.vision.image_token_mask,
                 lambda: model.vision.tower_output, lambda: model.vision.layers[0].layer_output,
                 lambda: model.vision.layers[0].self_attn.attention_probabilities):
        with pytest.raises(Unavailable, match=r"load it with StandardizedTransformer\(name, task='image-text-to-text'\)"):
            read()
    if not row.text_alone:  # the root's forward requires pixels: transformers refuses text alone
        with pytest.raises(TypeError, match="pixel_values"):
            with model.trace("What is in the picture ?"):
                model.logits.save()
        return
    with model.trace("What is in the picture ?") as tracer:  # the text model still runs
        logits = model.logits.save()
        tracer.stop()
    assert logits.shape[0] == 1 and logits.shape[-1] == model.config.get_text_config().vocab_size


# -- generation and the plain model ------------------------------------------------------------------------------------


@COUNTS
def test_generation_reads_the_mask_each_step_and_the_tower_at_step_zero(model, row, plain, count):
    if bug_present(model):
        pytest.skip(f"generate cannot run on this release: {model.family.quirks.forward_bug.reason()}")
    if model.family.quirks.generate_note is not None:
        return generation_apart(model, row, plain, count)
    images = row.images[:count]
    text, inputs = prompt(model, images), processed(model, images)
    options = {"max_new_tokens": STEPS, "min_new_tokens": STEPS, "do_sample": False}
    with model.generate(text, images=images, **options) as tracer:
        masks, stream, features = nnsight.save([]), nnsight.save([]), nnsight.save([])
        for step in tracer.iter[0:STEPS]:  # bounded, so that what follows the loop runs
            masks.append(model.vision.image_token_mask.save())
            if step == 0:
                stream.append(first_stream_value(model).save())
                features.append(model.vision.image_features.save())
        generated = tracer.result.save()
    assert torch.equal(generated, plain.generate(**inputs, **options))
    ids = inputs["input_ids"]
    assert [tuple(mask.shape) for mask in masks] == [tuple(ids.shape)] + [(1, 1)] * (STEPS - 1)
    assert torch.equal(masks[0], ids == model.config.image_token_id)
    assert not any(mask.any() for mask in masks[1:])
    assert stream[0].shape == (*row.stream.shape(count), row.sizes.vision_hidden_size)
    if row.cross_layers:  # what the cross-attention blocks read, no token's
        assert features[0].shape[0] == count * row.projected.per_image[0][0] and features[0].shape[-1] == model.hidden_size
    else:
        assert features[0].shape == (sum(row.image_tokens[:count]), model.hidden_size)

    # The tower and the scatter do not run again: on the first decode step the mask is served, and a read of the
    # tower's first value, or of image_features, is left waiting, served neither there nor on any later step.
    # Where the image enters through cross-attention, the text model's call that carries image_features runs on every
    # step (with the cached states, not the features): a read there is refused, saying the step.
    if row.cross_layers:
        with pytest.raises(Unavailable, match="image_features is not computed on step 1"):
            with model.generate(text, images=images, **options) as tracer:
                for _ in tracer.iter[1:STEPS]:
                    model.vision.image_features.save()
    for value in (lambda: first_stream_value(model), lambda: model.vision.image_features)[:1 if row.cross_layers else 2]:
        with model.generate(text, images=images, **options) as tracer:
            seen, later = nnsight.save([]), nnsight.save([])
            for _ in tracer.iter[1:STEPS]:
                seen.append(model.vision.image_token_mask.save())
                later.append(value().save())
        assert len(seen) == 1 and later == []


def first_stream_value(model):
    """The tower's first value over its stream: block 0's layer_output, or tower_output on a vision side with no
    blocks."""
    return model.vision.layers[0].layer_output if len(model.vision.layers) else model.vision.tower_output


def generation_apart(model, row, plain, count):
    """A family whose class generates in its own way, without running the root's forward (its ``generate_note``):
    the tower's and the projector's values on step 0, the logits on every step, the plain model's tokens; the
    mask and image_features, read at the root's forward, Unavailable saying why."""
    images = row.images[:count]
    text, inputs = prompt(model, images), processed(model, images)
    options = {"max_new_tokens": STEPS, "min_new_tokens": STEPS, "do_sample": False}
    with model.generate(text, images=images, **options) as tracer:
        logits, stream, projected = nnsight.save([]), nnsight.save([]), nnsight.save([])
        for step in tracer.iter[0:STEPS]:
            if step == 0:
                stream.append(model.vision.layers[0].layer_output.save())
                projected.append(model.projector.output.save())
            logits.append(model.logits.save())
        generated = tracer.result.save()
    assert torch.equal(generated, plain.generate(**inputs, **options))
    assert len(logits) == STEPS and all(step.shape[-1] == model.vocab_size for step in logits)
    assert stream[0].shape == (*row.stream.shape(count), row.sizes.vision_hidden_size)
    assert projected[0].shape == (*row.projected.shape(count), model.hidden_size)
    note = re.escape(model.family.quirks.generate_note)
    for value in (lambda: model.vision.image_token_mask, lambda: model.vision.image_features):
        with pytest.raises(Unavailable, match=note):
            with model.generate(text, images=images, **options):
                value().save()
    with model.generate(text, images=images, **options) as tracer:  # the tower does not run again
        seen, later = nnsight.save([]), nnsight.save([])
        for _ in tracer.iter[1:STEPS]:
            seen.append(model.logits.save())
            later.append(model.vision.layers[0].layer_output.save())
    assert len(seen) == 1 and later == []


def logits_of(module, logits_at: str, inputs) -> dict:
    """Run ``module`` on ``inputs``: the logits at the module whose output carries them, and the error, if any."""
    seen: dict = {}
    carrier = module.get_submodule(logits_at) if logits_at else module
    handle = carrier.register_forward_hook(lambda _module, _args, output: seen.update(logits=output.logits))
    try:
        with torch.no_grad():
            module(**inputs)
    except Exception as error:  # a known bug of the root's forward: it must fail alike on both
        seen["error"] = type(error)
    finally:
        handle.remove()
    return seen


def test_outputs_outside_a_trace_are_the_plain_models(model, row, plain):
    inputs = processed(model, row.images)
    ours, theirs = (logits_of(module, model.family.quirks.logits_at, inputs) for module in (model._module, plain))
    assert ours.get("error") is theirs.get("error")
    assert ("error" in ours) == bug_present(model)
    assert torch.equal(ours["logits"], theirs["logits"])


# -- several invokes in one trace ------------------------------------------------------------------------------------

def image_reads(model, row) -> dict:
    """Inside a trace or an invoke, in the forward's order and saved: the mask, every tower block's layer_output,
    tower_output, image_features, the position embeddings the text model adds (its row's ``positions``), the text
    model's first input and the logits."""
    reads = {
        "mask": model.vision.image_token_mask.save(),
        "blocks": [block.layer_output.save() for block in model.vision.layers],
        "tower": model.vision.tower_output.save(),
        "features": model.vision.image_features.save(),
        "added": positions(model, row) if row.positions is not None else None,
        "first": model.layers[0].input.save(),
        "logits": model.logits.save(),
    }
    return nnsight.save(reads)


def read_alone(model, row, images) -> dict:
    """`image_reads` of one prompt holding ``images``, traced alone."""
    with model.trace(prompt(model, images), images=images) as tracer:
        reads = image_reads(model, row)
        tracer.stop()
    return reads


def assert_as_alone(model, row, together: dict, alone: dict) -> None:
    """An invoke's reads are its prompt's alone: the mask exactly (left-padded to the batch); the tower's values,
    image_features and the logits at its own tokens up to the rounding of products over a batch of another shape
    (`rounding`; the logits unless the family says why they differ); and the scatter's equality holds in the invoke,
    exactly."""
    mask = together["mask"]
    pad = mask.shape[1] - alone["mask"].shape[1]
    assert pad >= 0 and not mask[:, :pad].any()
    assert torch.equal(mask[:, pad:], alone["mask"])
    assert len(together["blocks"]) == len(alone["blocks"]) == model.vision.num_layers
    for got, expected in zip(together["blocks"], alone["blocks"]):
        assert_batch_close(got, expected)
    assert_batch_close(together["tower"], alone["tower"])
    assert_batch_close(together["features"], alone["features"])
    scattered = together["features"] * row.embedding_multiplier
    if together["added"] is not None:
        scattered = scattered + together["added"][mask]
    assert torch.equal(together["first"][mask], scattered)
    if model.family.batching.invokes_differ is None:
        assert_batch_close(together["logits"][:, pad:], alone["logits"])


def refuses_image_invokes(model, row: Row) -> bool:
    """Where the family's invokes cannot share a batch when one carries images (``Batching.image_invokes``): two
    invokes are refused, saying why, before the model runs; False elsewhere."""
    reason = model.family.batching.image_invokes
    if reason is None:
        return False
    images = row.images[:1]
    beside = [(prompt(model, images), {"images": images}), (chat_prompt(model.processor, 0, "What is in it?"), {})]
    for text, keywords in beside:  # another invoke with images, or a text-only one
        with pytest.raises(NotImplementedError, match=re.escape(reason)):
            with model.trace() as tracer:
                with tracer.invoke(prompt(model, images), images=images):
                    model.logits.save()
                with tracer.invoke(text, **keywords):
                    model.logits.save()
    return True


#: An image of the first image's size that no row's images are (seeds 0 and 1 are `Row.images`).
def another_image(seed: int = 7):
    return noise_image(32, 32, seed=seed)


@pytest.mark.batch_shapes
def test_two_invokes_with_their_own_images_each_see_their_own_part_of_every_value(model, row):
    """Two images of two sizes in one invoke and one in the next: each invoke's values are its prompt's alone, each
    in its own shape (its tiles, its patches, its image tokens)."""
    if refuses_image_invokes(model, row):
        return
    first, second = row.images, [another_image()]
    alone = [read_alone(model, row, images) for images in (first, second)]
    with model.trace() as tracer:
        with tracer.invoke(prompt(model, first), images=first):
            one = image_reads(model, row)
        with tracer.invoke(prompt(model, second), images=second):
            two = image_reads(model, row)
            tracer.stop()
    assert_as_alone(model, row, one, alone[0])
    assert_as_alone(model, row, two, alone[1])
    assert one["features"].shape[0] == sum(row.image_tokens) and two["features"].shape[0] == row.image_tokens[0]


@pytest.mark.batch_shapes
def test_a_text_only_invoke_beside_an_image_invoke(model, row):
    """The image invoke's values are its prompt's alone; the text-only invoke's mask is all false, its logits its
    prompt's alone, and a tower value read there is unavailable, saying no image reached that invoke."""
    if refuses_image_invokes(model, row):
        return
    images = row.images[:1]
    text = chat_prompt(model.processor, 0, "What is in the picture?")
    try:
        model.processor(text=[text], return_tensors="pt")
    except ValueError as error:  # PaliGemma's, GOT-OCR2's, InstructBLIP's: a prompt always comes with its image
        pytest.skip(f"the processor takes no prompt without an image: {error}")
    if model.family.batching.text_invokes is not None:  # refused, saying why, before the model runs
        with pytest.raises(NotImplementedError, match=re.escape(model.family.batching.text_invokes)):
            with model.trace() as tracer:
                with tracer.invoke(prompt(model, images), images=images):
                    model.logits.save()
                with tracer.invoke(text):
                    model.logits.save()
        return
    alone = read_alone(model, row, images)
    if row.text_alone:
        with model.trace(text) as tracer:
            text_alone = model.logits.save()
            tracer.stop()
    refused = None
    with model.trace() as tracer:
        with tracer.invoke(prompt(model, images), images=images):
            one = image_reads(model, row)
        with tracer.invoke(text):
            mask = model.vision.image_token_mask.save()
            try:
                model.vision.tower_output.save()
            except Unavailable as error:
                refused = nnsight.save(str(error))
            logits = model.logits.save()
            tracer.stop()
    assert_as_alone(model, row, one, alone)
    assert mask.shape[0] == logits.shape[0] and not mask.any()
    assert refused is not None and "no image reached this invoke" in refused
    if row.text_alone and model.family.batching.invokes_differ is None:
        pad = logits.shape[1] - text_alone.shape[1]
        assert_batch_close(logits[:, pad:], text_alone)


@pytest.mark.batch_shapes
def test_the_patching_idiom_writes_the_clean_invokes_features_into_the_corrupted_one(model, row):
    """nnsight's patching idiom, clean and corrupted prompts in two invokes of one trace: the clean invoke's
    image_features (and, on DeepStack, what each tapped block adds) written into the corrupted invoke make its logits
    the clean invoke's. A value carried to a later invoke at the same location waits at a barrier, as on a text model."""
    if refuses_image_invokes(model, row):
        return
    clean_images, corrupted_images = [another_image(11)], [another_image(12)]
    text = prompt(model, clean_images)
    with model.trace() as tracer:
        barriers = [tracer.barrier(2) for _ in range(1 + row.deepstack_taps)]
        with tracer.invoke(text, images=clean_images):
            clean = model.vision.image_features.save()
            barriers[0]()
            added = nnsight.save([])
            for k in range(row.deepstack_taps):
                added.append(model.layers[k].deepstack_output.save())
                barriers[1 + k]()
            clean_logits = model.logits.save()
        with tracer.invoke(text, images=corrupted_images):
            corrupted = model.vision.image_features.clone().save()
            barriers[0]()
            model.vision.image_features[:] = clean
            for k in range(row.deepstack_taps):
                barriers[1 + k]()
                model.layers[k].deepstack_output[:] = added[k]
            patched = model.logits.save()
            tracer.stop()
    assert not torch.equal(clean, corrupted)
    if model.family.batching.invokes_differ is None:  # two rows of one batch, then a batch of one
        assert_batch_close(patched, clean_logits)
        assert_batch_close(patched, read_alone(model, row, clean_images)["logits"])
    else:  # the family's own forward makes the two rows differ beyond the patch (its reason); the patch still lands
        assert not torch.equal(patched, read_alone(model, row, corrupted_images)["logits"])


@pytest.mark.batch_shapes
def test_a_write_in_one_invoke_leaves_the_other_invokes_logits_as_they_are(model, row):
    """Zeroing the first invoke's first tower value and image_features changes its logits, and leaves the second
    invoke's exactly as the same batch gives them unwritten (and as its prompt alone gives them)."""
    if refuses_image_invokes(model, row):
        return
    first, second = row.images[:1], [another_image()]

    def run(write: bool):
        with model.trace() as tracer:
            with tracer.invoke(prompt(model, first), images=first):
                if write:
                    first_stream_value(model)[:] = 0
                    model.vision.image_features[:] = 0
                one = model.logits.save()
            with tracer.invoke(prompt(model, second), images=second):
                two = model.logits.save()
                tracer.stop()
        return one, two

    (one, two), (written_one, written_two) = run(False), run(True)
    assert not torch.equal(written_one, one)
    # the same batch shape, but a mixture of experts runs both invokes' tokens through one expert call
    assert_batch_close(written_two, two)
    if model.family.batching.invokes_differ is None:
        alone = read_alone(model, row, second)["logits"]
        assert_batch_close(two[:, two.shape[1] - alone.shape[1]:], alone)


def test_a_saved_value_written_into_an_invoke_of_another_shape_is_refused_with_its_shape(model, row):
    if refuses_image_invokes(model, row):
        return
    two, one = row.images, row.images[:1]
    expected = f"takes a tensor of shape ({row.image_tokens[0]}, {model.hidden_size})"
    with pytest.raises(ValueError, match=re.escape(expected)):
        with model.trace() as tracer:
            barrier = tracer.barrier(2)
            with tracer.invoke(prompt(model, two), images=two):
                features = model.vision.image_features.save()
                barrier()
            with tracer.invoke(prompt(model, one), images=one):
                barrier()
                model.vision.image_features = features
                tracer.stop()
