"""The router of mixture-of-experts text blocks (`envoys.blocks.moe`), on every tiny checkpoint with sparse blocks.

``layers[i].mlp.router_logits`` is the output of the router's logits call,
``[tokens, experts]``: the logits the router module returns beside its choice,
exactly; its top-k are the experts that run on each token (every builder's
router is plain top-k over every expert: one expert group and no score bias);
and a write to it changes which experts run. On a dense block it is
Unavailable, saying the block is dense. The block identity with the sparse
block's ``mlp_output`` is a text-surface contract (test_text_surface.py).

The numbers (which blocks are sparse, experts, top-k, the router's child and
what it returns) are each row's ``moe`` (`envoys.testing.contract.MoeRow`),
the builders' documented configs and transformers' router classes, not the
code under test. Every trace stops after its last read,
as Llama 4's must.
"""

from __future__ import annotations

import nnsight
import pytest
import torch

from envoys import StandardizedTransformer, Unavailable
from envoys.core.standard import child
from envoys.testing import CONTRACTS, chat_prompt, noise_image
from envoys.testing.contract import MoeRow

IMAGES = [noise_image(32, 32, seed=0)]


#: Every checkpoint's mixture-of-experts blocks, as its row states them (its builder's documented config).
MOE = {name: row.moe for name, row in CONTRACTS.items() if row.moe is not None and not row.moe.split}
#: Blocks whose experts are split by modality (``router_logits`` is the block's assembled logits, read-only; each
#: router's, and the writes, are tested in the family's own file): here, what support() says of the dense blocks.
SPLIT = {name: row.moe for name, row in CONTRACTS.items() if row.moe is not None and row.moe.split}


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


def ran(name: str, mlp, moe: MoeRow, routed, tokens: int):
    """Which experts ran on each token, ``[tokens, experts]`` bool: the indices the experts' module is called with;
    where every expert runs (Llama 4's), weighted by its router's scores (``routed[0]``), those that are not zero."""
    if moe.every_expert_runs:
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
        assert torch.equal(logits * moe.logits_scale if moe.logits_scale != 1 else logits, returned), index
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


def says_which_blocks_are_dense(model, moe: MoeRow) -> None:
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
