"""StandardizedTransformer on a tiny Qwen3-VL-MoE checkpoint: Qwen3-VL's tower and DeepStack on MoE text blocks.

What is particular to it (the spec's contracts run on it in
test_vision_contracts.py, the router's in test_moe_router.py): the names land
on the MoE copy's modules; block 0's MLP is the sparse block (a top-k router
``mlp.gate``, the routed ``mlp.experts``, no shared expert) whose output, the
routed sum alone, is ``mlp_output``, so the block identity holds; the experts
are weighted by the softmax of ``router_logits`` over the chosen experts,
renormalised; block 1's MLP is dense (``mlp_only_layers`` [1]); DeepStack adds
the tower's tapped block 0, merged by its own merger, after text block 0.
Expected numbers come from the builder's documented config, the processor and
the modules themselves, never from the code under test.
"""

from __future__ import annotations

import nnsight
import torch

from envoys.testing import chat_prompt, noise_image

#: 32x32 noise (16 patches, 4 tokens) and 48 high x 64 wide (48 patches, 12 tokens).
IMAGES = [noise_image(32, 32, seed=0), noise_image(64, 48, seed=1)]


CHECKPOINT = "qwen3_vl_moe"


def prompt(model) -> str:
    return chat_prompt(model.processor, len(IMAGES), "What is in the picture?")


def test_the_text_mlps_are_the_moe_copys(model):
    assert [type(block.mlp._module).__name__ for block in model.layers] == [
        "Qwen3VLMoeTextSparseMoeBlock", "Qwen3VLMoeTextMLP"]
    text = model.config.get_text_config()
    assert (text.num_experts, text.num_experts_per_tok, text.mlp_only_layers) == (4, 2, [1])


def test_the_sparse_block_adds_its_routed_experts_and_the_block_identity_holds(model):
    """mlp_output is the sparse block's output, the experts' routed sum in the stream's shape; the experts receive
    the block's tokens flattened, the chosen experts and weights that are the softmax of router_logits over the
    chosen, renormalised; layer_input + attention_output + mlp_output == layer_output on both blocks."""
    top_k = model.config.get_text_config().num_experts_per_tok
    with model.trace(prompt(model), images=IMAGES) as tracer:
        reads = nnsight.save([])
        for index, block in enumerate(model.layers):
            layer_input, attention = block.layer_input, block.attention_output
            if index == 0:
                logits = block.mlp.router_logits.save()
                experts_in, experts_out = block.mlp.experts.inputs.save(), block.mlp.experts.output.save()
            reads.append(nnsight.save([layer_input, attention, block.mlp_output, block.layer_output]))
        tracer.stop()
    (hidden, chosen, weights), _ = experts_in
    probabilities = torch.softmax(logits, dim=-1, dtype=torch.float)
    top = probabilities.topk(top_k, dim=-1)
    assert torch.equal(chosen, top.indices)
    assert torch.equal(weights, (top.values / top.values.sum(-1, keepdim=True)).to(logits.dtype))
    layer_input, attention, mlp, output = reads[0]
    assert hidden.shape == (layer_input.shape[0] * layer_input.shape[1], model.hidden_size)
    assert torch.equal(mlp, experts_out.view(mlp.shape))
    for index, (layer_input, attention, mlp, output) in enumerate(reads):
        assert torch.equal(layer_input + attention + mlp, output), index


def test_deepstack_adds_the_tapped_block_merged_after_text_block_0(model):
    with model.trace(prompt(model), images=IMAGES) as tracer:
        mask = model.vision.image_token_mask.save()
        merged = model.vision.deepstack_merger_list[0].output.save()
        out = model.layers[0].layer_output.save()
        added = model.layers[0].deepstack_output.save()
        entering = model.layers[1].input.save()
        tracer.stop()
    assert len(model._module.model.visual.deepstack_merger_list) == 1
    assert torch.equal(added, merged) and added.shape == (4 + 12, model.hidden_size)
    assert torch.equal(entering[mask], out[mask] + added) and torch.equal(entering[~mask], out[~mask])
