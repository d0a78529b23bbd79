"""The router of mixture-of-experts text blocks (`envoys.blocks.moe`), on every tiny checkpoint with sparse blocks.

``layers[i].mlp.router_logits`` is the output of the router's logits call,
``[tokens, experts]``: the logits the router module returns beside its choice,
exactly; its top-k are the experts that run on each token (every builder's
router is plain top-k over every expert: one expert group and no score bias);
and a write to it changes which experts run. On a dense block it is
Unavailable, saying the block is dense. The block identity with the sparse
block's ``mlp_output`` is a text-surface contract (test_text_surface.py).

The numbers (which blocks are sparse, experts, top-k, the router's child and
what it returns) are the builders' documented configs and transformers'
router classes, not the code under test. Every trace stops after its last read,
as Llama 4's must.
"""

from __future__ import annotations

from dataclasses import dataclass

import nnsight
import pytest
import torch

from envoys import StandardizedTransformer, Unavailable
from envoys.core.standard import child
from envoys.testing import chat_prompt, noise_image

IMAGES = [noise_image(32, 32, seed=0)]


@dataclass(frozen=True)
class Moe:
    sparse: tuple[int, ...]  #: the text blocks whose MLP is a mixture of experts
    experts: int
    top_k: int
    router: str = "gate"  #: the router's name under the block's MLP
    logits_item: int = 0  #: which item of the router module's output is its logits


#: From envoys/testing/: aria.py (2 blocks, 4 experts, 2 a token), llama4.py (block 0 a MoE of 2 experts, top 1; its
#: router returns (scores, logits)), kimi_k25.py and mistral_large4.py (block 1 of 4 experts, 2 a token),
#: nemotron_h_omni.py (blocks 1 and 3 of 4, 4 experts, 2 a token), qwen3_vl_moe.py and qwen3_omni_moe_thinker.py (block 0
#: of 4 experts, 2 a token),
#: qwen3_5_moe.py (blocks 0 and 1, 4 experts, 2 a token), glm4v_moe.py (block 1, 4 experts, 2 a token; one group, no
#: score bias), dots3_note.py (block 1, 4 experts, 2 a token; one group, no score bias).
MOE = {
    "aria": Moe(sparse=(0, 1), experts=4, top_k=2, router="router"),
    "llama4": Moe(sparse=(0,), experts=2, top_k=1, router="router", logits_item=1),
    "kimi_k25": Moe(sparse=(1,), experts=4, top_k=2),
    "mistral_large4": Moe(sparse=(1,), experts=4, top_k=2),
    "nemotron_h_omni": Moe(sparse=(1, 3), experts=4, top_k=2),
    "qwen3_vl_moe": Moe(sparse=(0,), experts=4, top_k=2),
    "qwen3_omni_moe_thinker": Moe(sparse=(0,), experts=4, top_k=2),
    "qwen3_5_moe": Moe(sparse=(0, 1), experts=4, top_k=2),
    "glm4v_moe": Moe(sparse=(1,), experts=4, top_k=2),
    "dots3_note": Moe(sparse=(1,), experts=4, top_k=2),
}

#: Blocks whose experts are split by modality, each set with its own router (ernie4_5_vl_moe.py: block 1, 4 experts a
#: modality, 2 a token): ``router_logits`` is the block's assembled logits, read-only; each router's, and the writes,
#: are tested in test_ernie4_5_vl_moe.py. Here, what support() says of the dense blocks.
SPLIT = {
    "ernie4_5_vl_moe": Moe(sparse=(1,), experts=4, top_k=2, router="text_moe.gate"),
}


