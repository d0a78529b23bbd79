"""StandardizedTransformer on a tiny Qwen3.5-MoE checkpoint: Qwen3.5's tower on hybrid DeltaNet / attention blocks
whose every MLP is a mixture of experts with a shared expert.

What is particular to it (the spec's contracts run on it in
test_vision_contracts.py, the router's in test_moe_router.py, the text-only
load in test_text_only_checkpoints.py): the names land on the MoE copy's
modules; block 0 is a gated DeltaNet and block 1 softmax attention, each with
the values of its own mixer, the DeltaNet's read at the copy's kernel call;
both blocks' MLP is the sparse block (a top-k router ``mlp.gate``, the routed
``mlp.experts``, a shared expert behind a sigmoid gate), whose output, the
routed sum plus the gated shared expert, is ``mlp_output``, so the block
identity holds with whichever mixer the block has; the experts are weighted
by the softmax of ``router_logits`` over the chosen experts, renormalised; no
block is dense. Expected numbers come from the builder's documented config,
the processor and the modules themselves, never from the code under test.
"""

from __future__ import annotations

import nnsight
import pytest
import torch

pytest.importorskip("transformers.models.qwen3_5_moe", reason="target absent: this transformers release has no qwen3_5_moe")

from packed_grids import QwenLearnedPositionsGrids  # noqa: E402

from envoys import Unavailable  # noqa: E402
from envoys.testing import chat_prompt, noise_image  # noqa: E402

#: 32x32 noise (16 patches, 4 tokens) and 48 high x 64 wide (48 patches, 12 tokens).
IMAGES = [noise_image(32, 32, seed=0), noise_image(64, 48, seed=1)]


CHECKPOINT = "qwen3_5_moe"


def prompt(model) -> str:
    return chat_prompt(model.processor, len(IMAGES), "What is in the picture?")


def test_the_modules_are_the_moe_copys(model):
    assert type(model.vision.layers[0].self_attn._module).__name__ == "Qwen3_5MoeVisionAttention"
    text = model.config.get_text_config()
    assert text.layer_types == ["linear_attention", "full_attention"]
    assert (text.num_experts, text.num_experts_per_tok) == (4, 2)
    assert [type(block.mlp._module).__name__ for block in model.layers] == ["Qwen3_5MoeSparseMoeBlock"] * 2


def test_each_block_has_its_own_mixers_values(model):
    """Block 0's DeltaNet values are read at the copy's kernel call ([batch, seq, heads, head_dim]: 2 key heads, 4
    value heads of 16); block 1's attention values are its softmax attention's; each lacks the other's, saying why
(block 1 has no linear_attn child: support() gives the reason)."""
    tokens = int(model.processor(text=[prompt(model)], images=IMAGES, return_tensors="pt")["input_ids"].shape[1])
    with model.trace(prompt(model), images=IMAGES) as tracer:
        queries = model.layers[0].linear_attn.linear_attention_queries.save()
        values = model.layers[0].linear_attn.linear_attention_values.save()
        mixed = model.layers[0].linear_attn.output.save()
        pattern = model.layers[1].self_attn.attention_probabilities.save()
        tracer.stop()
    assert queries.shape == (1, tokens, 2, 16) and values.shape == (1, tokens, 4, 16)
    assert mixed.shape == (1, tokens, model.hidden_size)
    assert pattern.shape == (1, 2, tokens, tokens)
    with pytest.raises(Unavailable, match=r"layers\[0\]'s token mixer is a gated DeltaNet"):
        model.layers[0].attention_output
    assert "layers[1]'s token mixer is softmax attention" in model.support()["linear_attn.linear_attention_queries"][1]


def test_the_sparse_block_adds_its_routed_experts_and_its_gated_shared_expert(model):
    """mlp_output is the sparse block's output: the experts' routed sum plus the shared expert scaled by the sigmoid of
    its gate, in the stream's shape; the experts receive the block's tokens flattened and the chosen experts and
    weights that are the softmax of router_logits over the chosen, renormalised; layer_input + (the block's mixer's
    output) + mlp_output == layer_output on both blocks."""
    top_k = model.config.get_text_config().num_experts_per_tok
    with model.trace(prompt(model), images=IMAGES) as tracer:
        reads = nnsight.save([])
        for index, block in enumerate(model.layers):
            layer_input = block.layer_input
            mixed = block.linear_attn.output if index == 0 else block.attention_output
            mlp = block.mlp
            shared = mlp.shared_expert.output
            logits = mlp.router_logits
            experts_in, experts_out = mlp.experts.inputs, mlp.experts.output
            gate = mlp.shared_expert_gate.output
            reads.append(nnsight.save(
                [layer_input, mixed, shared, logits, experts_in, experts_out, gate, block.mlp_output,
                 block.layer_output]))
        tracer.stop()
    for index, (layer_input, mixed, shared, logits, experts_in, experts_out, gate, mlp, output) in enumerate(reads):
        (hidden, chosen, weights), _ = experts_in
        assert hidden.shape == (layer_input.shape[0] * layer_input.shape[1], model.hidden_size), index
        top = torch.softmax(logits, dim=-1, dtype=torch.float).topk(top_k, dim=-1)
        assert torch.equal(chosen, top.indices), index
        assert torch.equal(weights, (top.values / top.values.sum(-1, keepdim=True)).to(logits.dtype)), index
        assert torch.equal(mlp, (experts_out + torch.sigmoid(gate) * shared).view(mlp.shape)), index
        assert torch.equal(layer_input + mixed + mlp, output), index


def test_no_block_is_dense(model):
    """The decoder layer builds the sparse block on every layer: router_logits is served on both."""
    assert model.support()["mlp.router_logits"] is None
    assert all(hasattr(block.mlp._module, "gate") for block in model.layers)


class TestGrids(QwenLearnedPositionsGrids):
    """Qwen3.5-MoE: Qwen3.5's tower in the MoE copy's modules, its learned position table with it."""

    checkpoint = "qwen3_5_moe"
