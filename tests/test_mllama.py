"""StandardizedTransformer on a tiny Mllama checkpoint (Llama 3.2 Vision): what is particular to an image that enters
through cross-attention, exact.

Every expected number comes from outside the code under test: the stock processor's outputs, the modules' own
weights, a stock nnsight model of the same checkpoint read at nnsight's own labels, or a recomputation from other
values read in the same trace. The spec's contracts (the local blocks' identity, what the cross layers read, the
ablation, generation, support) run in test_vision_contracts.py; this file holds the gated global blocks, the tower's
output, the cross-attention blocks, their reasons, and the tiles' grids.
"""

from __future__ import annotations

from types import SimpleNamespace

import nnsight
import pytest
import torch
from nnsight.intervention.source import compiled, decorator_chain
from transformers.models.mllama.modeling_mllama import MllamaCrossAttentionDecoderLayer, MllamaVisionEncoderLayer

from envoys import Unavailable
from envoys.core.bindings import label_reason
from envoys.image import recipes
from envoys.testing import chat_prompt, noise_image
from envoys.testing.mllama import CROSS_LAYERS, MAX_TILES, PADDED_TILE_ROWS, SELF_LAYERS, TILE_ROWS

CHECKPOINT = "mllama"
TWO = [noise_image(32, 32, seed=0), noise_image(64, 32, seed=1)]  # 1 tile, then 1 x 2 tiles (the builder's docstring)
CROSS = CROSS_LAYERS[0]


def prompt(model, images) -> str:
    return chat_prompt(model.processor, len(images), "What is in the picture?")


def processed(model, images):
    return model.processor(text=[prompt(model, images)], images=images, return_tensors="pt")


def tower_reads(model) -> list[dict]:
    """Inside a trace: every global block's values and its sublayers' outputs, in forward order."""
    reads = []
    for block in model.vision.global_layers:
        reads.append(dict(
            input=block.layer_input.save(), attention=block.self_attn.output[0].save(),
            attention_gate=block.attention_gate.save(), attention_output=block.attention_output.save(),
            mlp=block.mlp.output.save(), mlp_gate=block.mlp_gate.save(), mlp_output=block.mlp_output.save(),
            output=block.layer_output.save(),
        ))
    return reads


def test_a_global_block_adds_its_gated_sublayers_to_the_stream(model):
    reads = []
    with model.trace(prompt(model, TWO), images=TWO) as tracer:
        local = model.vision.layers[-1].layer_output.save()
        reads.extend(tower_reads(model))
        tracer.stop()
    native = model._module.model.vision_model.global_transformer.layers
    assert len(reads) == len(native) == 2
    for block, read in zip(native, reads, strict=True):
        assert read["input"].shape == (2, MAX_TILES * PADDED_TILE_ROWS, 32)  # a row an image, its 4 padded tiles
        assert torch.equal(read["attention_gate"], block.gate_attn.tanh())
        assert torch.equal(read["mlp_gate"], block.gate_ffn.tanh())
        assert torch.equal(read["attention_output"], read["attention_gate"] * read["attention"])
        assert torch.equal(read["mlp_output"], read["mlp_gate"] * read["mlp"])
        assert not torch.equal(read["attention_output"], read["attention"])
        assert torch.equal(read["input"] + read["attention_output"] + read["mlp_output"], read["output"])
    assert not torch.equal(reads[0]["input"], local)  # layernorm_post and the post-tile embeddings come between


def test_the_local_blocks_have_no_gates(model):
    for name in ("attention_gate", "mlp_gate"):
        with pytest.raises(Unavailable, match=rf"vision\.layers\[0\]\.{name} is unavailable: this block's gates are off"):
            getattr(model.vision.layers[0], name)


def binding(block_class: type, text: str) -> str:
    """nnsight's own label of the assignment in ``block_class.forward`` whose line holds ``text``."""
    labelled = compiled(decorator_chain(block_class.forward)[0])
    lines = labelled.source.splitlines()
    (label,) = [name for name in labelled.names
                if name.startswith("hidden_states_") and text in lines[labelled.lines[name] - 1]]
    return label


