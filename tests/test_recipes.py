"""The recipes (envoys.image.recipes) against the same computation written here by hand, and the logit lens's projection.

Every expected number comes from a plain forward of the model's own modules (torch hooks on the text blocks,
``output_attentions=True``), the processor's outputs, and the family's own geometry for where each image token
sits (LLaVA: one token per patch of the square ``image_size``; the Qwen ViT: one token per merged block of
``image_grid_thw``, blocks in raster order), never from the recipes' or the grids' code. Float32, eager attention,
exact (``torch.equal``).
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
import torch

from envoys import StandardizedTransformer, Unavailable
from envoys.core.standard import child
from envoys.image import recipes
from envoys.testing import NAMES, chat_prompt, noise_image
from envoys.testing.images import ONE_IMAGE_A_PROMPT

#: LLaVA (SigLIP; CLIP, whose CLS token the projector drops) and the Qwen ViT (packed, merge-block order; Qwen2.5-VL's
#: window order; Qwen3-VL's DeepStack): a square grid and packed ones.
FAMILIES = ["llava-siglip", "llava-clip", "qwen2_5_vl", "qwen3_vl"]
#: Two images of different sizes, the first not square (a Qwen ViT lays it out 2 x 3 tokens).
IMAGES = [noise_image(48, 32, seed=0), noise_image(32, 32, seed=1)]
CORRUPTED = [noise_image(48, 32, seed=2), noise_image(32, 32, seed=3)]
TARGET = (3, 7)


@pytest.fixture(scope="module", params=FAMILIES)
def model(request, tiny_checkpoint):
    return StandardizedTransformer(
        tiny_checkpoint(request.param), task="image-text-to-text", device="cpu", attn_implementation="eager", dispatch=True
    )


def images_for(model, images=IMAGES) -> list:
    """The images a recipe runs on with one prompt: both, or the first alone where a prompt takes one image
    (BLIP-2's processor)."""
    return images[:1] if type(model.processor).__name__ in ONE_IMAGE_A_PROMPT else images


def prompt(model) -> str:
    return chat_prompt(model.processor, len(images_for(model)), "Where is the cat?")


def inputs(model, images=IMAGES) -> dict[str, torch.Tensor]:
    """The processor's outputs, floating-point ones in the model's dtype (Llama 4's come in bfloat16), as the
    image-text-to-text pipeline casts them; lists the processor leaves unconverted (Unlimited-OCR's crops per image)
    as they are."""
    batch = model.processor(text=[prompt(model)], images=images_for(model, images), return_tensors="pt")
    return {key: value.to(model._module.dtype) if torch.is_tensor(value) and value.is_floating_point() else value
            for key, value in batch.items()}


def image_mask(model, batch) -> torch.Tensor:
    """bool [batch, seq]: where the processor put the image token."""
    config = model.config
    token = getattr(config, "image_token_id", None)
    return batch["input_ids"] == (token if token is not None else config.image_token_index)


def plain_logits(model, batch, pre_hooks=(), hooks=()) -> torch.Tensor:
    """The logits of a plain forward with torch hooks, as the forward returns them (the head's output, soft-capped
    where the forward caps it: PaliGemma 2's).

    Read off the outermost module that returns ``logits``: the root, or Llama 4's language model, since Llama 4's
    forward fails after it, on its last line (its family's known transformers bug, tolerated here and nowhere else)."""
    logits: list[torch.Tensor] = []

    def keep(m, a, output):
        if isinstance(getattr(output, "logits", None), torch.Tensor):
            logits.append(output.logits)  # inner modules' hooks run first: the last one kept is the outermost's

    try:
        plain_forward(model, batch, pre_hooks, [*hooks, *((module, keep) for module in model._module.modules())])
    except Exception as error:
        bug = model.family.quirks.forward_bug
        if bug is None or not bug.raised(error) or not logits:
            raise
    return logits[-1]


def through_head(model, hidden: torch.Tensor, after: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """The logits ``hidden`` gives after the last block, by hand: the final norm, the head, and ``after``, what the
    forward does to the head's output (`after_head`)."""
    with torch.no_grad():
        return after(model.lm_head._module(model.norm._module(hidden)))


def after_head(model) -> Callable[[torch.Tensor], torch.Tensor]:
    """What the forward does to its head's output, read off a plain forward: nothing (its logits are the head's output),
    the product with the root's ``logit_scale`` (Cohere Compass's) or the text config's (Aya Vision's from
    transformers 5.25), the scale by the text config's ``logits_scaling``,
    divided (Granite-Docling's) or multiplied (HyperCLOVAX's MuP scale), or the soft cap ``tanh(head / cap) * cap`` at
    its ``final_logit_softcapping`` (PaliGemma 2's; Muse's of the head times ``output_multiplier``); AssertionError
    where its logits are none of these."""
    heads: list[torch.Tensor] = []
    logits = plain_logits(model, inputs(model), hooks=[(model.lm_head._module, lambda m, a, o: heads.append(o))])
    if torch.equal(logits, heads[-1]):
        return lambda head: head
    scaling = getattr(model.text_config, "logits_scaling", None)
    if scaling is not None and scaling != 1 and torch.equal(logits, heads[-1] / scaling):
        return lambda head: head / scaling
    if scaling is not None and torch.equal(logits, heads[-1] * scaling):
        return lambda head: head * scaling
    for scale in (getattr(model._module, "logit_scale", None), getattr(model.text_config, "logit_scale", None)):
        if isinstance(scale, float) and scale != 1 and torch.equal(logits, heads[-1] * scale):
            return lambda head, scale=scale: head * scale
    cap = getattr(model.text_config, "final_logit_softcapping", None)
    assert cap is not None, "the forward changes the head's output and the text config sets no final soft cap"
    multiplier = getattr(model.text_config, "output_multiplier", None)  # the Muse wrappers', before the cap
    if multiplier is not None:
        assert torch.equal(logits, torch.tanh(heads[-1] * multiplier / cap) * cap), "not the scaled, soft-capped head"
        return lambda head: torch.tanh(head * multiplier / cap) * cap
    assert torch.equal(logits, torch.tanh(heads[-1] / cap) * cap), "the forward's logits are not the soft-capped head"
    return lambda head: torch.tanh(head / cap) * cap


def grid_shapes(model, batch) -> list[tuple[int, int]]:
    """Each image's token grid, from the family's own geometry and the processor's outputs."""
    vision = model.config.vision_config
    if model.config.model_type == "llava":
        side = vision.image_size // vision.patch_size
        return [(side, side)] * len(IMAGES)
    merge = vision.spatial_merge_size
    return [(int(h) // merge, int(w) // merge) for _, h, w in batch["image_grid_thw"]]


def by_hand(model, batch, rows: torch.Tensor, image: int) -> torch.Tensor:
    """``rows`` ([image_tokens, ...], the batch's image tokens in order) for image ``image``, on its grid."""
    shapes = grid_shapes(model, batch)
    start = sum(r * c for r, c in shapes[:image])
    r, c = shapes[image]
    return rows[start:start + r * c].reshape(r, c, *rows.shape[1:])


def block_output(output):
    return output[0] if isinstance(output, tuple) else output


def plain_forward(model, batch, pre_hooks=(), hooks=(), **kwargs):
    """The plain model's forward on ``batch`` with torch hooks: ``(module, hook)`` pairs, removed afterwards."""
    handles = [module.register_forward_pre_hook(hook, with_kwargs=True) for module, hook in pre_hooks]
    handles += [module.register_forward_hook(hook) for module, hook in hooks]
    try:
        with torch.no_grad():
            return model._module(**batch, **kwargs)
    finally:
        for handle in handles:
            handle.remove()


def block_outputs(model, batch) -> list[torch.Tensor]:
    """Every text block's output in a plain forward."""
    outputs: list[torch.Tensor] = []
    plain_logits(model, batch, hooks=[(block._module, lambda m, a, o: outputs.append(block_output(o).clone()))
                                       for block in model.layers])
    return outputs


# -- the logit lens -----------------------------------------------------------------------------


@pytest.fixture(scope="module", params=NAMES)
def any_model(request, tiny_checkpoint):
    return StandardizedTransformer(
        tiny_checkpoint(request.param), task="image-text-to-text", device="cpu", attn_implementation="eager", dispatch=True
    )


def test_project_on_vocab_is_the_final_norm_and_head_inside_and_outside_a_trace(any_model):
    model = any_model
    with model.trace(chat_prompt(model.processor, 1, "What is it?"), images=IMAGES[:1]) as tracer:
        first = model.layers[0].layer_output.clone().save()  # a copy: Qwen3-VL on 4.x adds DeepStack to it in place
        inside = model.project_on_vocab(model.layers[0].layer_output).save()
        last = model.layers[-1].layer_output.save()
        logits = model.logits.save()
        tracer.stop()
    expected = through_head(model, first, after_head(model))
    assert torch.equal(inside, expected)
    assert torch.equal(model.project_on_vocab(first), expected)
    assert torch.equal(model.project_on_vocab(last), logits)  # the model's own head, on its own last block


def test_logit_lens_is_each_blocks_image_tokens_through_the_norm_and_head(model):
    batch = inputs(model)
    mask = image_mask(model, batch)
    outputs = block_outputs(model, batch)
    after = after_head(model)
    for image in range(len(IMAGES)):
        lens = recipes.logit_lens(model, prompt(model), IMAGES, image=image, k=2)
        assert lens.layers == tuple(range(model.num_layers))
        for index, output in enumerate(outputs):
            top = through_head(model, output[mask], after).softmax(-1).topk(2, dim=-1)
            assert torch.equal(lens.probabilities[index], by_hand(model, batch, top.values, image))
            assert torch.equal(lens.token_ids[index], by_hand(model, batch, top.indices, image))
            decoded = [[model.tokenizer.decode([int(i)]) for i in row] for row in by_hand(model, batch, top.indices, image)[..., 0]]
            assert [list(row) for row in lens.tokens[index]] == decoded
    assert lens.image is IMAGES[-1]


def test_logit_lens_at_chosen_blocks(model):
    lens = recipes.logit_lens(model, prompt(model), IMAGES, layers=[-1, 0])
    everything = recipes.logit_lens(model, prompt(model), IMAGES)
    assert lens.layers == (0, model.num_layers - 1)
    assert torch.equal(lens.token_ids, everything.token_ids[[0, -1]])
    assert lens.token_ids.shape[-1] == 1


# -- attention to the image ---------------------------------------------------------------------


def test_attention_to_the_image_is_the_attention_pattern_at_the_image_keys(model):
    batch = inputs(model)
    mask = image_mask(model, batch)
    attentions = attention_patterns(model, batch, range(model.num_layers))
    for layer, position, image in [(0, -1, 0), (model.num_layers - 1, -3, 1)]:
        per_head = recipes.attention_to_image(model, prompt(model), IMAGES, layer=layer, position=position,
                                              image=image, per_head=True)
        summed = recipes.attention_to_image(model, prompt(model), IMAGES, layer=layer, position=position, image=image)
        rows = attentions[layer][0, :, position][:, mask[0]].transpose(0, 1)  # [image_tokens, heads]
        expected = by_hand(model, batch, rows, image).permute(2, 0, 1)
        assert torch.equal(per_head.grid, expected)
        assert torch.equal(summed.grid, expected.sum(0))
        assert (summed.layer, summed.position) == (layer, position % mask.shape[1])


def attention_patterns(model, batch, layers) -> dict[int, torch.Tensor]:
    """The attention probabilities of ``layers`` in a plain forward: what each eager attention returns beside its output."""
    patterns: dict[int, torch.Tensor] = {}

    def keep(layer):
        return lambda m, a, output: patterns.__setitem__(layer, output[1])

    plain_logits(model, batch, hooks=[(model.layers[layer].self_attn._module, keep(layer)) for layer in layers])
    return patterns


def exactly(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """Equal bit for bit, NaN (a cell no image token covers) where the other has NaN."""
    torch.testing.assert_close(actual, expected, rtol=0, atol=0, equal_nan=True)


def test_the_grid_recipes_on_every_family_with_a_layout(any_model):
    """The lens and the attention on each family, the image tokens' numbers by hand and put on the grid by the family's
    layout (model.vision.token_grid, whose placement the grid suites, tests/tiled_grids.py and tests/packed_grids.py,
    check against each family's geometry)."""
    model = any_model
    batch = inputs(model)
    mask = image_mask(model, batch)
    outputs = block_outputs(model, batch)
    with model.trace(prompt(model), images=images_for(model)) as tracer:  # the batch the grids read
        tracer.stop()
    try:
        model.vision.token_grid(outputs[0][mask], image=0)
    except Unavailable as unavailable:  # image tokens on no grid (a resampler's latents): the recipes say so too
        reason = re.escape(str(unavailable))
        with pytest.raises(Unavailable, match=reason):
            recipes.logit_lens(model, prompt(model), images_for(model), image=0, layers=[0, -1])
        with pytest.raises(Unavailable, match=reason):
            recipes.attention_to_image(model, prompt(model), images_for(model), layer=attention_blocks(model)[-1],
                                       image=0)
        return
    layer = attention_blocks(model)[-1]
    pattern = attention_patterns(model, batch, [layer])[layer]
    after = after_head(model)
    for image in range(len(IMAGES)):
        lens = recipes.logit_lens(model, prompt(model), IMAGES, image=image, layers=[0, -1])
        for index, output in enumerate([outputs[0], outputs[-1]]):
            top = through_head(model, output[mask], after).softmax(-1).topk(1, dim=-1)
            exactly(lens.probabilities[index], model.vision.token_grid(top.values, image=image))
        attention = recipes.attention_to_image(model, prompt(model), IMAGES, layer=layer, image=image, per_head=True)
        rows = pattern[0, :, -1][:, mask[0]].transpose(0, 1)
        exactly(attention.grid, model.vision.token_grid(rows, image=image).permute(2, 0, 1))


# -- patching -----------------------------------------------------------------------------------


def logit_difference(logits: torch.Tensor) -> torch.Tensor:
    return logits[0, -1, TARGET[0]] - logits[0, -1, TARGET[1]]


def test_patching_puts_the_clean_image_rows_into_the_corrupted_run(any_model):
    model = any_model
    clean, corrupted = inputs(model, IMAGES), inputs(model, CORRUPTED)
    mask = image_mask(model, clean)
    assert torch.equal(mask, image_mask(model, corrupted))
    clean_outputs = block_outputs(model, clean)
    clean_logits = plain_logits(model, clean)
    features: list[torch.Tensor] = []
    text_model = owner_of(model, model.layers[0]._module)
    # a text model with cross-attention layers (Mllama's) receives the features whole, as cross_attention_states
    crossed = getattr(model.config.get_text_config(), "cross_attention_layers", None) is not None
    received = "cross_attention_states" if crossed else "inputs_embeds"
    rows = slice(None) if crossed else mask
    plain_logits(model, clean, pre_hooks=[(text_model, lambda m, args, kwargs: features.append(kwargs[received][rows]))])

    def into_embeddings(m, args, kwargs):  # what the text model receives at the image tokens is image_features
        embeddings = kwargs[received].clone()
        embeddings[rows] = features[0]
        return args, {**kwargs, received: embeddings}

    expected = [logit_difference(plain_logits(model, corrupted, pre_hooks=[(text_model, into_embeddings)]))]
    for layer, block in enumerate(model.layers):
        def patch(m, a, output, rows=clean_outputs[layer][mask]):
            patched = block_output(output).clone()
            patched[mask] = rows
            return (patched, *output[1:]) if isinstance(output, tuple) else patched
        expected.append(logit_difference(plain_logits(model, corrupted, hooks=[(block._module, patch)])))

    result = recipes.patch_image_rows(model, prompt(model), images_for(model), images_for(model, CORRUPTED), target=TARGET)
    assert result.sites == ("image_features", *(f"layers[{i}]" for i in range(model.num_layers)))
    torch.testing.assert_close(result.patched, torch.stack(expected), atol=1e-5, rtol=0)  # one batch of 2 + 1 + L rows
    torch.testing.assert_close(result.clean, logit_difference(clean_logits), atol=1e-5, rtol=0)
    torch.testing.assert_close(result.corrupted, logit_difference(plain_logits(model, corrupted)), atol=1e-5, rtol=0)
    # the last block's image rows never reach the last token's logits; without DeepStack (which adds the tower's
    # taps after the first blocks) the image reaches the text model through the features alone
    torch.testing.assert_close(result.patched[-1], result.corrupted, atol=1e-5, rtol=0)
    if not getattr(model.config.vision_config, "deepstack_visual_indexes", None):
        torch.testing.assert_close(result.patched[0], result.clean, atol=1e-5, rtol=0)


def owner_of(model, block: torch.nn.Module) -> torch.nn.Module:
    """The text model: the module whose ``layers`` hold ``block``."""
    return next(m for m in model._module.modules() if any(b is block for b in getattr(m, "layers", ())))


def test_patching_refuses_images_of_other_sizes_and_targets_that_are_not_one_token(model):
    with pytest.raises(ValueError, match="same sizes"):
        recipes.patch_image_rows(model, prompt(model), IMAGES, [noise_image(32, 32), IMAGES[1]], target=TARGET)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        recipes.patch_image_rows(model, prompt(model), IMAGES, CORRUPTED, target=(0, model.vocab_size))
    with pytest.raises(TypeError, match="one prompt"):
        recipes.patch_image_rows(model, [prompt(model)], IMAGES, CORRUPTED, target=TARGET)
    with pytest.raises(ValueError, match="2 tokens"):
        recipes.patch_image_rows(model, prompt(model), IMAGES, CORRUPTED, target=("the cat", 3))
    with pytest.raises(IndexError, match="outside the sequence"):
        recipes.patch_image_rows(model, prompt(model), IMAGES, CORRUPTED, target=TARGET, position=10_000)


def test_a_target_token_by_its_text_is_its_id(model):
    word = model.tokenizer.convert_ids_to_tokens(TARGET[0])
    assert recipes.token_id(model, word) == TARGET[0] == recipes.token_id(model, TARGET[0])


# -- knockout -----------------------------------------------------------------------------------


def attention_blocks(model) -> list[int]:
    """The text blocks with softmax attention (all but a hybrid stack's state-space or linear-attention blocks)."""
    return [i for i, block in enumerate(model.layers) if child(block, "self_attn") is not None]


#: Why the knock-out is not recomputed by hand on a sparse-attention block (Mistral Large 4): the recipe sets the
#: scores to -inf at the kernel, after the indexer's choice has put finfo.min on the keys it left out; a hook can edit
#: only the mask the block receives, which the indexer reads too and whose -inf the choice's finfo.min overwrites, so
#: the two differ on a text query whose chosen keys are all image keys.
INDEXED_KNOCKOUT = "the knock-out by hand edits the mask before the sparse-attention indexer, the recipe the scores after it"


def test_knockout_removes_the_text_queries_attention_to_the_image_keys(any_model):
    model = any_model
    batch = inputs(model)
    mask = image_mask(model, batch)
    cells = ((~mask)[:, :, None] & mask[:, None, :])[:, None]  # [batch, 1, query, key]: text query, image key
    layers = sorted({attention_blocks(model)[0], attention_blocks(model)[-1]})

    attentions = [model.layers[i].self_attn._module for i in layers]
    if any(getattr(attention, "indexer", None) is not None for attention in attentions):
        pytest.skip(INDEXED_KNOCKOUT)

    def knock_out(m, args, kwargs):  # the same cells masked in the eager attention's additive mask
        attention_mask = kwargs["attention_mask"]
        assert attention_mask.is_floating_point()
        return args, {**kwargs, "attention_mask": attention_mask.masked_fill(cells, float("-inf"))}

    knocked = plain_logits(model, batch, pre_hooks=[(attention, knock_out) for attention in attentions])
    clean = plain_logits(model, batch)
    result = recipes.knock_out_image_attention(model, prompt(model), images_for(model), layers=layers, k=3)
    assert result.layers == tuple(layers) and result.position == mask.shape[1] - 1
    # both runs are invokes of one trace: a mixture of experts runs both rows' tokens through one expert call
    torch.testing.assert_close(result.knocked, knocked[0, -1], atol=1e-5, rtol=0)
    torch.testing.assert_close(result.clean, clean[0, -1], atol=1e-5, rtol=0)
    assert not torch.equal(result.knocked, result.clean)
    expected_top = {int(i) for run in (clean, knocked) for i in run[0, -1].topk(3).indices}
    # one bar per token among either run's top 3, each with its probability (labels: test_tokens_that_decode_alike...)
    expected_top = {int(i) for run in (result.clean, result.knocked) for i in run.topk(3).indices}
    assert sorted(result.top["clean"].values()) == sorted(float(result.clean.softmax(-1)[i]) for i in expected_top)
    assert sorted(result.top["knocked out"].values()) == sorted(float(result.knocked.softmax(-1)[i]) for i in expected_top)


def test_the_recipes_that_read_the_pattern_need_eager_attention(tiny_checkpoint):
    model = StandardizedTransformer(tiny_checkpoint("llava-siglip"), task="image-text-to-text", attn_implementation="sdpa")
    text = chat_prompt(model.processor, 1, "What is it?")
    with pytest.raises(Unavailable, match="attn_implementation='eager'"):
        recipes.knock_out_image_attention(model, text, IMAGES[:1], layers=0)
    with pytest.raises(Unavailable, match="attn_implementation='eager'"):
        recipes.attention_to_image(model, text, IMAGES[:1], layer=0)


# -- the results' own arithmetic and refusals ---------------------------------------------------------


def test_recovered_is_the_share_of_the_clean_difference_each_patch_restores():
    result = recipes.Patching(("image_features", "layers[0]", "layers[1]"), torch.tensor([3.0, 2.0, 1.5]),
                              torch.tensor(3.0), torch.tensor(1.0), (5, 6), ("a", "b"), -1)
    assert torch.equal(result.recovered, torch.tensor([1.0, 0.5, 0.25]))
    same = recipes.Patching(("image_features",), torch.tensor([2.0]), torch.tensor(2.0), torch.tensor(2.0), (5, 6),
                            ("a", "b"), -1)
    with pytest.raises(ValueError, match=r"the clean and corrupted runs give the same logit difference \(2.0\)"):
        same.recovered


class ByteTokenizer:
    """Decodes ids 7 and 8 alike, as byte-level tokenizers decode partial characters."""

    def decode(self, ids):
        return {7: "\ufffd", 8: "\ufffd", 9: "cat"}[ids[0]]


def test_tokens_that_decode_alike_keep_their_own_labels():
    assert recipes.token_labels(ByteTokenizer(), [9, 7, 8]) == {9: "cat", 7: "\ufffd (id 7)", 8: "\ufffd (id 8)"}


def test_drawing_blocks_the_lens_does_not_hold_says_which_it_holds(tmp_path):
    lens = recipes.LogitLens((0, 3), torch.zeros(2, 1, 1, 1, dtype=torch.long), torch.zeros(2, 1, 1, 1),
                             ((("a",),), (("b",),)), noise_image(8, 8))
    with pytest.raises(ValueError, match=r"this lens holds blocks \[0, 3\], not \[-1\]"):
        lens.draw(tmp_path / "lens.png", layers=[-1])
