"""StandardizedTransformer on a tiny Step-3.7 checkpoint: what is particular to its layer-scaled ViT with downsampling
convolutions, run on the global views and again on the local crops, and to its gated text attention, exact.

Every expected number comes from outside the code under test: the stock processor's outputs, the modules' own weights,
nnsight's own labels and a stock nnsight model of the same checkpoint, or a recomputation from other values read in
the same trace. The spec's contracts on the global views' run (model.vision) run in test_vision_contracts.py, the
router in test_moe_router.py, the crops' run (model.crops) in test_crops.py. This file holds the layer scales (on both
runs), the downsampling convolutions between tower_output and projector.input, and the attention's per-head gate.
"""

from __future__ import annotations

import nnsight
import pytest
import torch
import torch.nn.functional as F
from nnsight import TransformersModel
from nnsight.intervention.source import compiled, decorator_chain
from tiled_grids import TiledGridSuite, side
from transformers.models.step3p7.modeling_step3p7 import Step3p7VisionEncoderLayer

from envoys import StandardizedTransformer
from envoys.families import step3p7
from envoys.testing import chat_prompt, noise_image
from envoys.towers.internvit import LayerScaledAttention, LayerScaledLayer, LayerScaledMlp, scaled_binding
from envoys.vision.crops import CropsRun

CHECKPOINT = "step3p7"
TWO = [noise_image(32, 32, seed=0), noise_image(64, 48, seed=1)]  # the second is cut into crops, the first is not


def prompt(model, images) -> str:
    return chat_prompt(model.processor, len(images), "What is in the picture?")


@pytest.fixture(scope="module")
def model(tiny_checkpoint):
    return StandardizedTransformer(tiny_checkpoint(CHECKPOINT), task="image-text-to-text", device="cpu",
                                   attn_implementation="eager")


def test_the_tower_is_served_by_the_layer_scaled_envoys_and_its_second_run_is_model_crops(model):
    assert set(step3p7.ENVOYS.values()) == {step3p7.Step3p7Vision, LayerScaledLayer, LayerScaledAttention,
                                            LayerScaledMlp}
    assert isinstance(model.vision.layers[0], LayerScaledLayer) and isinstance(model.crops, CropsRun)
    assert model.vision.image_size == 48 and model.vision.patch_size == 4 and model.vision.intermediate_size == 64
    assert type(model.layers[0].mlp._module).__name__ == "Step3p7MLP"
    assert type(model.layers[1].mlp._module).__name__ == "Step3p7SparseMoeBlock"


def test_the_scaled_bindings_are_the_assignments_nnsight_labels():
    labelled = compiled(decorator_chain(Step3p7VisionEncoderLayer.forward)[0])
    lines = labelled.source.splitlines()
    for scale in ("lambda_1", "lambda_2"):
        label = scaled_binding(Step3p7VisionEncoderLayer, scale)
        assert label in labelled.names
        assert f"self.{scale} * " in lines[labelled.lines[label] - 1]


def block_reads(tower) -> list[dict]:
    """Inside a trace: each block's stream values and its sublayers' own outputs, in forward order."""
    reads = []
    for index in range(len(tower.layers)):
        block = tower.layers[index]
        reads.append(dict(
            input=block.layer_input.save(), attention=block.self_attn.output[0].save(),
            attention_output=block.attention_output.save(), mlp=block.mlp.output.save(),
            mlp_output=block.mlp_output.save(), output=block.layer_output.save(),
        ))
    return reads


@pytest.mark.parametrize("run", ["vision", "crops"])
def test_attention_and_mlp_outputs_are_the_sublayers_outputs_times_their_layer_scales(model, run):
    reads = []
    with model.trace(prompt(model, TWO), images=TWO):
        if run == "crops":
            model.vision.layers[0].layer_input.save()  # the views' run first
        reads.extend(block_reads(getattr(model, run)))
    rows = {"vision": 2, "crops": 4}[run]  # two global views; the second image's 2 x 2 crops (the builder's docstring)
    for native, read in zip(model._module.model.vision_model.layers, reads, strict=True):
        assert read["input"].shape[0] == rows
        assert torch.equal(read["attention_output"], native.lambda_1 * read["attention"])
        assert torch.equal(read["mlp_output"], native.lambda_2 * read["mlp"])
        assert not torch.equal(read["attention_output"], read["attention"])
        assert torch.equal(read["input"] + read["attention_output"] + read["mlp_output"], read["output"])


