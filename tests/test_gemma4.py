"""StandardizedTransformer on a tiny Gemma 4 checkpoint: the padded patch axis, the pooler, sandwich-normed blocks.

Every expected number comes from outside the code under test: the stock
processor's outputs (``image_position_ids``, ``pixel_values``), the modules'
weights and configs, or a recomputation. The spec's contracts (the scatter and
the mask, the 280-row stream and block identity, the pattern's rows, what the
projector gives, ablation, sizes, support, the text-only load, generation,
outputs against the plain model) run on this checkpoint in
test_vision_contracts.py; this file holds what is particular to Gemma 4.
"""

from __future__ import annotations

import math

import nnsight
import pytest

pytest.importorskip("transformers.models.gemma4", reason="target absent: this transformers release has no gemma4")
import torch
import torch.nn.functional as F
from family_inputs import prompt
from logit_caps import assert_capped_as_the_wrapper
from nnsight.intervention.interleaver import OutOfOrderError
from packed_grids import GridSuite, nearest
from rounding import assert_batch_close
from transformers import Gemma4ForConditionalGeneration

from envoys import StandardizedTransformer, Unavailable
from envoys.testing import build, chat_prompt, noise_audio, noise_image, noise_video

ONE = [noise_image(32, 32, seed=0)]
TWO = [noise_image(32, 32, seed=0), noise_image(64, 48, seed=1)]  # 32x32, and 64 wide by 48 high


CHECKPOINT = "gemma4"


@pytest.fixture(scope="module")
def without_per_layer_inputs(tmp_path_factory):
    """The tiny checkpoint with per-layer inputs off (``hidden_size_per_layer_input=0``), as Gemma 4's larger checkpoints."""
    reference, processor = build("gemma4")
    config = reference.config
    config.text_config.hidden_size_per_layer_input = 0
    # as on those checkpoints, no KV sharing either: transformers 5.24.0's text model slices the per-layer
    # inputs before the first kv-shared block without checking they exist, so KV sharing without them fails
    config.text_config.num_kv_shared_layers = 0
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        plain = Gemma4ForConditionalGeneration(config).eval()
    path = tmp_path_factory.mktemp("gemma4-no-ple")
    plain.save_pretrained(path)
    processor.save_pretrained(path)
    return StandardizedTransformer(path, task="image-text-to-text", device="cpu", attn_implementation="eager")


def processed(model, images) -> dict:
    return model.processor(text=[prompt(model, images)], images=images, return_tensors="pt")


def real_rows(model, images) -> torch.Tensor:
    """The processor's own account of which patch rows are real: ``image_position_ids`` other than (-1, -1)."""
    positions = processed(model, images)["image_position_ids"]
    return (positions[..., 0] >= 0) & (positions[..., 1] >= 0)


