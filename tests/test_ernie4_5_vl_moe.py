"""StandardizedTransformer on a tiny ERNIE-4.5-VL checkpoint (ernie4_5_vl_moe): what is particular to it, exact.

The spec's contracts (the scatter and the mask, the packed stream and every
block's identity, the pattern's per-image reason, ablation, sizes, support,
generation) run on it in test_vision_contracts.py. This file holds the names,
the per-image attention, what the first block receives, what the resampler
does between ``tower_output`` and ``image_features``, and the modality-split
mixture of experts: each token routed by its modality's router, the block's
assembled ``router_logits`` (read-only) and each router's own (writable).
Every expected number comes from the builder's documented config, the stock
processor's outputs (``image_grid_thw``, ``moe_mm_token_type_ids``), the
modules' own weights, or a recomputation from other values read in the same
trace, never from the code under test.
"""

from __future__ import annotations

import nnsight
import pytest
import torch
from family_inputs import attends_per_image, prompt

from envoys import Unavailable
from envoys.testing import chat_prompt, noise_image

ONE = [noise_image(32, 32, seed=0)]
TWO = [noise_image(32, 32, seed=0), noise_image(64, 48, seed=1)]  # 64 wide, 48 high: a 6x8 patch grid
EXPERTS, TOP_K = 4, 2  # envoys/testing/ernie4_5_vl_moe.py: 4 experts a modality, 2 a token; block 1 sparse


CHECKPOINT = "ernie4_5_vl_moe"


def inputs(model, images):
    return model.processor(text=[prompt(model, images)], images=images or None, return_tensors="pt")


def top_k(logits: torch.Tensor, k: int) -> torch.Tensor:
    return torch.zeros_like(logits, dtype=torch.bool).scatter(1, logits.topk(k).indices, True)


def ran(indices: torch.Tensor) -> torch.Tensor:
    """Which experts ran on each token, ``[tokens, experts]`` bool, from the indices the experts were called with."""
    return torch.zeros(indices.shape[0], EXPERTS, dtype=torch.bool).scatter(1, indices, True)


# -- names -----------------------------------------------------------------------------------------


def test_the_text_mlps_are_dense_then_moe(model):
    assert [type(block.mlp._module).__name__ for block in model.layers] == [
        "Ernie4_5_VLMoeMLP", "Ernie4_5_VLMoeMoeBlock"]
    assert model.config.get_text_config().mlp_layer_types == ["dense", "sparse"]


# -- the tower -------------------------------------------------------------------------------------


def test_queries_keys_and_values_are_what_each_image_attends_with(model):
    """The last block attends per image: each kernel call is eager attention over its image's slice, at
    ``cu_seqlens``, of the whole queries, keys and values, and the calls joined are attention_head_outputs."""
    assert attends_per_image(model, TWO) == [16, 48]


def test_patch_embeddings_are_the_linear_map_of_each_patch_and_what_the_first_block_receives(model):
    """The tower maps each of the processor's flattened patches linearly, in the processor's (merge-block) order, and
    adds no position embedding (its positions are the attention's rotary embedding)."""
    pixels = inputs(model, TWO)["pixel_values"]
    with model.trace(prompt(model, TWO), images=TWO) as tracer:
        patches = model.vision.patch_embeddings.save()
        first = model.vision.layers[0].layer_input.save()
        tracer.stop()
    with torch.no_grad():
        expected = model._module.model.vision_tower.patch_embed.proj(pixels)
    assert patches.shape == (1, 64, model.vision.vision_hidden_size)
    assert torch.equal(patches[0], expected)
    assert torch.equal(first, patches)


def test_the_resampler_folds_each_merge_block_of_tower_output(model):
    """tower_output is the final LayerNorm of the last block's output; the resampler folds each merge block's 4
    consecutive patches into one row, maps it, pairs it with itself (one frame), maps it again, then to the text
    width, and RMS-norms it: one row per image token, which is image_features as it is."""
    resampler = model._module.model.resampler_model
    with model.trace(prompt(model, TWO), images=TWO) as tracer:
        last = model.vision.layers[-1].layer_output.save()
        tower = model.vision.tower_output.save()
        received = model.projector.input.save()
        projected = model.projector.output.save()
        features = model.vision.image_features.save()
        tracer.stop()
    with torch.no_grad():
        assert torch.equal(tower, model._module.model.vision_tower.ln(last))
        folded = resampler.spatial_linear(tower[0].reshape(-1, 4 * model.vision.vision_hidden_size))
        expected = resampler.after_norm(resampler.mlp(resampler.temporal_linear(torch.cat([folded, folded], -1))))
    assert torch.equal(received, tower[0])
    assert projected.shape == (4 + 12, model.hidden_size)
    assert torch.equal(projected, expected)
    assert torch.equal(features, projected)


# -- the modality-split mixture of experts ---------------------------------------------------------


