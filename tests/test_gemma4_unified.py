"""StandardizedTransformer on a tiny Gemma 4 Unified checkpoint: no tower blocks, a vision embedder, Gemma 4's text.

Every expected number comes from outside the code under test: the stock
processor's outputs (``image_position_ids``, ``pixel_values``), the modules'
weights and configs, or a recomputation. The spec's contracts (the scatter and
the mask, the 70-row stream, the projector's output, ablation, sizes, support,
the text-only load, generation, outputs against the plain model) run on this
checkpoint in test_vision_contracts.py; this file holds what is particular to
Gemma 4 Unified: what ``model.vision`` is when there are no blocks, the
embedder's values recomputed, the projector inside it, the padding dropped
before the scatter, and the image tokens attending both ways on sliding blocks.
"""

from __future__ import annotations

import nnsight
import pytest

pytest.importorskip("transformers.models.gemma4_unified", reason="target absent: this transformers release has no gemma4_unified")
import torch
from family_inputs import prompt
from nnsight.intervention.interleaver import OutOfOrderError

from envoys import StandardizedTransformer, Unavailable
from envoys.testing import noise_image

ONE = [noise_image(32, 32, seed=0)]
TWO = [noise_image(32, 32, seed=0), noise_image(64, 48, seed=1)]  # 32x32, and 64 wide by 48 high
NO_BLOCKS = r"Gemma4UnifiedVisionEmbedder has no blocks \(vision\.num_layers is 0\): model\.vision is Gemma 4 Unified's"


CHECKPOINT = "gemma4_unified"


def processed(model, images) -> dict:
    return model.processor(text=[prompt(model, images)], images=images, return_tensors="pt")


def real_rows(inputs) -> torch.Tensor:
    """The processor's own account of which patch rows are real: ``image_position_ids`` other than (-1, -1)."""
    positions = inputs["image_position_ids"]
    return (positions[..., 0] >= 0) & (positions[..., 1] >= 0)


# -- what model.vision is ----------------------------------------------------------------------------


def test_the_vision_embedder_has_no_blocks_and_there_is_no_audio(model):
    native = model._module.model
    assert type(model.processor).__name__ == "Gemma4UnifiedProcessor"
    assert model._module.config.audio_config is None and native.embed_audio is None
    assert not any(isinstance(module, torch.nn.ModuleList) for module in native.embed_vision.modules())  # no blocks


def test_every_block_value_and_block_size_is_unavailable_saying_there_are_no_blocks(model):
    vision = model.vision
    assert vision.num_layers == 0 and len(vision.layers) == 0 and list(vision.layers) == []
    for read in (lambda: vision.layers[0], lambda: vision.layers[-1].layer_output,
                 lambda: vision.layers[0].self_attn.attention_probabilities):
        with pytest.raises(Unavailable, match=rf"vision\.layers\[(0|-1)\] is unavailable: {NO_BLOCKS}"):
            read()
    for size in ("num_heads", "head_dim", "intermediate_size"):
        with pytest.raises(Unavailable, match=rf"vision\.{size} is unavailable: {NO_BLOCKS}"):
            getattr(vision, size)
    rows = vision.support()
    served = {"image_token_mask", "image_features", "patch_embeddings", "tower_output", "patch_mask"}
    assert {name for name, reason in rows.items() if reason is None} == served
    for name in set(rows) - served:
        assert "has no blocks" in rows[name] and "vision.tower_output" in rows[name], name
    assert set(vision.support(layer=0)) == set(rows) - served
    with pytest.raises(Unavailable, match=NO_BLOCKS):
        with model.trace(prompt(model, ONE), images=ONE):
            vision.layers[0].layer_output.save()


def test_sizes_of_the_embedder(model):
    vision, config = model.vision, model.config.vision_config
    assert vision.vision_hidden_size == config.mm_embed_dim == 48
    assert vision.patch_size == config.patch_size * config.pooling_kernel_size == 8
    assert processed(model, ONE)["pixel_values"].shape[-1] == 3 * vision.patch_size**2  # one merged patch a row
    with pytest.raises(Unavailable, match=r"any resolution.*patch budget.*image_position_ids"):
        vision.image_size


# -- the embedder's values -----------------------------------------------------------------------------


@pytest.mark.parametrize("images", [ONE, TWO], ids=["one-image", "two-images"])
def test_patch_mask_is_the_processors_real_rows_one_image_token_each(model, images):
    inputs = processed(model, images)
    rows = model.processor.image_processor.max_soft_tokens
    with model.trace(prompt(model, images), images=images):
        mask = model.vision.image_token_mask.save()
        patch_mask = model.vision.patch_mask.save()
    assert patch_mask.shape == (len(images), rows)
    assert torch.equal(patch_mask, real_rows(inputs))
    assert int(patch_mask.sum()) == int(mask.sum())
    for image in range(len(images)):  # each image's real rows come first, then padding
        count = int(patch_mask[image].sum())
        assert 0 < count < rows and bool(patch_mask[image, :count].all()) and not patch_mask[image, count:].any()


def test_patch_embeddings_and_tower_output_recomputed(model):
    inputs = processed(model, TWO)
    embedder = model._module.model.embed_vision
    with model.trace(prompt(model, TWO), images=TWO):
        patches = model.vision.patch_embeddings.save()
        tower = model.vision.tower_output.save()
    pixels, positions = inputs["pixel_values"].to(torch.float32), inputs["image_position_ids"]
    assert torch.equal(patches, embedder.patch_ln2(embedder.patch_dense(embedder.patch_ln1(pixels))))
    padded = (positions == -1).all(-1)
    where, table = positions.clamp(min=0), embedder.pos_embedding
    added = (table[where[..., 0], 0] + table[where[..., 1], 1]).masked_fill(padded[..., None], 0.0)
    torch.testing.assert_close(tower, embedder.pos_norm(patches + added), rtol=0, atol=1e-6)
    rows = patches[padded]  # the processor's zero patch: one row, repeated
    assert torch.equal(rows, rows[:1].expand_as(rows))


