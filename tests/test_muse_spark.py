"""StandardizedTransformer on a tiny Muse Spark checkpoint: Muse Glimmer's tower, and text blocks that gate the
residual stream (`envoys.blocks.gated_residual`).

What is particular to it (the spec's contracts run on it in test_vision_contracts.py, the tower's among them, which
test_muse_glimmer.py tests in detail): each sublayer's normed output joins the stream through a residual gate,
``alpha * residual + beta * normed``, per channel; the gates' scales are values (``attention_gate`` and ``mlp_gate``:
``output_scale``, beta, and ``residual_scale``, alpha), the block identity is stated with them, exactly, and the
plain sum does not hold; the scales and the values around them are what nnsight's own ``.source`` of the stock model
gives, and so is a sparse block's router_logits (before the router's multiplier); a write to the scales changes what
the gate adds; the logit lens on the last block is the logits; audio is not served and says why. Expected numbers
come from the builder's documented config and the stock model, never from the code under test.
"""

from __future__ import annotations

import nnsight
import pytest
import torch
from nnsight import TransformersModel
from swap_rules import without_rule

from envoys import StandardizedTransformer, Unavailable
from envoys.testing import chat_prompt, noise_image

#: 32x32 noise (4 image tokens) and 64 wide x 48 high (12).
IMAGES = [noise_image(32, 32, seed=0), noise_image(64, 48, seed=1)]

CHECKPOINT = "muse_spark"


def prompt(model) -> str:
    return chat_prompt(model.processor, len(IMAGES), "What is in the picture?")


def read_blocks(model) -> list[list[torch.Tensor]]:
    """Every block's values in forward order: layer_input, attention_output, the attention gate's beta and alpha,
    stream_after_attention, mlp_output, the MLP gate's beta and alpha, layer_output."""
    with model.trace(prompt(model), images=IMAGES) as tracer:
        reads = nnsight.save([])
        for block in model.layers:
            reads.append([
                block.layer_input, block.attention_output, block.attention_gate.output_scale,
                block.attention_gate.residual_scale, block.stream_after_attention, block.mlp_output,
                block.mlp_gate.output_scale, block.mlp_gate.residual_scale, block.layer_output,
            ])
        tracer.stop()
    return reads


def test_each_block_joins_its_sublayers_through_the_gates_exactly(model):
    """stream_after_attention == alpha_a * layer_input + beta_a * attention_output, layer_output == alpha_m *
    stream_after_attention + beta_m * mlp_output, exactly; the plain block sum does not hold."""
    hidden = model.hidden_size
    for index, values in enumerate(read_blocks(model)):
        layer_input, attention, beta_a, alpha_a, between, mlp, beta_m, alpha_m, output = values
        for scale in (beta_a, alpha_a, beta_m, alpha_m):
            assert scale.shape == (hidden,) and scale.dtype == torch.float32, index
        assert torch.equal(between, alpha_a * layer_input + beta_a * attention), index
        assert torch.equal(output, alpha_m * between + beta_m * mlp), index
        assert not torch.equal(layer_input + attention + mlp, output), index


def test_the_gates_scales_are_drawn_per_channel_and_keep_the_variance(model):
    """The builder draws each gate's parameter from N(0, 1) over a temperature of 0.3: beta = sigmoid(w) in (0, 1)
    varies over the channels, and alpha = sqrt(sigmoid(-w) * (1 + beta)) = sqrt((1 - beta) * (1 + beta)), so
    alpha**2 + beta**2 == 1 (to rounding) where the clamp at eps (1e-3) does not bind: no gate is an identity."""
    for values in read_blocks(model):
        for beta, alpha in ((values[2], values[3]), (values[6], values[7])):
            assert bool(((beta > 0) & (beta < 1)).all()) and beta.std() > 0.1
            unclamped = alpha**2 > 2e-3  # clear of the clamp, which sets alpha**2 to 1e-3
            assert bool(unclamped.any())
            torch.testing.assert_close(alpha[unclamped] ** 2 + beta[unclamped] ** 2, torch.ones(int(unclamped.sum())))
            assert not torch.equal(alpha, torch.ones_like(alpha))