@pytest.fixture(scope="module", params=list(MOE))
def name(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def model(name, tiny_checkpoint):
    return StandardizedTransformer(
        tiny_checkpoint(name), task="image-text-to-text", device="cpu", attn_implementation="eager"
    )


def prompt(model) -> str:
    return chat_prompt(model.processor, len(IMAGES), "What is in the picture?")


def ran(name: str, mlp, moe: Moe, routed, tokens: int):
    """Which experts ran on each token, ``[tokens, experts]`` bool: the indices the experts' module is called with;
    Llama 4's runs every expert on every token, weighted by its router's scores (``routed[0]``), zero off its choice."""
    if name == "llama4":
        return routed[0] > 0
    indices = mlp.experts.inputs[0][1]
    return torch.zeros(tokens, moe.experts, dtype=torch.bool).scatter(1, indices, True)


def top_k(logits: torch.Tensor, k: int) -> torch.Tensor:
    return torch.zeros_like(logits, dtype=torch.bool).scatter(1, logits.topk(k).indices, True)


def test_the_router_logits_are_the_routers_and_pick_the_experts_that_run(model, name):
    moe = MOE[name]
    tokens = int(model.processor(text=[prompt(model)], images=IMAGES, return_tensors="pt")["input_ids"].numel())
    # two traces of the same prompt: where the router is a bare Linear its output comes before the call the logits
    # are read at (transformers before 5.2x), inside the router module's forward after it (5.24)
    with model.trace(prompt(model), images=IMAGES) as tracer:
        served = nnsight.save([model.layers[index].mlp.router_logits for index in moe.sparse])
        tracer.stop()
    with model.trace(prompt(model), images=IMAGES) as tracer:
        reads = nnsight.save([])
        for index in moe.sparse:
            mlp = model.layers[index].mlp
            routed = getattr(mlp, moe.router).output
            reads.append(nnsight.save([routed[moe.logits_item], ran(name, mlp, moe, routed, tokens)]))
        tracer.stop()
    for index, logits, (returned, chosen) in zip(moe.sparse, served, reads, strict=True):
        assert logits.shape == (tokens, moe.experts), index
        assert torch.equal(logits, returned), index
        assert torch.equal(top_k(logits, moe.top_k), chosen), index


def test_a_write_to_the_router_logits_changes_which_experts_run(model, name):
    moe = MOE[name]
    index = moe.sparse[0]
    tokens = int(model.processor(text=[prompt(model)], images=IMAGES, return_tensors="pt")["input_ids"].numel())
    with model.trace(prompt(model), images=IMAGES) as tracer:
        mlp = model.layers[index].mlp
        clean_logits = mlp.router_logits.save()
        clean = mlp.mlp_output.save()
        tracer.stop()
    with model.trace(prompt(model), images=IMAGES) as tracer:
        mlp = model.layers[index].mlp
        mlp.router_logits = -mlp.router_logits  # the least likely experts now score highest
        chosen = nnsight.save(ran(name, mlp, moe, getattr(mlp, moe.router).output, tokens))
        edited = mlp.mlp_output.save()
        tracer.stop()
    assert torch.equal(chosen, top_k(-clean_logits, moe.top_k))
    assert not torch.equal(chosen, top_k(clean_logits, moe.top_k))
    assert not torch.equal(edited, clean)


def test_support_says_which_blocks_are_dense(model, name):
    says_which_blocks_are_dense(model, MOE[name])


@pytest.mark.parametrize("split", list(SPLIT))
def test_support_says_which_split_blocks_are_dense(split, tiny_checkpoint):
    model = StandardizedTransformer(tiny_checkpoint(split), task="image-text-to-text", device="cpu")
    says_which_blocks_are_dense(model, SPLIT[split])


def says_which_blocks_are_dense(model, moe: Moe) -> None:
    support = model.support()
    dense = {index for index in range(model.num_layers) if index not in moe.sparse}
    reasons = support["mlp.router_logits"] or {}
    assert set(reasons) == dense
    for index in dense:
        if child(model.layers[index], "mlp") is None:  # a hybrid block with no MLP at all (NemotronH's Mamba2 and
            continue  # attention blocks): the text surface's gap, not a dense MLP
        assert f"layers[{index}].mlp is a dense MLP" in reasons[index], reasons[index]
        with pytest.raises(Unavailable, match=rf"layers\[{index}\].mlp is a dense MLP .*it has no router"):
            model.layers[index].mlp.router_logits