def test_the_gated_values_are_the_stock_models_at_nnsights_own_labels(model, stock):
    """On a stock nnsight model, nnsight's own .source of a global block binds the gated sublayer outputs the envoys
    serve, and a cross-attention block's gates and masked MLP output make its mlp_output."""
    attention = binding(MllamaVisionEncoderLayer, "hidden_states = self.gate_attn.tanh() * hidden_states")
    mlp = binding(MllamaVisionEncoderLayer, "hidden_states = self.gate_ffn.tanh() * hidden_states")
    masked = binding(MllamaCrossAttentionDecoderLayer, "full_text_row_masked_out_mask[:, 0] * hidden_states")
    with stock.trace(prompt(model, TWO), images=TWO) as tracer:
        theirs = nnsight.save([])
        for block in stock.model.vision_model.global_transformer.layers:
            source = block.source
            theirs.append([source.self_gate_attn_tanh_0.output, getattr(source, attention).output,
                           source.self_gate_ffn_tanh_0.output, getattr(source, mlp).output])
        cross = stock.model.language_model.layers[CROSS].source
        gates = nnsight.save([cross.self_cross_attn_attn_gate_tanh_0.output, getattr(cross, masked).output,
                              cross.self_cross_attn_mlp_gate_tanh_0.output])
        tracer.stop()
    with model.trace(prompt(model, TWO), images=TWO) as tracer:
        ours = nnsight.save([[b.attention_gate, b.attention_output, b.mlp_gate, b.mlp_output]
                             for b in model.vision.global_layers])
        block = model.layers[CROSS]
        crossing = nnsight.save([block.attention_gate, block.mlp_output, block.mlp_gate])  # the MLP's gate read twice
        tracer.stop()
    for mine, stocks in zip(ours, theirs, strict=True):
        assert all(torch.equal(a, b) for a, b in zip(mine, stocks, strict=True))
    attention_gate, masked_mlp, mlp_gate = gates
    assert torch.equal(crossing[0], attention_gate) and torch.equal(crossing[2], mlp_gate)
    assert torch.equal(crossing[1], mlp_gate * masked_mlp)


def test_tower_output_is_the_global_stream_beside_the_chosen_local_layers(model):
    with model.trace(prompt(model, TWO), images=TWO) as tracer:
        local = model.vision.layers[0].layer_output.save()  # intermediate_layers_indices [0]
        last = model.vision.global_layers[-1].layer_output.save()
        tower = model.vision.tower_output.save()
        projected_in = model.projector.input.save()
        projected = model.projector.output.save()
        features = model.vision.image_features.save()
        tracer.stop()
    unpadded = [stream.reshape(2, MAX_TILES, PADDED_TILE_ROWS, 32)[:, :, :TILE_ROWS] for stream in (last, local)]
    assert torch.equal(tower, torch.cat(unpadded, dim=-1).unsqueeze(0))  # [1, images, tiles, tile rows, 64]
    assert torch.equal(projected_in, tower)
    assert torch.equal(features, projected.reshape(-1, TILE_ROWS, 32))  # the text model's cross_attention_states


def test_image_features_written_reach_every_cross_layer(model):
    with model.trace(prompt(model, TWO), images=TWO) as tracer:
        clean = model.logits.save()
        tracer.stop()
    with model.trace(prompt(model, TWO), images=TWO) as tracer:
        model.vision.image_features[:, 1:] = 0  # every tile's patches, its CLS kept
        keys = model.layers[CROSS].cross_attn.k_proj.input.save()
        logits = model.logits.save()
        tracer.stop()
    assert torch.equal(keys[:, 1:], torch.zeros_like(keys[:, 1:])) and keys[:, 0].abs().sum() > 0
    assert not torch.equal(logits, clean)


