"""The text surface nnterp users know, on every family's tiny checkpoint: sizes, pre-norms, inputs, accessors,
skip and steer, exact against the plain model, the processor, or values read in the same trace.

Every trace stops after its last read (``tracer.stop()``), as Llama 4's must (its transformers forward fails on
its last line, after the logits); on the other families it changes nothing."""

from __future__ import annotations

import nnsight
import pytest
import torch

from envoys import StandardizedTransformer
from envoys.core.standard import child
from envoys.testing import NAMES, chat_prompt, noise_image

IMAGES = [noise_image(32, 32, seed=0)]


@pytest.fixture(scope="module", params=NAMES)
def model(request, tiny_checkpoint):
    return StandardizedTransformer(
        tiny_checkpoint(request.param), task="image-text-to-text", device="cpu", attn_implementation="eager"
    )


def prompt(model) -> str:
    return chat_prompt(model.processor, len(IMAGES), "What is in the picture?")


def inputs(model) -> dict[str, torch.Tensor]:
    return model.processor(text=[prompt(model)], images=IMAGES, return_tensors="pt")


def first_argument(served) -> torch.Tensor:
    """The hidden states a module was called with: its first positional argument, else ``hidden_states``."""
    args, kwargs = served
    return args[0] if args else kwargs["hidden_states"]


def block_with(model, *parts: str) -> int | None:
    """The first text block holding every one of ``parts`` (a hybrid stack's blocks hold different ones), or None."""
    return next((i for i, block in enumerate(model.layers) if all(child(block, part) for part in parts)), None)


def test_sizes_are_the_text_configs(model):
    text = model.config.get_text_config()
    assert (model.num_layers, model.hidden_size, model.vocab_size) == (
        text.num_hidden_layers, text.hidden_size, text.vocab_size)
    # a config without grouped keys names no key-value heads (OPT's): as many as the query heads
    kv_heads = getattr(text, "num_key_value_heads", None) or text.num_attention_heads
    assert (model.num_heads, model.num_kv_heads) == (text.num_attention_heads, kv_heads)
    assert model.head_dim == (getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads)
    assert model.intermediate_size == (getattr(text, "intermediate_size", None) or text.ffn_dim)  # OPT's spelling
    # Mllama's text model embeds 8 ids more than its head predicts (vocab_size + 8 rows, as its __init__ builds it)
    extra = 8 if getattr(text, "cross_attention_layers", None) is not None else 0
    assert model.embed_tokens._module.weight.shape == (model.vocab_size + extra, model.hidden_size)
    assert model.lm_head._module.weight.shape == (model.vocab_size, model.hidden_size)


def mlp_pre_norm(block) -> str:
    """The name of the norm before a block's MLP: post_attention_layernorm, but a sandwich-norm block (Gemma) has
    its own post_attention_layernorm after the attention, so its MLP's pre-norm keeps its native name."""
    return "pre_feedforward_layernorm" if child(block, "pre_feedforward_layernorm") else "post_attention_layernorm"


def post_norms_only(block) -> bool:
    """A block that norms its sublayers' outputs and nothing before them (EXAONE 4.0's): no pre-norm to read."""
    return child(block, "input_layernorm") is None and child(block, "post_feedforward_layernorm") is not None


@pytest.mark.parametrize("part", ["self_attn", "mlp"])
def test_pre_norms_feed_the_attention_and_the_mlp(model, part):
    # On a tower block (where the vision side has blocks), and on the first text block holding the sublayer (a hybrid
    # stack's blocks differ; OPT's hold no MLP module).
    text_block = block_with(model, part)
    tower = [model.vision.layers[0]] if model.vision.num_layers else []
    for block in (*tower, *([] if text_block is None else [model.layers[text_block]])):
        if part == "self_attn" and getattr(block, "windowed", False):
            continue  # a SAM block's attention receives the normed grid cut into windows (tests/test_got_ocr2_pp_chart2table.py)
        if post_norms_only(block):  # each sublayer receives the stream itself
            with model.trace(prompt(model), images=IMAGES) as tracer:
                stream = block.layer_input.save()
                if part == "mlp":
                    stream = nnsight.save(stream + block.attention_output)
                received = first_argument(getattr(block, part).inputs).save()
                tracer.stop()
            assert torch.equal(stream, received)
            continue
        norm = "input_layernorm" if part == "self_attn" else mlp_pre_norm(block)
        with model.trace(prompt(model), images=IMAGES) as tracer:
            normed = getattr(block, norm).output.save()
            received = first_argument(getattr(block, part).inputs).save()
            tracer.stop()
        if received.dim() == normed.dim() - 1:  # a packed block that squeezes its one row for the attention (MiniMax-M3-VL's)
            normed = normed.squeeze(0)
        assert torch.equal(normed, received)


def test_the_inputs_are_the_processors_and_the_embeddings(model):
    given = inputs(model)
    with model.trace(prompt(model), images=IMAGES) as tracer:
        images = model.vision.image_token_mask.save()
        ids = model.input_ids.save()
        mask = model.attention_mask.save()
        size = nnsight.save(model.input_size)
        received = first_argument(model.embed_tokens.inputs).save()
        embeddings = model.token_embeddings.save()
        tracer.stop()
    assert torch.equal(ids, given["input_ids"]) and torch.equal(mask, given["attention_mask"])
    assert tuple(size) == tuple(given["input_ids"].shape)
    # The embedding receives the prompt's ids, but at the image tokens a family may embed another id (Gemma 4, the pad).
    assert torch.equal(received[~images], given["input_ids"][~images])
    with torch.no_grad():
        assert torch.equal(embeddings, model.embed_tokens._module(received))