def test_the_values_are_the_stock_models_at_nnsights_own_labels(model, tiny_checkpoint):
    """On a stock nnsight model of the same checkpoint, nnsight's own ``.source`` of each gate gives beta
    (``torch_sigmoid_0``) and alpha (``torch_sqrt_0``); the gate's inputs are the stream and the post-norm's output,
    its output the stream after it: the served values, bit for bit."""
    stock = TransformersModel(str(tiny_checkpoint(CHECKPOINT)), task="image-text-to-text", dispatch=True,
                              attn_implementation="eager")
    with stock.trace(prompt(model), images=IMAGES) as tracer:
        reads = nnsight.save([])
        for block in stock.model.language_model.layers:
            attention_gate, mlp_gate = block.post_attention_residual_gate, block.post_feedforward_residual_gate
            reads.append([
                attention_gate.inputs, attention_gate.source.torch_sigmoid_0.output,
                attention_gate.source.torch_sqrt_0.output, attention_gate.output,
                mlp_gate.inputs, mlp_gate.source.torch_sigmoid_0.output, mlp_gate.source.torch_sqrt_0.output,
                mlp_gate.output,
            ])
        tracer.stop()
    for index, (ours, theirs) in enumerate(zip(read_blocks(model), reads)):
        layer_input, attention, beta_a, alpha_a, between, mlp, beta_m, alpha_m, output = ours
        (attention_args, _), stock_beta_a, stock_alpha_a, stock_between, (mlp_args, _), stock_beta_m, stock_alpha_m, \
            stock_output = theirs
        assert torch.equal(beta_a, stock_beta_a) and torch.equal(alpha_a, stock_alpha_a), index
        assert torch.equal(layer_input, attention_args[0]) and torch.equal(attention, attention_args[1]), index
        assert torch.equal(between, stock_between), index
        assert torch.equal(beta_m, stock_beta_m) and torch.equal(alpha_m, stock_alpha_m), index
        assert torch.equal(between, mlp_args[0]) and torch.equal(mlp, mlp_args[1]), index
        assert torch.equal(output, stock_output), index


def test_the_sparse_blocks_router_logits_are_the_stock_models_before_its_multiplier(model, tiny_checkpoint):
    """Block 1's MLP is a mixture of experts: router_logits is the output of its router's ``F_linear_0`` on the stock
    model (nnsight's own ``.source``), and the router returns it times ``output_multiplier`` (0.5, the builder's);
    the block identity holds over it (test_each_block_joins_its_sublayers_through_the_gates_exactly)."""
    stock = TransformersModel(str(tiny_checkpoint(CHECKPOINT)), task="image-text-to-text", dispatch=True,
                              attn_implementation="eager")
    with stock.trace(prompt(model), images=IMAGES) as tracer:
        expected = stock.model.language_model.layers[1].mlp.gate.source.F_linear_0.output.save()
        tracer.stop()
    with model.trace(prompt(model), images=IMAGES) as tracer:
        logits = model.layers[1].mlp.router_logits.save()
        returned = model.layers[1].mlp.gate.output[0].save()
        tracer.stop()
    assert torch.equal(logits, expected) and torch.equal(logits * 0.5, returned)


def test_the_sublayers_values_are_the_post_norms_outputs(model):
    """attention_output and mlp_output are what post_attention_layernorm and post_feedforward_layernorm give (not the
    sublayers' own outputs), and answer on the sublayers too."""
    block = model.layers[0]
    with model.trace(prompt(model), images=IMAGES) as tracer:
        own_attention = block.self_attn.output[0].save()
        on_attention = block.self_attn.attention_output.save()
        attention = block.attention_output.save()
        normed_attention = block.post_attention_layernorm.output.save()
        own_mlp = block.mlp.output.save()
        on_mlp = block.mlp.mlp_output.save()
        mlp = block.mlp_output.save()
        tracer.stop()
    assert torch.equal(attention, normed_attention) and torch.equal(on_attention, attention)
    assert torch.equal(on_mlp, mlp) and not torch.equal(attention, own_attention) and not torch.equal(mlp, own_mlp)