def test_a_cross_attention_block_adds_its_gated_terms(model):
    ids = processed(model, TWO)["input_ids"]
    before_image = (ids[0] == model.config.image_token_id).nonzero()[0, 0]  # the tokens before the first <|image|>
    with model.trace(prompt(model, TWO), images=TWO) as tracer:
        block = model.layers[CROSS]
        layer_input = block.layer_input.save()
        probabilities = block.cross_attn.attention_probabilities.save()  # inside the block, before its terms
        attention = block.cross_attn.output[0].save()
        attention_output = block.attention_output.save()
        mlp = block.mlp.output.save()
        mlp_output = block.mlp_output.save()
        output = block.layer_output.save()
        tracer.stop()
    native = model._module.model.language_model.layers[CROSS]
    assert probabilities.shape == (1, 2, ids.shape[1], 2 * MAX_TILES * TILE_ROWS)  # over both images' tile rows
    assert torch.equal(attention_output, native.cross_attn_attn_gate.tanh() * attention)
    masked = mlp.clone()
    masked[:, :before_image] = 0  # a token before any image attends to no tile: the row mask zeroes its MLP term
    assert torch.equal(mlp_output, native.cross_attn_mlp_gate.tanh() * masked)
    assert mlp[:, :before_image].abs().sum() > 0
    assert torch.equal(layer_input + attention_output + mlp_output, output)


def test_a_cross_attention_term_is_read_only_and_its_gate_is_writable(model):
    with pytest.raises(AttributeError, match=r"layers\[1\]\.attention_output is read-only: .*write the sublayer's own"):
        with model.trace(prompt(model, TWO), images=TWO):
            model.layers[CROSS].attention_output = torch.zeros(1)
    with pytest.raises(AttributeError, match="cannot be edited in place"):
        with model.trace(prompt(model, TWO), images=TWO):
            model.layers[CROSS].mlp_output[:] = 0
    with model.trace(prompt(model, TWO), images=TWO) as tracer:
        block = model.layers[CROSS]
        layer_input = block.layer_input.save()
        block.attention_gate = torch.zeros(1)  # silence the cross-attention: the block adds its MLP's term alone
        mlp_output = block.mlp_output.save()
        output = block.layer_output.save()
        tracer.stop()
    assert torch.equal(output, layer_input + mlp_output)


def test_cross_attention_values_on_a_self_attention_block_say_which_blocks_have_them(model):
    for index in SELF_LAYERS:
        with pytest.raises(Unavailable, match=rf"layers\[{index}\] is a self-attention layer; the layers that "
                                              rf"cross-attend to the image are 1 \(the text config's"):
            model.layers[index].cross_attn.attention_probabilities
    with pytest.raises(AttributeError):
        model.layers[CROSS].self_attn


def test_a_prompt_without_an_image_skips_the_cross_layers(model):
    text = chat_prompt(model.processor, 0, "What is in the picture?")
    with pytest.raises(Unavailable, match="skips the cross-attention layers"):
        with model.trace(text):
            model.layers[CROSS].cross_attn.attention_probabilities.save()
    with model.trace(text) as tracer:
        first = model.layers[0].layer_output.save()
        following = model.layers[CROSS + 1].input.save()
        tracer.stop()
    assert torch.equal(first, following)  # the skipped block changes nothing