def soft_tokens(model, images) -> list[int]:
    """Image tokens per image: real patches over the pooling area (the processor's kernel size)."""
    area = model.processor.image_processor.pooling_kernel_size ** 2
    return [int(n) // area for n in real_rows(model, images).sum(-1)]


def fixed_rows(model) -> int:
    image_processor = model.processor.image_processor
    return image_processor.max_soft_tokens * image_processor.pooling_kernel_size ** 2


# -- loading ---------------------------------------------------------------------------------------


def test_loads_with_its_stock_processor_beside_its_audio_tower(model):
    native = model._module.model
    assert type(model.processor).__name__ == "Gemma4Processor"
    assert type(model.processor.image_processor).__name__ == "Gemma4ImageProcessor"
    assert type(native.audio_tower).__name__ == "Gemma4AudioModel"  # the builder's audio tower, beside the vision tower
    tokenizer = model.processor.tokenizer
    for name in ("boa_token", "eoa_token", "audio_token", "boi_token", "eoi_token"):
        assert getattr(tokenizer, name) in tokenizer.get_vocab(), name


# -- the scatter -----------------------------------------------------------------------------------


@pytest.mark.parametrize("images", [ONE, TWO], ids=["one-image", "two-images"])
def test_patch_mask_is_the_processors_real_rows_and_the_projector_receives_the_real_cells(model, images):
    rows = fixed_rows(model)
    with model.trace(prompt(model, images), images=images):
        patch_mask = model.vision.patch_mask.save()
        received = model.projector.input.save()
    tokens = sum(soft_tokens(model, images))
    assert received.shape == (tokens, model.vision.vision_hidden_size)
    assert torch.equal(patch_mask, real_rows(model, images))
    for image in range(len(images)):  # each image's real rows come first, then padding
        count = int(patch_mask[image].sum())
        assert 0 < count < rows and bool(patch_mask[image, :count].all()) and not patch_mask[image, count:].any()


def test_the_scatter_puts_features_over_pad_embeddings_with_an_expanded_mask(model):
    pad_id = model.config.text_config.pad_token_id
    with model.trace(prompt(model, ONE), images=ONE):
        mask = model.vision.image_token_mask.save()
        ids = model.embed_tokens.input.save()
        embedded = model.embed_tokens.output.save()
        arguments, _ = model.model.source.inputs_embeds_masked_scatter_0.inputs  # nnsight's own name for the call
        expanded, flat = arguments[0].save(), arguments[1].save()
        features = model.vision.image_features.save()
        first = model.layers[0].input.save()
    pad = model.embed_tokens._module(torch.tensor([pad_id]))[0]
    assert torch.equal(ids[mask], torch.full((int(mask.sum()),), pad_id))  # image tokens are embedded as the pad
    assert torch.equal(embedded[mask], pad.expand(int(mask.sum()), -1))
    assert torch.equal(expanded, mask[..., None].expand_as(embedded))  # [batch, seq, hidden_size]
    assert torch.equal(flat, features) and torch.equal(first[~mask], embedded[~mask])


# -- the padded tower ------------------------------------------------------------------------------


def test_the_pattern_is_zero_on_padded_keys_and_sums_to_one_over_real_ones(model):
    attention = [layer.self_attn for layer in model.vision.layers]
    with model.trace(prompt(model, TWO), images=TWO):
        values = attention[0].attention_values.save()
        scores = attention[0].attention_scores.save()
        patterns = nnsight.save([attention[0].attention_probabilities])
        heads = attention[0].attention_head_outputs.save()
        patterns.append(attention[1].attention_probabilities.save())
    real = real_rows(model, TWO)
    assert torch.equal(scores.softmax(-1), patterns[0])
    assert torch.equal(patterns[0] @ values, heads.transpose(1, 2))
    for pattern in patterns:
        for image in range(len(TWO)):
            keep = real[image]
            from_real = pattern[image][:, keep]  # [heads, real queries, keys]
            assert torch.equal(from_real[..., ~keep], torch.zeros_like(from_real[..., ~keep]))
            assert bool((from_real[..., keep] > 0).all())  # not causal: every real patch sees every real patch
            torch.testing.assert_close(from_real[..., keep].sum(-1), torch.ones(from_real.shape[:2]), rtol=0, atol=1e-6)


def test_padding_never_reaches_the_text_model(model):
    text = prompt(model, TWO)
    with model.trace(text, images=TWO):
        real = model.vision.patch_mask.save()
        clean_tower = model.vision.tower_output.save()
        clean_features = model.vision.image_features.save()
        clean = model.logits.save()
    with model.trace(text, images=TWO):
        patches = model.vision.patch_embeddings
        noise = torch.randn(patches.shape, generator=torch.Generator().manual_seed(0)) * 100
        model.vision.patch_embeddings = torch.where(real[..., None], patches, noise)
        tower = model.vision.tower_output.save()
        features = model.vision.image_features.save()
        logits = model.logits.save()
    assert not torch.equal(tower[~real], clean_tower[~real])  # the padded rows did change
    assert torch.equal(tower[real], clean_tower[real])
    assert torch.equal(features, clean_features) and torch.equal(logits, clean)


@pytest.mark.batch_shapes
def test_patch_embeddings_are_the_linear_projection_before_positions(model):
    inputs = processed(model, TWO)
    embedder = model._module.model.vision_tower.patch_embedder
    with model.trace(prompt(model, TWO), images=TWO):
        patches = model.vision.patch_embeddings.save()
        embedded = model.vision.patch_embed.output.save()
        first = model.vision.layers[0].layer_input.save()
    pixels, positions = inputs["pixel_values"], inputs["image_position_ids"]
    padded = (positions == -1).all(-1)
    assert torch.equal(patches, torch.nn.functional.linear(2 * (pixels - 0.5), embedder.input_proj.weight))
    table = embedder.position_embedding_table
    where = positions.clamp(min=0)
    expected_positions = (table[0][where[..., 0]] + table[1][where[..., 1]]).masked_fill(padded[..., None], 0.0)
    assert torch.equal(embedded, patches + expected_positions)
    assert torch.equal(first, embedded)
    rows = patches[padded]  # the processor's zero patch, rescaled to -1 everywhere: one row, repeated
    assert_batch_close(rows, rows[:1].expand_as(rows))  # equal rows at other places of one product
    minus_ones = -torch.ones(pixels.shape[-1])
    torch.testing.assert_close(rows[0], torch.nn.functional.linear(minus_ones, embedder.input_proj.weight))


def test_what_the_projector_receives_is_the_pooled_real_patches(model):
    inputs = processed(model, TWO)
    with model.trace(prompt(model, TWO), images=TWO):
        tower = model.vision.tower_output.save()
        pooler = model.vision.pooler.output
        pooled, kept = pooler[0].save(), pooler[1].save()
        received = model.projector.input.save()
    assert torch.equal(received, pooled[kept])
    k, width = model.vision.pooling_kernel_size, model.vision.vision_hidden_size
    expected = []
    for image, positions in enumerate(inputs["image_position_ids"]):
        real = (positions >= 0).all(-1)
        columns, lines = int(positions[real, 0].max()) + 1, int(positions[real, 1].max()) + 1
        grid = tower[image][real].reshape(lines // k, k, columns // k, k, width)  # raster order: x fastest
        expected.append(grid.mean(dim=(1, 3)).reshape(-1, width) * math.sqrt(width))
    torch.testing.assert_close(received, torch.cat(expected), rtol=1e-5, atol=1e-5)


def test_patch_grids_put_each_real_row_at_its_patch(model):
    inputs = processed(model, TWO)
    with model.trace(prompt(model, TWO), images=TWO):
        tower = model.vision.tower_output.save()
    grids = [model.vision.patch_grid(tower, image=image) for image in range(2)]
    patch = model.processor.image_processor.patch_size
    for image, grid, positions in zip(range(2), grids, inputs["image_position_ids"]):
        real = int((positions >= 0).all(-1).sum())
        assert grid.shape[0] * grid.shape[1] == real and grid.shape[2:] == tower.shape[2:]
        for row in (0, 1, real // 2, real - 1):
            x, y = positions[row].tolist()
            assert torch.equal(grid[y, x], tower[image, row])
    assert [tuple(g.shape[:2]) for g in grids] == [(64 // patch, 64 // patch), (56 // patch, 72 // patch)]


def test_tower_attention_output_is_after_its_sandwich_norm(model):
    block = model.vision.layers[1]
    with model.trace(prompt(model, TWO), images=TWO):
        raw_attention = block.self_attn.output[0].save()
        attention = block.attention_output.save()
    assert torch.equal(attention, block.attention_output_norm._module(raw_attention))


# -- the text model --------------------------------------------------------------------------------


def test_text_blocks_add_up_then_scale_by_their_layer_scalar(model):
    blocks = list(model.layers)
    with model.trace(prompt(model, ONE), images=ONE):
        per_layer = blocks[0].per_layer_input.save()
        values = nnsight.save([[b.layer_input, b.attention_output, b.mlp_output, b.per_layer_output, b.layer_output]
                               for b in blocks])
    for block, (layer_input, attention, mlp, per_layer_output, output) in zip(blocks, values):
        scalar = block._module.layer_scalar
        assert float(scalar) != 1.0
        assert torch.equal((layer_input + attention + mlp + per_layer_output) * scalar, output)
    config = model.config.text_config
    assert per_layer.shape == (*values[0][0].shape[:2], config.hidden_size_per_layer_input)


def test_kv_shared_blocks_attend_with_the_keys_and_values_of_their_producer(model):
    config = model.config.text_config
    first_shared = config.num_hidden_layers - config.num_kv_shared_layers
    with model.trace(prompt(model, ONE), images=ONE):
        keys, values = nnsight.save([]), nnsight.save([])
        for index, layer in enumerate(model.layers):
            keys.append(layer.self_attn.attention_keys.save())
            values.append(layer.self_attn.attention_values.save())
            if index == 0:
                probabilities = layer.self_attn.attention_probabilities.save()
    for index in range(first_shared, config.num_hidden_layers):
        kind = config.layer_types[index]
        producer = max(i for i in range(first_shared) if config.layer_types[i] == kind)
        assert torch.equal(keys[index], keys[producer]) and torch.equal(values[index], values[producer])
        assert not hasattr(model.layers[index].self_attn._module, "k_proj")
    above = torch.ones(probabilities.shape[-2:], dtype=torch.bool).triu(1)
    assert torch.equal(probabilities[..., above], torch.zeros_like(probabilities[..., above]))  # causal text


def test_without_per_layer_inputs_the_branch_is_unavailable_and_the_block_adds_up(without_per_layer_inputs):
    model = without_per_layer_inputs
    block = model.layers[0]
    for read in (lambda: block.per_layer_output, lambda: block.per_layer_input):
        with pytest.raises(Unavailable, match=r"no per-layer inputs .*hidden_size_per_layer_input is 0"):
            read()
    assert "hidden_size_per_layer_input is 0" in model.support()["per_layer_output"][0]
    with model.trace(prompt(model, ONE), images=ONE):
        stream = nnsight.save([block.layer_input, block.attention_output, block.mlp_output, block.layer_output])
    layer_input, attention, mlp, output = stream
    assert torch.equal((layer_input + attention + mlp) * block._module.layer_scalar, output)


# -- edits -----------------------------------------------------------------------------------------


def test_a_write_to_the_tower_pattern_reaches_the_logits_and_the_next_clean_run_is_identical(model):
    text = prompt(model, ONE)
    with model.trace(text, images=ONE):
        clean = model.logits.save()
    with model.trace(text, images=ONE):
        model.vision.layers[0].self_attn.attention_probabilities[:] = 0
        silenced = model.logits.save()
    assert not torch.equal(silenced, clean)
    with model.trace(text, images=ONE):
        again = model.logits.save()
    assert torch.equal(again, clean)


def test_patch_mask_is_read_only_and_read_first(model):
    with pytest.raises(AttributeError, match="vision.patch_mask is read-only"):
        with model.trace(prompt(model, ONE), images=ONE):
            model.vision.patch_mask = torch.zeros(1, fixed_rows(model), dtype=torch.bool)
    with pytest.raises(OutOfOrderError, match=r"vision\.patch_mask"):
        with model.trace(prompt(model, ONE), images=ONE):
            model.vision.tower_output.save()
            model.vision.patch_mask.save()


# -- sizes and what is unavailable -----------------------------------------------------------------


def test_sizes_of_the_padded_tower(model):
    vision, config = model.vision, model.config.vision_config
    assert vision.pooling_kernel_size == model.processor.image_processor.pooling_kernel_size == config.pooling_kernel_size
    assert vision.patch_rows == fixed_rows(model) == processed(model, ONE)["pixel_values"].shape[1]
    with pytest.raises(Unavailable, match=r"any resolution.*patch budget.*image_position_ids"):
        vision.image_size


def test_sdpa_says_why_the_pattern_is_unavailable(tiny_checkpoint):
    # per sub-model: Gemma 4's audio tower has no SDPA path, so a plain "sdpa" (every sub-model) refuses to load
    attention = {"": "sdpa", "text_config": "sdpa", "vision_config": "sdpa", "audio_config": "eager"}
    model = StandardizedTransformer(tiny_checkpoint("gemma4"), task="image-text-to-text", attn_implementation=attention)
    rows = model.vision.support(layer=0)
    assert "attn_implementation='eager'" in rows["self_attn.attention_probabilities"]
    assert rows["self_attn.attention_keys"] is None
    with pytest.raises(Unavailable, match=r"vision\.layers\[0\]\.self_attn\.attention_probabilities is unavailable"):
        model.vision.layers[0].self_attn.attention_probabilities


def test_a_text_only_load_has_no_patch_rows_or_mask(tiny_checkpoint):
    model = StandardizedTransformer(tiny_checkpoint("gemma4"))
    with pytest.raises(Unavailable, match=r"patch_rows is the processor's: .*task='image-text-to-text'"):
        model.vision.patch_rows
    with pytest.raises(Unavailable, match=r"task='image-text-to-text'"):
        model.vision.patch_mask


def test_docstrings_say_how_padding_shows(model):
    vision, block = type(model.vision), type(model.vision.layers[0])
    attention = type(model.vision.layers[0].self_attn)
    for value in (vision.patch_embeddings, vision.tower_output, block.layer_input, block.attention_output,
                  block.mlp_output, block.layer_output):
        assert "image_position_ids" in value.__doc__ and "padding" in value.__doc__, value.name
    for value in (attention.attention_keys, attention.attention_probabilities):
        assert "padded keys are masked" in value.__doc__, value.name


# -- generation ------------------------------------------------------------------------------------


def test_generation_s_kv_shared_blocks_see_the_end_of_the_last_unshared_blocks_output(model):
    text = prompt(model, ONE)
    steps = 3
    config = model.config.text_config
    first_shared = config.num_hidden_layers - config.num_kv_shared_layers
    with model.generate(text, images=ONE, max_new_tokens=steps, min_new_tokens=steps, do_sample=False) as tracer:
        shared = nnsight.save([])
        for _ in tracer.iter[0:1]:  # the prompt's step
            unshared = model.layers[first_shared - 1].layer_output.save()
            shared.append(model.layers[first_shared].layer_input.save())
    prompt_length = processed(model, ONE)["input_ids"].shape[1]
    # where generate keeps one logit (transformers 5.24), the kv-shared blocks see the prompt's last position only;
    # before, every position: either way the end of what the last unshared block returns
    seen = shared[0].shape[1]
    assert unshared.shape[1] == prompt_length and seen in (1, prompt_length)
    assert torch.equal(shared[0], unshared[:, -seen:])


# -- video and audio, at nnsight's own sites ---------------------------------------------------------


VIDEO = [noise_video(4, 32, 32)]
AUDIO = [noise_audio(1.0)]
#: The host's scatters after the images' (``_0``): the videos' (``_1``), then the audio's (``_2``).
SITES = {"videos": "inputs_embeds_masked_scatter_1", "audio": "inputs_embeds_masked_scatter_2"}


@pytest.mark.parametrize("media", [{"videos": VIDEO}, {"audio": AUDIO}, {"images": ONE, "videos": VIDEO, "audio": AUDIO}],
                         ids=["video", "audio", "image-video-audio"])
def test_videos_and_audio_are_scattered_at_their_own_tokens(model, media):
    """The host's second scatter writes the video frames' features at ``video_token_id``, its third the audio's at
    ``audio_token_id``: what the first text block receives there, read at nnsight's own ``.source`` sites."""
    text = chat_prompt(model.processor, len(media.get("images", [])), "Describe.",
                       videos=len(media.get("videos", [])), audio=len(media.get("audio", [])))
    kinds = [kind for kind in SITES if kind in media]  # in forward order
    with model.trace(text, **media):
        scattered = nnsight.save([])
        for kind in kinds:
            scattered.append(getattr(model.model.source, SITES[kind]).inputs.save())
        layer_input = model.layers[0].input.save()
    ids = model.processor(text=[text], return_tensors="pt", **media)["input_ids"]
    expected = {
        # each of the video processor's num_frames sampled frames is what a 32x32 image is (64 tokens)
        "videos": (model.config.video_token_id, model.processor.video_processor.num_frames * soft_tokens(model, ONE)[0]),
        # a second of audio at the processor's audio_ms_per_token (40 ms a token)
        "audio": (model.config.audio_token_id, math.ceil(1000 / model.processor.audio_ms_per_token)),
    }
    assert len(scattered) == len(kinds)
    for kind, (args, _) in zip(kinds, scattered):
        token, count = expected[kind]
        mask = ids == token
        assert int(mask.sum()) == count
        assert torch.equal(layer_input[mask], args[1].reshape(-1, model.config.text_config.hidden_size))


# -- the grids, on patch-coloured images (packed_grids.py) ---------------------------------------------


class TestGrids(GridSuite):
    """Gemma 4: the padded patch axis, whose padded rows the grids drop, and the pooler's soft tokens."""

    checkpoint = "gemma4"
    sizes = ((64, 64), (56, 72))

    def test_gemma4_patch_grid_drops_the_padded_rows(self, case):
        """Each real row's patch is found by its colour; the padded rows (zero patches) are in no cell."""
        model = case.model
        pixels = case.inputs["pixel_values"]
        rows = case.patch_rows(pixels.reshape(-1, pixels.shape[-1]))
        proj = model.vision.patch_embed.input_proj._module
        by_hand = F.linear(2 * (pixels - 0.5), proj.weight, proj.bias).reshape(-1, proj.out_features)
        with case.trace():
            embeddings = model.vision.patch_embeddings.save()
            tower = model.vision.tower_output.save()
        assert torch.equal(embeddings.reshape(by_hand.shape), by_hand)
        for image, where in enumerate(rows):
            assert torch.equal(model.vision.patch_grid(embeddings, image=image), by_hand[where])
            assert torch.equal(model.vision.patch_grid(tower, image=image), tower.reshape(-1, tower.shape[-1])[where])
            # a value over this image's rows only: its padded rows are dropped the same
            own = tower[image]
            assert torch.equal(model.vision.patch_grid(own, image=image), model.vision.patch_grid(tower, image=image))
        assert sum(where.numel() for where in rows) < pixels.shape[0] * pixels.shape[1]  # there is padding to drop

    def test_gemma4_token_grid_puts_each_soft_token_where_its_pooled_cell_is(self, case):
        """Soft token (a, b) is the mean of the real patches (k a .. k a + k - 1, k b .. k b + k - 1) of the last
        block's stream, times sqrt(width) (the tiny tower does not standardise)."""
        model = case.model
        kernel = model.config.vision_config.pooling_kernel_size
        with case.trace():
            tower = model.vision.tower_output.save()
            pooled = model.projector.input.save()
            features = model.vision.image_features.save()
        assert not model.config.vision_config.standardize
        assert int((case.inputs["input_ids"] == model.config.image_token_id).sum()) == features.shape[0]
        width = tower.shape[-1]
        for image, (h, w) in enumerate(case.shapes):
            patches = model.vision.patch_grid(tower, image=image)
            by_hand = patches.reshape(h // kernel, kernel, w // kernel, kernel, width).mean(dim=(1, 3)) * math.sqrt(width)
            grid = model.vision.token_grid(pooled, image=image)
            assert grid.shape[:2] == (h // kernel, w // kernel)
            assert torch.equal(grid, pooled[nearest(pooled, by_hand)])
            assert model.vision.token_grid(features, image=image).shape[:2] == (h // kernel, w // kernel)

    def test_gemma4_grids_round_trip_leaving_the_padding(self, case):
        vision = case.model.vision
        with case.trace():
            tower = vision.tower_output.save()
            features = vision.image_features.save()
        for image in range(2):
            grid = vision.patch_grid(tower, image=image)
            assert torch.equal(vision.place_patch_grid(grid, into=tower.clone(), image=image), tower)
            emptied = vision.place_patch_grid(torch.zeros_like(grid), into=tower.clone(), image=image)
            changed = (emptied != tower).any(dim=-1)
            assert int(changed.sum()) == grid.shape[0] * grid.shape[1] and bool(changed[image].any())
            assert not bool(changed[1 - image].any())
            tokens = vision.token_grid(features, image=image)
            assert torch.equal(vision.place_token_grid(tokens, into=features.clone(), image=image), features)


def test_project_on_vocab_squashes_the_logits_where_the_model_does(model):
    """Gemma 4's wrapper applies final_logit_softcapping after its head."""
    assert_capped_as_the_wrapper(model, capped=True)