def test_a_gate_opened_and_closed_passes_the_stream_on(model):
    """With the attention gate's beta written to zeros and then its alpha (which the gate computes from beta) to
    ones, the attention adds nothing: the stream after it is the block's input, exactly, and the logits change."""
    block = model.layers[0]
    with model.trace(prompt(model), images=IMAGES) as tracer:
        clean = model.logits.save()
        tracer.stop()
    with model.trace(prompt(model), images=IMAGES) as tracer:
        layer_input = block.layer_input.save()
        block.attention_gate.output_scale = torch.zeros(model.hidden_size)
        block.attention_gate.residual_scale = torch.ones(model.hidden_size)
        between = block.stream_after_attention.save()
        edited = model.logits.save()
        tracer.stop()
    assert torch.equal(between, layer_input) and not torch.equal(edited, clean)


def test_a_write_to_beta_moves_alpha_which_the_gate_computes_from_it(model):
    """alpha = sqrt(max(sigmoid(-w) * (1 + beta), eps)): beta written to zeros, alpha is sqrt(sigmoid(-w)) (the
    stock gate's parameter and temperature, 0.3, and eps, 1e-3)."""
    gate = model.layers[1].mlp_gate
    parameter = model._module.model.language_model.layers[1].post_feedforward_residual_gate.gate.detach()
    with model.trace(prompt(model), images=IMAGES) as tracer:
        gate.output_scale = torch.zeros(model.hidden_size)
        alpha = gate.residual_scale.save()
        tracer.stop()
    expected = torch.sqrt(torch.clamp(torch.sigmoid(-parameter / 0.3) * 1.0, min=1e-3))
    assert torch.equal(alpha, expected)


def test_the_logit_lens_on_the_last_block_is_the_logits(model):
    with model.trace(prompt(model), images=IMAGES) as tracer:
        last = model.layers[-1].layer_output.save()
        logits = model.logits.save()
        tracer.stop()
    with torch.no_grad():
        assert torch.equal(model.project_on_vocab(last), logits)


def test_the_lens_of_an_earlier_block_carries_its_stream_through_the_later_gates(model):
    """What of block 0's stream reaches the final norm is that stream times every later residual_scale: with block 1's
    sublayers adding nothing (their outputs written to zeros), the final norm receives alpha_m * (alpha_a * x) and
    the logits are project_on_vocab of it, exactly; of the stream itself they are not."""
    block = model.layers[1]
    with model.trace(prompt(model), images=IMAGES) as tracer:
        stream = model.layers[0].layer_output.save()
        block.attention_output = torch.zeros_like(block.attention_output)
        alpha_a = block.attention_gate.residual_scale.save()
        block.mlp_output = torch.zeros_like(block.mlp_output)
        alpha_m = block.mlp_gate.residual_scale.save()
        final = model.norm.input.save()
        logits = model.logits.save()
        tracer.stop()
    carried = alpha_m * (alpha_a * stream)
    assert torch.equal(final, carried)
    with torch.no_grad():
        assert torch.equal(model.project_on_vocab(carried), logits)
        assert not torch.equal(model.project_on_vocab(stream), logits)


def test_the_gates_without_their_rule_say_why(tiny_checkpoint, monkeypatch):
    """Where no rule rewrites the gate's forward, its scales are Unavailable, saying so; the block's stream values,
    read at module inputs and outputs, are still served."""
    without_rule(monkeypatch, "muse_spark.residual-gate")
    bare = StandardizedTransformer(tiny_checkpoint(CHECKPOINT), task="image-text-to-text", attn_implementation="eager")
    with pytest.raises(Unavailable, match=r"residual_scale is unavailable: no rewrite rule exposes torch_sqrt_0 in "
                                          r"MuseSparkResidualGate\.forward"):
        bare.layers[0].attention_gate.residual_scale  # noqa: B018
    support = bare.support()
    assert support["stream_after_attention"] is None
    for gate in ("post_attention_residual_gate", "post_feedforward_residual_gate"):
        for scale in ("output_scale", "residual_scale"):
            assert set(support[f"{gate}.{scale}"]) == {0, 1}
            assert all(reason.startswith("no rewrite rule exposes") for reason in support[f"{gate}.{scale}"].values())


def test_audio_is_not_served_and_says_why(model):
    assert "audio" not in model.family.media
    assert "convolution" in model.family.media.not_served["audio"]