def test_the_scaled_values_are_the_stock_models_at_nnsights_own_labels(model, tiny_checkpoint):
    """On a stock nnsight model, nnsight's own .source of each block gives the scaled sublayer outputs at the
    labels the envoys read at: the global views' run's values, bit for bit."""
    stock = TransformersModel(str(tiny_checkpoint(CHECKPOINT)), task="image-text-to-text", dispatch=True,
                              attn_implementation="eager")
    labels = [scaled_binding(Step3p7VisionEncoderLayer, scale) for scale in ("lambda_1", "lambda_2")]
    with stock.trace(prompt(model, TWO), images=TWO) as tracer:
        theirs = nnsight.save([])
        for block in stock.model.vision_model.layers:
            theirs.append([getattr(block.source, label).output for label in labels])
        tracer.stop()
    with model.trace(prompt(model, TWO), images=TWO) as tracer:
        ours = nnsight.save([])
        for index in range(len(model.vision.layers)):
            ours.append([model.vision.layers[index].attention_output, model.vision.layers[index].mlp_output])
        tracer.stop()
    for (attention, mlp), (stock_attention, stock_mlp) in zip(ours, theirs, strict=True):
        assert torch.equal(attention, stock_attention) and torch.equal(mlp, stock_mlp)


def downsampled(tower: torch.nn.Module, stream: torch.Tensor) -> torch.Tensor:
    """The two stride-2 convolutions over a stream laid out on its square patch grid, one row per folded cell."""
    views, patches, width = stream.shape
    side = int(patches**0.5)
    grid = stream.permute(0, 2, 1).reshape(views, width, side, side)
    for conv in (tower.downsampler1, tower.downsampler2):
        grid = F.conv2d(grid, conv.weight, conv.bias, stride=2, padding=1)
    return grid.flatten(2).permute(0, 2, 1)


def test_projector_input_is_tower_output_through_the_downsampling_convolutions(model):
    """On each run, tower_output is the last block's stream (no final norm) and the projector receives it folded by
    the two convolutions: 12x12 patches a view to 3x3, 8x8 a crop to 2x2 (the builder's docstring)."""
    tower = model._module.model.vision_model
    with model.trace(prompt(model, TWO), images=TWO):
        views = model.vision.tower_output.save()
        views_received = model.projector.input.save()
        crops = model.crops.tower_output.save()
        crops_received = model.crops.projector.input.save()
    assert views.shape == (2, 144, 32) and crops.shape == (4, 64, 32)
    assert torch.equal(views_received, downsampled(tower, views)) and views_received.shape == (2, 9, 128)
    assert torch.equal(crops_received, downsampled(tower, crops)) and crops_received.shape == (4, 4, 128)


def test_the_attention_gates_each_heads_output_before_o_proj(model):
    """The text attention's head outputs are the kernel's, before the per-head sigmoid gate (g_proj); o_proj receives
    them gated."""
    attention = model.layers[0].self_attn
    with model.trace(prompt(model, TWO), images=TWO):
        gate = attention.g_proj.output.save()
        heads = attention.attention_head_outputs.save()
        received = attention.o_proj.input.save()
    assert gate.shape[-1] == heads.shape[-2] == model.config.text_config.num_attention_heads
    assert torch.equal(received, (heads * gate.unsqueeze(-1).sigmoid()).flatten(-2))


class TestGrids(TiledGridSuite):
    """The global views' run: each image one row of 12x12 patches (48 px views, images of 48x48 so that none is cropped
    and the view is the image itself); each image token is the two stride-2 convolutions' output over a 4x4 block of
    patches (its 3x3 kernels reach one patch past the block's edges: the cell the token stands for is its block)."""

    checkpoint = "step3p7"
    images = [(12, 12, 4), (6, 6, 8)]

    def first_stream(self, model):
        return model.vision.pre_layernorm.input  # the patch embeddings plus the (zeroed) positions, before the norm

    def token_sources(self, model, inputs, index):
        n, fold = side(model), 4
        cells = torch.arange(n * n).reshape(n // fold, fold, n // fold, fold).permute(0, 2, 1, 3).reshape(-1, fold * fold)
        return torch.cat([cells + tile * n * n for tile in range(index.shape[0])])
