"""PaliGemma and PaliGemma 2: what is particular to them, beyond the vision contracts (tests/test_vision_contracts.py).

The checkpoints (envoys.testing.paligemma): SigLIP on 32x32 images of 8 px
patches (16 patches, ``post_layernorm``), a one-Linear projector, 16 image
tokens an image, a Gemma text model (``paligemma``) or a Gemma 2 one with
soft-capped attention logits and final logits (``paligemma-2``); each test
but the last two runs on both. Particular to PaliGemma: the projector
reads the tower's normed output; the features are scattered unscaled into
embeddings Gemma scales; the prefix (image tokens and prompt, the
processor's ``token_type_ids`` 0) attends both ways and a suffix causally;
the processor's ``labels`` reach the forward, which computes a loss. Every
expected value comes from the processor's outputs, the modules' weights or a
recomputation from other values.
"""

from __future__ import annotations

import pytest
import torch
from logit_caps import assert_capped_as_the_wrapper
from tiled_grids import TiledGridSuite
from tower_body import tower_body

from envoys import StandardizedTransformer
from envoys.testing import chat_prompt, noise_image

ONE = [noise_image(32, 32, seed=0)]
QUESTION = "What is in the picture?"


#: Each checkpoint's text attention class.
ATTENTION = {"paligemma": "GemmaAttention", "paligemma-2": "Gemma2Attention"}


def load(tiny_checkpoint, name: str) -> StandardizedTransformer:
    return StandardizedTransformer(tiny_checkpoint(name), task="image-text-to-text", device="cpu", attn_implementation="eager")


@pytest.fixture(scope="module", params=sorted(ATTENTION))
def model(request, tiny_checkpoint):
    return load(tiny_checkpoint, request.param)


def encode(model, text: str = QUESTION, suffix: str | None = None) -> dict:
    """The stock processor's encoding of one image and ``text`` (and ``suffix``), as the trace's inputs."""
    prompt = chat_prompt(model.processor, 1, text)
    extra = {} if suffix is None else {"suffix": [suffix]}
    return dict(model.processor(text=[prompt], images=ONE, return_tensors="pt", **extra))


def test_loads_with_its_stock_processor(model):
    assert type(model._module).__name__ == "PaliGemmaForConditionalGeneration"
    assert type(model.processor).__name__ == "PaliGemmaProcessor"
    assert type(model.processor.image_processor).__name__ in ("SiglipImageProcessor", "SiglipImageProcessorFast")
    assert model.family.model_type == "paligemma"
    name = "paligemma-2" if model.config.text_config.model_type == "gemma2" else "paligemma"
    assert type(model.layers[0].self_attn._module).__name__ == ATTENTION[name]


def test_the_projector_reads_the_normed_tower_output(model):
    """projector.input is post_layernorm's output (tower_output), not the last block's; projector.output is its
    Linear, recomputed from the weights."""
    with model.trace(chat_prompt(model.processor, 1, QUESTION), images=ONE):
        last = model.vision.layers[-1].layer_output.save()
        normed = model.vision.norm.output.save()
        tower = model.vision.tower_output.save()
        received = model.projector.input.save()
        projected = model.projector.output.save()
    norm = tower_body(model._module.model.vision_tower).post_layernorm
    assert torch.equal(normed, torch.nn.functional.layer_norm(last, last.shape[-1:], norm.weight, norm.bias, norm.eps))
    assert torch.equal(received, tower) and torch.equal(received, normed)
    assert not torch.equal(received, last)
    linear = model._module.model.multi_modal_projector.linear
    assert projected.shape == (1, 16, model.hidden_size)
    assert torch.equal(projected, torch.nn.functional.linear(normed, linear.weight, linear.bias))