def test_the_projector_runs_inside_the_embedder_on_every_row_and_the_host_drops_the_padding(model):
    with model.trace(prompt(model, TWO), images=TWO):
        patch_mask = model.vision.patch_mask.save()
        received = model.projector.input.save()
        projected = model.projector.output.save()
        tower = model.vision.tower_output.save()
        features = model.vision.image_features.save()
    projector = model._module.model.embed_vision.multimodal_embedder
    assert torch.equal(received, tower)  # the whole stream, padding included
    assert projected.shape == (2, model.processor.image_processor.max_soft_tokens, model.hidden_size)
    assert torch.equal(projected, projector.embedding_projection(projector.embedding_pre_projection_norm(tower)))
    assert torch.equal(features, projected[patch_mask])  # real rows, image after image


def test_reads_follow_the_forward_the_projector_before_tower_output(model):
    with pytest.raises(OutOfOrderError):
        with model.trace(prompt(model, ONE), images=ONE):
            model.vision.tower_output.save()
            model.projector.output.save()


def test_padding_never_reaches_the_text_model(model):
    text = prompt(model, TWO)
    with model.trace(text, images=TWO):
        real = model.vision.patch_mask.save()
        clean_features = model.vision.image_features.save()
        clean = model.logits.save()
    with model.trace(text, images=TWO):
        patches = model.vision.patch_embeddings
        noise = torch.randn(patches.shape, generator=torch.Generator().manual_seed(0)) * 100
        model.vision.patch_embeddings = torch.where(real[..., None], patches, noise)
        features = model.vision.image_features.save()
        logits = model.logits.save()
    assert torch.equal(features, clean_features) and torch.equal(logits, clean)
    with model.trace(text, images=TWO):
        model.vision.patch_embeddings[0, 0] = 0  # a real row does reach it
        edited = model.logits.save()
    assert not torch.equal(edited, clean)


def test_grids_put_each_real_row_and_its_token_at_its_merged_patch(model):
    inputs = processed(model, TWO)
    with model.trace(prompt(model, TWO), images=TWO):
        tower = model.vision.tower_output.save()
        features = model.vision.image_features.save()
    start = 0
    for image, positions in enumerate(inputs["image_position_ids"]):
        grid, tokens = model.vision.patch_grid(tower, image=image), model.vision.token_grid(features, image=image)
        real = int((positions >= 0).all(-1).sum())
        assert grid.shape[:2] == tokens.shape[:2] == ((8, 8), (7, 9))[image]
        for row in (0, 1, real // 2, real - 1):
            x, y = positions[row].tolist()
            assert torch.equal(grid[y, x], tower[image, row])
            assert torch.equal(tokens[y, x], features[start + row])
        start += real


# -- the text model --------------------------------------------------------------------------------


def test_text_blocks_add_up_then_scale_by_their_layer_scalar_with_no_per_layer_branch(model):
    blocks = list(model.layers)
    for read in (lambda: blocks[0].per_layer_output, lambda: blocks[0].per_layer_input):
        with pytest.raises(Unavailable, match=r"no per-layer inputs"):
            read()
    with model.trace(prompt(model, ONE), images=ONE):
        values = nnsight.save([[b.layer_input, b.attention_output, b.mlp_output, b.layer_output] for b in blocks])
    for block, (layer_input, attention, mlp, output) in zip(blocks, values):
        scalar = block._module.layer_scalar
        assert float(scalar) != 1.0
        assert torch.equal((layer_input + attention + mlp) * scalar, output)


def test_an_image_s_tokens_attend_to_each_other_both_ways_on_every_block_and_text_stays_causal(model):
    # transformers 5.24.0's forward builds the mask with create_masks_for_generate and the image's block ids, so the
    # overlay holds on full blocks as on sliding ones, past the sliding window (16 here, 64 image tokens)
    config = model.config.text_config
    assert config.use_bidirectional_attention == "vision" and config.sliding_window < 64
    with model.trace(prompt(model, ONE), images=ONE):
        mask = model.vision.image_token_mask.save()
        patterns = nnsight.save([layer.self_attn.attention_probabilities for layer in model.layers])
    image, text = mask[0], ~mask[0]
    assert set(config.layer_types) == {"sliding_attention", "full_attention"}
    for index, pattern in enumerate(patterns):
        among_image = pattern[0][:, image][:, :, image]  # [heads, image tokens, image tokens]
        assert bool((among_image > 0).all()), index
        above = torch.ones(pattern.shape[-2:], dtype=torch.bool).triu(1)
        from_text = pattern[0][:, text][..., above[text]]  # a text query's weights on later positions
        assert torch.equal(from_text, torch.zeros_like(from_text)), index
        assert bool((pattern[0][:, image][..., text & above[image].any(0)] == 0).all()), index  # nor on later text


def test_a_text_only_load_has_no_patch_mask(tiny_checkpoint):
    model = StandardizedTransformer(tiny_checkpoint("gemma4_unified"))
    assert model.vision.support() == {}
    for read in (lambda: model.vision.patch_mask, lambda: model.vision.layers[0]):
        with pytest.raises(Unavailable, match=r"task='image-text-to-text'"):
            read()