def test_writing_token_embeddings_changes_the_logits(model):
    with model.trace(prompt(model), images=IMAGES) as tracer:
        clean = model.logits.save()
        tracer.stop()
    with model.trace(prompt(model), images=IMAGES) as tracer:
        model.token_embeddings = torch.zeros_like(model.token_embeddings)
        edited = model.logits.save()
        tracer.stop()
    assert not torch.equal(edited, clean)


def test_next_token_probs_is_the_softmax_of_the_last_row(model):
    with model.trace(prompt(model), images=IMAGES) as tracer:
        logits = model.logits.save()
        probabilities = model.next_token_probs.save()
        tracer.stop()
    assert torch.equal(probabilities, logits[:, -1, :].softmax(-1))


def test_accessors_index_the_block_values(model):
    for value, part, name in (("attentions_output", "self_attn", "attention_output"), ("mlps_output", "mlp", "mlp_output")):
        index = block_with(model, part)
        if index is None:  # no block holds the part (OPT's MLP is inline): its values say why (test_vision_contracts)
            continue
        block = model.layers[index]
        with model.trace(prompt(model), images=IMAGES) as tracer:
            by_accessor = nnsight.save([model.layers_input[index], getattr(model, value)[index],
                                        model.layers_output[index]])
            tracer.stop()
        with model.trace(prompt(model), images=IMAGES) as tracer:
            by_name = nnsight.save([block.layer_input, getattr(block, name), block.layer_output])
            tracer.stop()
        with model.trace(prompt(model), images=IMAGES) as tracer:
            on_part = getattr(getattr(block, part), name).save()
            tracer.stop()
        for a, b in zip(by_accessor, by_name):
            assert torch.equal(a, b)
        assert torch.equal(on_part, by_name[1])
    assert len(model.layers_output) == model.num_layers


def test_writing_through_an_accessor_is_writing_the_block_value(model):
    with model.trace(prompt(model), images=IMAGES) as tracer:
        model.layers_output[-1] = torch.zeros_like(model.layers_output[-1])
        final = model.norm.input.save()  # the last block's output, with nothing added after it (DeepStack adds early)
        tracer.stop()
    assert torch.equal(final, torch.zeros_like(final))


def test_a_skipped_block_passes_its_input_on(model):
    # The last block: nothing is added to the stream after it (Qwen3-VL's DeepStack adds after the first ones).
    with model.trace(prompt(model), images=IMAGES) as tracer:
        clean = model.logits.save()
        tracer.stop()
    with model.trace(prompt(model), images=IMAGES) as tracer:
        entering = model.layers[-1].layer_input.save()
        model.skip_layer(-1)
        leaving = model.layers[-1].layer_output.save()
        final = model.norm.input.save()
        skipped = model.logits.save()
        tracer.stop()
    assert torch.equal(leaving, entering) and torch.equal(final, entering)
    assert not torch.equal(skipped, clean)


def test_skip_layers_replaces_a_range_with_the_given_tensor(model):
    last = model.num_layers - 1
    with model.trace(prompt(model), images=IMAGES) as tracer:
        replacement = torch.ones_like(model.layers[0].layer_input)
        model.skip_layers(0, last, skip_with=replacement)
        final = model.norm.input.save()
        tracer.stop()
    assert torch.equal(final, torch.ones_like(final))


def test_steering_adds_the_vector_at_the_chosen_positions_only(model):
    vector = torch.linspace(-1, 1, model.hidden_size)
    with model.trace(prompt(model), images=IMAGES) as tracer:
        clean = model.layers[-1].layer_output.save()
        tracer.stop()
    with model.trace(prompt(model), images=IMAGES) as tracer:
        model.steer([model.num_layers - 1], vector, factor=2.0, token_positions=[1, 3], batch_index=0)
        steered = model.layers[-1].layer_output.save()
        final = model.norm.input.save()
        tracer.stop()
    expected = clean.clone()
    expected[0, [1, 3]] += 2.0 * vector
    assert torch.equal(steered, expected) and torch.equal(final, expected)


def test_topk_closest_tokens_reads_a_hidden_state_through_the_head(model):
    with model.trace(prompt(model), images=IMAGES) as tracer:
        final = model.layers[-1].layer_output.save()
        logits = model.logits.save()
        tracer.stop()
    closest = model.get_topk_closest_tokens(final[0, -1], k=3)
    expected = model.probs_to_dict(logits[0, -1].softmax(-1), k=3)
    assert list(closest) == list(expected)
    assert len(model.get_topk_closest_tokens(final[0, -2:], k=3)) == 2
    with pytest.raises(ValueError, match=r"\[hidden_size\] or \[n, hidden_size\]"):
        model.get_topk_closest_tokens(final, k=3)


def test_bad_block_indices_are_refused(model):
    with pytest.raises(IndexError, match=f"the text model has {model.num_layers} blocks"):
        model.skip_layer(model.num_layers)
    with pytest.raises(ValueError, match="start <= end"):
        model.skip_layers(1, 0)