def test_an_edit_of_tower_output_reaches_the_text_model(model):
    prompt = chat_prompt(model.processor, 1, QUESTION)
    with model.trace(prompt, images=ONE):
        clean = model.vision.image_features.save()
    with model.trace(prompt, images=ONE):
        model.vision.tower_output[:, 0] = 0
        edited = model.vision.image_features.save()
    linear = model._module.model.multi_modal_projector.linear
    assert torch.equal(edited[0], linear.bias)  # the zeroed patch's token is the projector's bias alone
    assert torch.equal(edited[1:], clean[1:])


def test_the_features_are_scattered_unscaled_into_the_scaled_embeddings(model):
    with model.trace(chat_prompt(model.processor, 1, QUESTION), images=ONE):
        mask = model.vision.image_token_mask.save()
        embedded = model.embed_tokens.output.save()  # the host embeds the ids before it runs the tower
        projected = model.projector.output.save()
        features = model.vision.image_features.save()
        first = model.layers[0].input.save()
    ids = encode(model)["input_ids"]
    assert torch.equal(mask, ids == model.config.image_token_id) and mask.sum() == 16
    assert torch.equal(features, projected.reshape(-1, model.hidden_size))
    assert torch.equal(first[mask], features)
    weight = model.embed_tokens._module.weight
    assert torch.equal(embedded, weight[ids] * torch.tensor(model.hidden_size**0.5, dtype=weight.dtype))
    assert torch.equal(first[~mask], embedded[~mask])


def allowed_keys(token_type_ids: torch.Tensor) -> torch.Tensor:
    """[seq, seq] bool, from the processor's token_type_ids: a prefix token (0) sees the whole prefix; every token
    sees the keys up to itself."""
    prefix = token_type_ids[0] == 0
    positions = torch.arange(prefix.numel())
    return (prefix[:, None] & prefix[None, :]) | (positions[None, :] <= positions[:, None])


def test_the_prefix_attends_both_ways_and_the_suffix_causally(model):
    inputs = encode(model, suffix="a cat")
    kinds = inputs["token_type_ids"][0].tolist()
    assert kinds == [0] * (len(kinds) - 3) + [1, 1, 1]  # "a", "cat", "<eos>"
    allowed = allowed_keys(inputs["token_type_ids"])
    assert allowed.triu(1).any()  # not causal: some prefix token sees a later one
    patterns = []
    with model.trace(**inputs):
        for layer in model.layers:
            patterns.append(layer.self_attn.attention_probabilities.save())
    for pattern in patterns:
        assert pattern.shape == (1, 2, len(kinds), len(kinds))
        assert torch.equal(pattern[0] > 0, allowed.expand(2, -1, -1))


def test_an_image_token_sees_the_prompt_after_it_and_the_prefix_never_sees_the_suffix(model):
    """A later prompt word changes what the image tokens compute in the first block; another suffix of the same
    length leaves every prefix row of every block unchanged."""
    question, other_suffix = [], []
    with model.trace(**encode(model, "What is in the picture?", suffix="a cat")):
        for layer in model.layers:
            question.append(layer.layer_output.save())
    with model.trace(**encode(model, "What is in the photo?", suffix="a cat")):
        other_word = model.layers[0].layer_output.save()
    with model.trace(**encode(model, "What is in the picture?", suffix="a dog")):
        for layer in model.layers:
            other_suffix.append(layer.layer_output.save())
    inputs = encode(model, "What is in the picture?", suffix="a cat")
    images = inputs["input_ids"][0] == model.config.image_token_id
    prefix = int((inputs["token_type_ids"][0] == 0).sum())
    assert not torch.equal(other_word[0, images], question[0][0, images])
    for clean, edited in zip(question, other_suffix):
        assert torch.equal(edited[:, :prefix], clean[:, :prefix])
        assert not torch.equal(edited[:, prefix + 1 :], clean[:, prefix + 1 :])  # after the changed word