def test_each_tile_is_placed_where_the_processor_cut_it(model):
    """The second image is 64 wide x 32 high: one row of two tiles. A canvas whose left half is dark and right half
    bright puts the darker tile's patch embeddings on the left of the grid."""
    halves = torch.cat([torch.zeros(32, 32, 3), torch.ones(32, 32, 3)], dim=1)
    image = noise_image(64, 32, seed=3)
    pixels = (torch.tensor(list(image.getdata()), dtype=torch.float32).reshape(32, 64, 3) * 0.2 + halves * 200)
    from PIL import Image

    split = Image.fromarray(pixels.clamp(0, 255).to(torch.uint8).numpy())
    inputs = processed(model, [split])
    assert inputs["aspect_ratio_ids"].tolist() == [[2]]  # (1, 2): one row, two columns
    with model.trace(prompt(model, [split]), images=[split]) as tracer:
        patches = model.vision.patch_embeddings.save()
        stream = model.vision.layers[0].layer_output.save()
        tower = model.vision.tower_output.save()
        features = model.vision.image_features.save()
        tracer.stop()
    grid = model.vision.patch_grid(patches, of="patch_embeddings")
    assert grid.shape == (4, 8, 32)
    tiles = inputs["pixel_values"][0, 0]  # [tiles, 3, 32, 32]
    assert tiles[0].mean() < tiles[1].mean()  # the processor's first tile is the dark left half
    conv = model._module.model.vision_model.patch_embedding
    expected = [conv(tile[None]).flatten(2).transpose(1, 2).reshape(4, 4, 32) for tile in tiles[:2]]
    assert torch.equal(grid, torch.cat(expected, dim=1))
    rows = stream.reshape(MAX_TILES, PADDED_TILE_ROWS, 32)[:2, 1:TILE_ROWS].reshape(2, 4, 4, 32)
    assert torch.equal(model.vision.patch_grid(stream), torch.cat(list(rows), dim=1))
    outputs = tower[0, 0, :2, 1:].reshape(2, 4, 4, 64)
    assert torch.equal(model.vision.patch_grid(tower, of="output"), torch.cat(list(outputs), dim=1))
    assert model.vision.patch_grid(features, of="output").shape == (4, 8, 32)


def test_the_answer_tokens_cross_attention_on_the_image(model):
    """The recipe's grid is the last token's cross-attention over the image's tile patches (CLS and padding tiles
    left out), each head summed, on the image's canvas."""
    result = recipes.attention_to_image(model, prompt(model, TWO), TWO, layer=CROSS, image=1)
    with model.trace(prompt(model, TWO), images=TWO) as tracer:
        probabilities = model.layers[CROSS].cross_attn.attention_probabilities[0, :, -1].save()  # [heads, keys]
        tracer.stop()
    keys = probabilities.reshape(2, 2, MAX_TILES, TILE_ROWS)[:, 1, :2, 1:].reshape(2, 2, 4, 4)  # image 1's 2 tiles
    assert torch.equal(result.grid, torch.cat(list(keys.sum(0)), dim=1))
    assert result.grid.shape == (4, 8)
    with pytest.raises(Unavailable, match="no token grid"):
        model.vision.token_grid(probabilities.T, image=0)


def test_invokes_with_images_are_refused_before_the_model_runs(model):
    with pytest.raises(NotImplementedError, match="pads every prompt's images to the most"):
        with model.trace() as tracer:
            with tracer.invoke(prompt(model, TWO[:1]), images=TWO[:1]):
                model.logits.save()
            with tracer.invoke(prompt(model, TWO[1:]), images=TWO[1:]):
                model.logits.save()



def test_a_gate_call_a_release_dropped_is_unavailable_naming_the_forward(model):
    """A cross-attention block whose forward no longer calls a gate's tanh (a release that rewrote it): its gate and
    the terms read through it say so, rather than wait for a call that never comes."""

    class Rewritten(MllamaCrossAttentionDecoderLayer):
        def forward(self, hidden_states, **kwargs):
            return hidden_states

    reason = label_reason(SimpleNamespace(_module=object.__new__(Rewritten)), "self_cross_attn_mlp_gate_tanh_0")
    assert reason.startswith("test_a_gate_call_a_release_dropped_is_unavailable_naming_the_forward.<locals>.Rewritten"
                             ".forward has no operation nnsight labels self_cross_attn_mlp_gate_tanh_0")
    assert label_reason(model.layers[CROSS], "self_cross_attn_mlp_gate_tanh_0") is None
