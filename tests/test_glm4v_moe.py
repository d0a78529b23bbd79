"""StandardizedTransformer on a tiny GLM-4.5V checkpoint (glm4v_moe): GLM-4.1V's tower copied, on plain pre-norm text
blocks, the first dense, the rest a mixture of routed and shared experts.

What is particular to it (the spec's contracts run on it in
test_vision_contracts.py, the router's in test_moe_router.py): the tower is
GLM-4.1V's under the copy's class names, so test_glm.py's tower tests run on
it here as they are (the per-image attention, what the first block receives,
the merge and its order); the names land on the copy's modules and the text
blocks have none of GLM-4's post-norms; block 0's MLP is dense and block 1's
the sparse block, whose output (the routed experts' weighted sum plus the
shared experts) is ``mlp_output``, so the block identity holds on both; the
router is DeepSeek-V3's (sigmoid scores, a score-correction bias, expert
groups), so its choice is its own output and the logits' top-k only while the
bias is zero, as the builder leaves it. Expected numbers come from the
builder's documented config, the processor and the modules themselves, never
from the code under test.
"""

from __future__ import annotations

import nnsight
import pytest
import torch
from test_glm import (  # noqa: F401  (test_glm's tower tests, collected here on this family's model)
    ONE,
    TWO,
    prompt,
    test_a_merge_block_of_tower_output_reaches_its_image_token_alone,
    test_queries_keys_and_values_are_what_each_image_attends_with,
    test_the_merger_reads_the_convolution_of_each_merge_block,
    test_the_tower_mlp_width_is_read_off_the_mlp,
    test_what_the_first_block_receives,
    test_writing_patch_embeddings_reaches_the_first_block,
)

from envoys import Unavailable

CHECKPOINT = "glm4v_moe"


def test_the_modules_are_the_copys_and_the_text_blocks_are_plain(model):
    inner = model._module.model
    visual = inner.visual
    assert [type(m).__name__ for m in (visual, visual.blocks[0].attn, visual.blocks[0].mlp)] == [
        "Glm4vMoeVisionModel", "Glm4vMoeVisionAttention", "Glm4vMoeisionMlp"]
    native = inner.language_model.layers
    assert [type(block.mlp._module).__name__ for block in model.layers] == ["Glm4vMoeTextMLP", "Glm4vMoeTextMoE"]
    assert not any(hasattr(block, "post_self_attn_layernorm") or hasattr(block, "post_mlp_layernorm")
                   for block in native)
    text = model.config.get_text_config()
    assert (text.n_routed_experts, text.num_experts_per_tok, text.first_k_dense_replace) == (4, 2, 1)
    assert (text.n_group, text.topk_group, text.n_shared_experts) == (1, 1, 1)


def test_the_sparse_block_adds_its_routed_and_shared_experts(model):
    """mlp_output is the sparse block's output, the experts' routed sum plus the shared experts' output; the experts
    receive the block's tokens flattened with the router's own choice and weights, which are the top 2 of
    router_logits and their sigmoids, normalised, times routed_scaling_factor; layer_input + attention_output +
    mlp_output == layer_output on the dense block and the sparse one."""
    text = model.config.get_text_config()
    with model.trace(prompt(model, TWO), images=TWO) as tracer:
        reads = nnsight.save([])
        for index, block in enumerate(model.layers):
            layer_input, attention = block.layer_input, block.attention_output
            if index == 1:
                mlp = block.mlp
                logits = mlp.router_logits.save()
                routed = mlp.gate.output.save()
                experts_in, experts_out = mlp.experts.inputs.save(), mlp.experts.output.save()
                shared = mlp.shared_experts.output.save()
            reads.append(nnsight.save([layer_input, attention, block.mlp_output, block.layer_output]))
        tracer.stop()
    (hidden, chosen, weights), _ = experts_in
    returned_logits, returned_weights, returned_chosen = routed
    assert torch.equal(logits, returned_logits)
    assert torch.equal(chosen, returned_chosen) and torch.equal(weights, returned_weights)
    assert torch.equal(chosen.sort(-1).values, logits.topk(text.num_experts_per_tok).indices.sort(-1).values)
    scores = logits.sigmoid().gather(1, chosen)
    assert torch.equal(weights, scores / (scores.sum(-1, keepdim=True) + 1e-20) * text.routed_scaling_factor)
    layer_input, attention, mlp, output = reads[1]
    assert hidden.shape == (layer_input.shape[0] * layer_input.shape[1], model.hidden_size)
    assert torch.equal(mlp, experts_out.view(mlp.shape) + shared)
    for index, (layer_input, attention, mlp, output) in enumerate(reads):
        assert torch.equal(layer_input + attention + mlp, output), index


def test_the_routers_choice_is_its_own_output_not_the_logits_top_k(model):
    """The score-correction bias moves the choice and not the logits: with expert 3's bias raised far above the
    scores, every token runs expert 3, while router_logits are what they were."""
    router = model._module.model.language_model.layers[1].mlp.gate
    with model.trace(prompt(model, ONE), images=ONE) as tracer:
        clean = model.layers[1].mlp.router_logits.save()
        tracer.stop()
    try:
        router.e_score_correction_bias[3] = 10.0
        with model.trace(prompt(model, ONE), images=ONE) as tracer:
            logits = model.layers[1].mlp.router_logits.save()
            chosen = model.layers[1].mlp.gate.output[2].save()
            tracer.stop()
    finally:
        router.e_score_correction_bias.zero_()
    assert torch.equal(logits, clean)
    assert (chosen == 3).any(-1).all()
    assert not (clean.topk(2).indices == 3).any(-1).all()


def test_the_dense_block_says_it_has_no_router(model):
    with pytest.raises(Unavailable, match=r"layers\[0\]\.mlp is a dense MLP \(Glm4vMoeTextMLP\)"):
        model.layers[0].mlp.router_logits
