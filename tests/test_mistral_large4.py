"""StandardizedTransformer on a tiny Mistral Large 4 checkpoint: Mistral 3's vision side on a latent-attention,
sparse-attention, mixture-of-experts text model, exact.

Every expected number comes from outside the code under test: the stock
processor, the configs' sizes, the modules' own weights, the native modules'
outputs (the indexer's choice, the experts') read in the same trace, or a
recomputation from other values read there. The spec's contracts
(test_vision_contracts.py) run on this checkpoint too, and the Pixtral tower's
behaviour and its grids (the suites of pixtral_inputs.py and packed_grids.py,
declared at the end); its vision side is Mistral 3's, so this file holds what
differs: the text model.
"""

from __future__ import annotations

import nnsight
import pytest
import torch
from packed_grids import PixtralGridSuite
from pixtral_inputs import ONE, TWO, PixtralTowerSuite, prompt

from envoys.families import mistral3

CHECKPOINT = "mistral_large4"


def test_the_vision_side_is_mistral3s_and_the_text_blocks_are_dense_then_moe(model):
    assert model.family.rename == mistral3.RENAME
    assert {cls: envoy for cls, envoy in model.family.envoys.items() if cls in mistral3.ENVOYS} == mistral3.ENVOYS
    assert type(model._module.model.language_model).__name__ == "MistralLarge4TextModel"
    assert type(model.layers[0].self_attn._module).__name__ == "MistralLarge4TextAttention"
    config = model.config.text_config
    assert config.first_k_dense_replace == 1 and config.n_routed_experts == 4
    assert type(model.layers[0].mlp._module).__name__ == "MistralLarge4TextMLP"
    assert type(model.layers[1].mlp._module).__name__ == "MistralLarge4TextMoE"


# -- latent attention under the sparse-attention indexer ------------------------------------------------------


@pytest.mark.parametrize("block", [0, 1])
def test_each_query_attends_to_the_keys_its_indexer_chose_alone(model, block):
    attention = model.layers[block].self_attn
    with model.trace(prompt(model, ONE), images=ONE):
        chosen = attention.indexer.output.save()
        probabilities = attention.attention_probabilities.save()
    topk = model.config.text_config.index_topk
    length = probabilities.shape[-1]
    assert chosen.shape == (1, length, topk) and length > topk
    picked = torch.zeros(length, length, dtype=torch.bool).scatter(-1, chosen[0].long(), True)
    allowed = picked & torch.ones(length, length, dtype=torch.bool).tril()  # the top-k of the causal keys
    # a query past the first topk positions keeps topk keys of the ones before it, the rest fewer: all it can see
    assert allowed.sum(-1).tolist() == [min(query + 1, topk) for query in range(length)]
    for head in range(probabilities.shape[1]):
        assert torch.equal(probabilities[0, head] > 0, allowed)
    assert torch.allclose(probabilities.sum(-1), torch.ones(probabilities.shape[:-1]))


def test_the_interior_has_the_latent_attentions_widths(model):
    attention = model.layers[1].self_attn
    with model.trace(prompt(model, ONE), images=ONE):
        queries = attention.attention_queries.save()
        keys = attention.attention_keys.save()
        values = attention.attention_values.save()
        probabilities = attention.attention_probabilities.save()
        heads = attention.attention_head_outputs.save()
        projected_in = attention.o_proj.input.save()
    config = model.config.text_config
    length, count = probabilities.shape[-1], config.num_attention_heads
    qk = config.qk_nope_head_dim + config.qk_rope_head_dim
    assert queries.shape == keys.shape == (1, count, length, qk)
    assert values.shape == (1, count, length, config.v_head_dim) and config.v_head_dim != qk
    assert heads.shape == (1, length, count, config.v_head_dim)
    assert torch.equal(probabilities @ values, heads.transpose(1, 2))
    assert torch.equal(heads.reshape(1, length, -1), projected_in)


def test_ablating_the_attention_probabilities_outside_the_first_key_makes_every_head_copy_it(model):
    attention = model.layers[0].self_attn
    text = prompt(model, ONE)
    with model.trace(text, images=ONE):
        values = attention.attention_values.save()
        probabilities = attention.attention_probabilities.save()
    first_only = torch.zeros_like(probabilities)
    first_only[..., 0] = 1
    with model.trace(text, images=ONE):
        attention.attention_probabilities = first_only
        heads = attention.attention_head_outputs.save()
    assert torch.equal(heads, values[:, :, :1].expand_as(values).transpose(1, 2))


# -- the mixture of experts ---------------------------------------------------------------------------------


def test_a_moe_blocks_mlp_output_is_its_routed_experts_plus_its_shared_expert(model):
    block = model.layers[1]
    with model.trace(prompt(model, TWO), images=TWO):
        parts = nnsight.save([block.layer_input, block.attention_output])
        routed = block.mlp.experts.output.save()
        shared = block.mlp.shared_experts.output.save()
        mlp_output = block.mlp_output.save()
        output = block.layer_output.save()
    layer_input, attention = parts
    assert torch.equal(mlp_output, routed.view(mlp_output.shape) + shared)
    assert torch.equal(layer_input + attention + mlp_output, output)


def test_zeroing_a_moe_blocks_mlp_output_leaves_the_stream_after_attention(model):
    block = model.layers[1]
    with model.trace(prompt(model, ONE), images=ONE):
        parts = nnsight.save([block.layer_input, block.attention_output])
        block.mlp_output[:] = 0
        output = block.layer_output.save()
    layer_input, attention = parts
    assert torch.equal(output, layer_input + attention)


def test_a_skipped_block_passes_on_the_stream_and_the_choice_of_keys_it_received(model):
    """A skipped block returns its input stream and the prev_topk_indices the loop gave it (block 0's choice), for a
    later block that reuses a choice; a block returning one item would break the loop's unpacking."""
    with model.trace(prompt(model, ONE), images=ONE):
        chosen = model.layers[0].self_attn.indexer.output.save()
        passed = model.layers[0].layer_output.save()
        model.skip_layer(1)
        returned = model.layers[1].output.save()
        final = model.norm.input.save()
    stream, choice = returned
    assert torch.equal(choice, chosen) and chosen.shape[-1] == model.config.text_config.index_topk
    assert torch.equal(stream, passed) and torch.equal(final, passed)


# -- the root ---------------------------------------------------------------------------------------------------


def test_logits_are_the_heads_output_soft_capped(model):
    cap = model.config.text_config.final_logit_softcapping
    with model.trace(prompt(model, ONE), images=ONE):
        head = model.lm_head.output.save()
        logits = model.logits.save()
    assert cap == 30.0
    assert torch.equal(logits, torch.tanh(head / cap) * cap)
    assert not torch.equal(logits, head)


# -- the suites of the Pixtral tower (pixtral_inputs.py) and of its grids (packed_grids.py) ----------------------


class TestPixtralTower(PixtralTowerSuite):
    """Mistral Large 4: Mistral 3's vision side, unchanged."""

    checkpoint = "mistral_large4"


class TestGrids(PixtralGridSuite):
    """Mistral Large 4: Mistral 3's vision side, its 2 x 2 patch merger with it."""

    checkpoint = "mistral_large4"
