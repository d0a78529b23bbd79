"""Janus: what is particular to it, beyond the vision contracts (tests/test_vision_contracts.py).

Its tower is SigLIP's shape under Janus's own classes: the attention's output
projection is ``projection_layer`` (served as ``self_attn.o_proj``), the MLP's
width comes from ``mlp_ratio``; its aligner maps each patch of the tower's
normed output to one image token; its processor pads every image to a square
and writes each image's tokens between ``<begin_of_image>`` and
``<end_of_image>``; the image-generation side keeps its native names. The tiny
checkpoint (envoys/testing/janus.py): 32x32 images of 8 px patches, a 4x4 grid,
16 image tokens an image, tower width 32 (2 heads of 16, MLP 64), text width 32.
"""

from __future__ import annotations

import pytest
import torch

from envoys.testing import chat_prompt, noise_image

IMAGES = [noise_image(32, 32, seed=3), noise_image(64, 48, seed=4)]
SIDE = 4  # patches a side
TOKENS = SIDE * SIDE
HEADS, HEAD_DIM = 2, 16


CHECKPOINT = "janus"


def prompt(model, count=2):
    return chat_prompt(model.processor, count, "What is in the picture?")


def test_the_image_generation_side_has_no_value(model):
    # its modules keep their native names (the row's native: model.vqmodel, model.generation_*)
    assert not any(key.startswith("model.vqmodel") or "generation_" in key for key in model.support())


def test_the_mlp_is_mlp_ratio_times_the_tower_width(model):
    config = model.vision.vision_config
    assert "intermediate_size" not in config.to_dict()
    assert model.vision.intermediate_size == int(config.hidden_size * config.mlp_ratio) == 64
    assert model.vision.layers[0].mlp.up_proj._module.out_features == model.vision.intermediate_size


def test_the_attention_interior_is_the_projections_split_into_heads_and_projection_layer_after(model):
    """use_qk_norm is off, so q_norm / k_norm are identities: the kernel's queries, keys and values are q_proj,
    k_proj and v_proj of the normed stream split into heads, and the attention's output is projection_layer of the
    head outputs joined back."""
    block = model.vision.layers[1]
    attention = block.self_attn
    with model.trace(prompt(model), images=IMAGES) as tracer:
        normed = block.input_layernorm.output.save()
        queries = attention.attention_queries.save()
        keys = attention.attention_keys.save()
        values = attention.attention_values.save()
        heads = attention.attention_head_outputs.save()
        output = attention.attention_output.save()
        tracer.stop()
    native = attention._module
    images, patches, width = normed.shape
    with torch.no_grad():
        def split(projection):
            return projection(normed).reshape(images, patches, HEADS, HEAD_DIM).transpose(1, 2)

        assert torch.equal(queries, split(native.q_proj))
        assert torch.equal(keys, split(native.k_proj))
        assert torch.equal(values, split(native.v_proj))
        assert heads.shape == (2, TOKENS, HEADS, HEAD_DIM)
        assert torch.equal(output, native.projection_layer(heads.reshape(images, patches, width)))


def test_the_tower_output_is_the_first_call_of_its_norm_and_the_aligner_projects_each_patch(model):
    with model.trace(prompt(model), images=IMAGES) as tracer:
        last = model.vision.layers[-1].layer_output.save()
        normed = model.vision.norm.output.save()
        tower = model.vision.tower_output.save()
        features = model.vision.image_features.save()
        tracer.stop()
    aligner = model.projector._module
    with torch.no_grad():
        assert torch.equal(normed, model.vision.norm._module(last))
        by_hand = aligner.hidden_layers[0](aligner.activation_fn(aligner.fc1(tower)))
    assert torch.equal(tower, normed)
    assert tower.shape == (2, TOKENS, model.vision.vision_hidden_size)
    assert torch.equal(features, by_hand.reshape(2 * TOKENS, model.hidden_size))


def test_each_images_tokens_sit_between_its_begin_and_end_of_image_tokens(model):
    tokenizer = model.processor.tokenizer
    with model.trace(prompt(model), images=IMAGES) as tracer:
        ids = model.inputs[1]["input_ids"].save()
        mask = model.vision.image_token_mask.save()
        tracer.stop()
    tokens = tokenizer.convert_ids_to_tokens(ids[0])
    begins = [index for index, token in enumerate(tokens) if token == "<begin_of_image>"]
    assert len(begins) == 2
    for begin in begins:
        assert mask[0, begin + 1:begin + 1 + TOKENS].all() and not mask[0, begin]
        assert tokens[begin + 1 + TOKENS] == "<end_of_image>"
    assert int(mask.sum()) == 2 * TOKENS


def test_an_edit_of_one_patch_of_the_tower_output_changes_its_image_token_alone(model):
    row, column = 1, 3
    token = TOKENS + row * SIDE + column  # the second image's patch (1, 3): image after image, raster order
    with model.trace(prompt(model), images=IMAGES) as tracer:
        clean = model.vision.image_features.save()
        tracer.stop()
    with model.trace(prompt(model), images=IMAGES) as tracer:
        model.vision.tower_output[1, row * SIDE + column] = 0.0
        edited = model.vision.image_features.save()
        tracer.stop()
    changed = (edited != clean).any(dim=-1)
    assert changed.nonzero().flatten().tolist() == [token]


def test_a_tall_image_is_padded_to_a_square_whose_padding_patches_are_image_tokens(model):
    """A 16 wide, 64 high image is resized to 32 high and 14 wide (half of 16 is below the processor's min_size, 14)
    and padded to 32x32 with background, 9 columns left and right: the first patch column (pixel columns 0 to 7) is
    background alone, so its four patch embeddings are equal, and the image still gets 16 image tokens, padding
    included."""
    tall = noise_image(16, 64, seed=5)
    with model.trace(prompt(model, 1), images=[tall]) as tracer:
        mask = model.vision.image_token_mask.save()
        patches = model.vision.patch_embeddings.save()
        tracer.stop()
    assert int(mask.sum()) == TOKENS
    grid = patches[0].reshape(SIDE, SIDE, -1)
    left, middle = grid[:, 0], grid[:, 1]
    assert all(torch.equal(left[0], left[row]) for row in range(1, SIDE))
    assert not torch.equal(middle[0], middle[1])  # noise from column 9 on: the second patch column holds the image


def test_image_generation_does_not_run_through_nnsight(model):
    """Janus's image branch of generate refuses the streamer nnsight passes it: the spec has no value there, and
    the family serves none (envoys/families/janus.py)."""
    encoding = model.processor(text="A picture of a red cat", generation_mode="image", return_tensors="pt")
    assert model.processor.tokenizer.convert_ids_to_tokens(encoding["input_ids"][0])[-1] == "<begin_of_image>"
    with pytest.raises(ValueError, match=r"not used by the model: \['streamer'\]"):
        with model.generate(input_ids=encoding["input_ids"], attention_mask=encoding["attention_mask"],
                            generation_mode="image", do_sample=False):
            model.layers[0].output.save()