def test_each_token_is_routed_by_its_modalitys_router(model):
    """router_logits is every token's logits from its modality's router: the vision router's on the image tokens and
    the image start and end tokens (the processor's moe_mm_token_type_ids), the text router's on the rest; each
    router's top 2 are the experts that run; mlp_output is the routed outputs put back at their tokens plus the shared
    experts'; the block identity holds on the dense block and the sparse one."""
    batch = inputs(model, TWO)
    vision_tokens = batch["moe_mm_token_type_ids"].reshape(-1).bool()
    ids = batch["input_ids"].reshape(-1)
    marks = [model.processor.image_token_id, model.processor.image_start_token_id, model.processor.image_end_token_id]
    assert torch.equal(vision_tokens, torch.isin(ids, torch.tensor(marks)))
    with model.trace(prompt(model, TWO), images=TWO) as tracer:
        reads = nnsight.save([])
        for index, block in enumerate(model.layers):
            layer_input, attention = block.layer_input, block.attention_output
            if index == 1:
                mlp = block.mlp
                shared = mlp.shared_experts.output.save()
                text_logits = mlp.text_moe.router_logits.save()
                text_routed = mlp.text_moe.gate.output.save()
                text_in, text_out = mlp.text_moe.experts.inputs.save(), mlp.text_moe.experts.output.save()
                vision_logits = mlp.vision_moe.router_logits.save()
                vision_routed = mlp.vision_moe.gate.output.save()
                vision_in, vision_out = mlp.vision_moe.experts.inputs.save(), mlp.vision_moe.experts.output.save()
                logits = mlp.router_logits.save()
            reads.append(nnsight.save([layer_input, attention, block.mlp_output, block.layer_output]))
        tracer.stop()
    tokens = ids.numel()
    assert logits.shape == (tokens, EXPERTS) and logits.dtype == torch.float32
    assert torch.equal(logits[vision_tokens], vision_logits) and torch.equal(vision_logits, vision_routed[0])
    assert torch.equal(logits[~vision_tokens], text_logits) and torch.equal(text_logits, text_routed[0])
    for routed_logits, (_, indices, _), routed in ((text_logits, text_in[0], text_routed),
                                                     (vision_logits, vision_in[0], vision_routed)):
        assert torch.equal(indices, routed[2])
        assert torch.equal(ran(indices), top_k(routed_logits, TOP_K))
    layer_input, attention, mlp_output, output = reads[1]
    placed = torch.zeros(tokens, model.hidden_size)
    placed[~vision_tokens], placed[vision_tokens] = text_out, vision_out
    assert torch.equal(mlp_output, placed.view(mlp_output.shape) + shared)
    for index, (layer_input, attention, mlp_output, output) in enumerate(reads):
        assert torch.equal(layer_input + attention + mlp_output, output), index


def test_on_text_alone_the_text_router_routes_every_token(model):
    """With no vision token the block runs its text experts on every token: router_logits is the text router's."""
    text = chat_prompt(model.processor, 0, "What is in the picture?")
    with model.trace(text) as tracer:
        text_logits = model.layers[1].mlp.text_moe.router_logits.save()
        logits = model.layers[1].mlp.router_logits.save()
        tracer.stop()
    assert torch.equal(logits, text_logits)
    assert logits.shape == (model.tokenizer(text, return_tensors="pt")["input_ids"].numel(), EXPERTS)


def test_the_assembled_router_logits_are_read_only(model):
    with model.trace(prompt(model, ONE), images=ONE) as tracer:
        with pytest.raises(AttributeError, match=r"router_logits is read-only: the block writes each router's logits"):
            model.layers[1].mlp.router_logits = torch.zeros(1)
        tracer.stop()
    with pytest.raises(AttributeError, match=r"write mlp\.text_moe\.router_logits or mlp\.vision_moe\.router_logits"):
        with model.trace(prompt(model, ONE), images=ONE) as tracer:
            model.layers[1].mlp.router_logits[:] = 0
            tracer.stop()


@pytest.mark.parametrize("experts", ["text_moe", "vision_moe"])
def test_a_write_to_a_routers_logits_changes_which_of_its_experts_run(model, experts):
    with model.trace(prompt(model, ONE), images=ONE) as tracer:
        part = getattr(model.layers[1].mlp, experts)
        clean_logits = part.router_logits.save()
        clean = model.layers[1].mlp_output.save()
        tracer.stop()
    with model.trace(prompt(model, ONE), images=ONE) as tracer:
        part = getattr(model.layers[1].mlp, experts)
        part.router_logits = -part.router_logits  # the least likely experts now score highest
        chosen = part.experts.inputs[0][1].save()
        assembled = model.layers[1].mlp.router_logits.save()
        edited = model.layers[1].mlp_output.save()
        tracer.stop()
    assert torch.equal(ran(chosen), top_k(-clean_logits, TOP_K))
    assert not torch.equal(ran(chosen), top_k(clean_logits, TOP_K))
    assert not torch.equal(edited, clean)
    vision_tokens = inputs(model, ONE)["moe_mm_token_type_ids"].reshape(-1).bool()
    rows = vision_tokens if experts == "vision_moe" else ~vision_tokens
    assert torch.equal(assembled[rows], -clean_logits)


def test_the_dense_block_and_one_modalitys_experts_say_what_they_lack(model):
    with pytest.raises(Unavailable, match=r"layers\[0\]\.mlp is a dense MLP \(Ernie4_5_VLMoeMLP\).*it has no router"):
        model.layers[0].mlp.router_logits
    with pytest.raises(Unavailable, match=r"text_moe is one modality's experts inside the block's mixture"):
        model.layers[1].mlp.text_moe.mlp_output
    assert set(model.support()["mlp.router_logits"]) == {0}