def test_a_trace_hands_the_processors_labels_to_the_forward_which_computes_a_loss(model):
    """The processor returns labels (-100 on the prefix); a trace passes them on and the root computes a loss: NaN
    with no suffix to score, the suffix's next-token cross-entropy with one. The logits are the same without
    labels."""
    with model.trace(chat_prompt(model.processor, 1, QUESTION), images=ONE):
        loss = model.output.loss.save()
    assert torch.isnan(loss)
    inputs = encode(model, suffix="a cat")
    labels = inputs["labels"]
    assert torch.equal(labels == -100, inputs["token_type_ids"] == 0)
    with model.trace(**inputs):
        loss = model.output.loss.save()
        logits = model.logits.save()
    with model.trace(**{key: value for key, value in inputs.items() if key != "labels"}):
        unlabelled = model.logits.save()
        no_loss = model.output.loss.save()
    assert no_loss is None
    assert torch.equal(logits, unlabelled)
    expected = torch.nn.functional.cross_entropy(logits[0, :-1], labels[0, 1:], ignore_index=-100)
    assert torch.allclose(loss, expected, rtol=1e-6, atol=0)


def test_paligemma2s_scores_are_soft_capped_before_the_mask(tiny_checkpoint):
    """On Gemma 2's text blocks attention_scores, the softmax's input, are ``cap * tanh(q . k * scaling / cap)`` at
    every key a query may see, recomputed from attention_queries and attention_keys."""
    model = load(tiny_checkpoint, "paligemma-2")
    text = model.config.text_config
    inputs = encode(model, suffix="a cat")
    queries, keys, scores = [], [], []
    with model.trace(**inputs):
        for layer in model.layers:
            queries.append(layer.self_attn.attention_queries.save())
            keys.append(layer.self_attn.attention_keys.save())
            scores.append(layer.self_attn.attention_scores.save())
    allowed = allowed_keys(inputs["token_type_ids"])
    cap, scaling = text.attn_logit_softcapping, text.query_pre_attn_scalar**-0.5
    for query, key, score in zip(queries, keys, scores):
        key = key.repeat_interleave(query.shape[1] // key.shape[1], dim=1)  # the key-value head each query head reads
        expected = torch.tanh(torch.matmul(query, key.transpose(2, 3)) * scaling / cap) * cap
        assert torch.equal(score[..., allowed], expected[..., allowed])
        assert score[..., allowed].abs().max() < cap
        assert (score[..., ~allowed] < -1e30).all()  # the mask, added after the cap


def test_paligemma2s_logits_are_the_head_soft_capped_at_30_and_project_on_vocab_caps_them_too(tiny_checkpoint):
    """As on the paligemma2 checkpoints, the text config caps the final logits at 30, and PaliGemma's forward applies
    it after the head: ``logits`` is ``tanh(head / 30) * 30`` of the head's output, and ``project_on_vocab`` of the
    last block's output is the logits themselves."""
    model = load(tiny_checkpoint, "paligemma-2")
    cap = model.config.text_config.final_logit_softcapping
    assert cap == 30.0
    with model.trace(**encode(model)):
        last = model.layers[-1].layer_output.save()
        head = model.lm_head.output.save()
        logits = model.logits.save()
    squashed = torch.tanh(head / cap) * cap
    assert not torch.equal(head, squashed)
    assert torch.equal(logits, squashed)
    assert torch.equal(model.project_on_vocab(last), logits)


# -- the grids (tiled_grids.TiledGridSuite) ----------------------------------------------------------------------


class TestGrids(TiledGridSuite):
    """PaliGemma: the suite's common case, one tile per image and each patch its own token (the projector is one Linear)."""

    checkpoint = "paligemma"
    images = [(4, 4, 8), (6, 8, 8)]


def test_project_on_vocab_squashes_the_logits_where_the_model_does(model):
    """PaliGemma's wrapper applies final_logit_softcapping after its head, whatever its text model (here Gemma's,
    which has no cap of its own)."""
    assert_capped_as_the_wrapper(model, capped=True)
