"""StandardizedTransformer on a tiny Llama 4 checkpoint: the root scatters, tiles with the CLS last, a known bug, exact.

transformers 5.24.0's ``Llama4ForConditionalGeneration.forward`` raises
``AttributeError`` on its last line on every call (it reads
``outputs.image_outputs``), so every trace here that is meant to succeed ends
with ``tracer.stop()`` after its last read. Every expected number comes from
outside the code under test: the stock processor's outputs (``pixel_values``
tiles, ``patch_size``, ``downsample_ratio``, ``input_ids``), the modules' own
weights and submodules, or a recomputation from other values read in the same
trace. The spec's contracts (the scatter and the mask, the tiled stream and
every block's identity, the pattern, the projector's output, ablation, sizes,
support, the text-only load, generation where it can run, outputs against the
plain model, failing alike where the bug is) run on this checkpoint in
test_vision_contracts.py; this file holds what is particular to Llama 4.
"""

from __future__ import annotations

import dataclasses
import inspect

import nnsight
import pytest
import torch
import torch.nn.functional as F
import transformers
from nnsight.intervention.source import STATE
from packaging.version import Version
from tiled_grids import TiledGridSuite, flat_sources, tiles_in_order
from transformers import AutoModelForImageTextToText
from transformers.models.llama4 import modeling_llama4

import envoys.model
from envoys import StandardizedTransformer
from envoys.core.bugs import BrokenLoad, TransformersBug
from envoys.families import llama4
from envoys.testing import CONTRACTS, chat_prompt, noise_image
from instrument.dispatch import SitesNotServed
from instrument.install import BODY, installed

ONE = [noise_image(32, 32, seed=0)]
TWO = [noise_image(32, 32, seed=0), noise_image(64, 32, seed=1)]  # 32x32 (1 tile), 64 wide x 32 high (1x2 + global)
SETS = {"one-image": ONE, "two-images": TWO}
#: From transformers 5.25 get_image_features projects each tile's tokens; before, the root flattens the tiles first.
PROJECTS_PER_TILE = Version(transformers.__version__) >= Version("5.25")

#: The tests of the root's known bug (transformers 5.24.0: the forward reads a field its output lacks)
#: skip on a release whose forward does not have it: there is nothing to explain there.
WITH_THE_BUG = pytest.mark.skipif(
    llama4.IMAGE_OUTPUTS_BUG.reason() is None,
    reason="this release's Llama4ForConditionalGeneration.forward reads no field its output lacks: no bug to explain",
)


@pytest.fixture(scope="module")
def path(tiny_checkpoint):
    return tiny_checkpoint("llama4")


def skip_if_the_tower_cannot_run(loaded) -> None:
    """Skip where transformers' own loading leaves the tower's rotary table (``freqs_ci``, a plain attribute, not a
    buffer) on the meta device, so that neither the plain model's tower nor the library's can run (5.0 to 5.2)."""
    for module in loaded.modules():
        table = getattr(module, "freqs_ci", None)
        if isinstance(table, torch.Tensor) and table.is_meta:
            pytest.skip("this transformers release loads Llama 4's vision rotary table (freqs_ci) on the meta device: "
                        "the plain model's tower cannot run either")


@pytest.fixture(scope="module")
def model(path):
    loaded = StandardizedTransformer(path, task="image-text-to-text", device="cpu", attn_implementation="eager", dispatch=True)
    skip_if_the_tower_cannot_run(loaded._module)
    return loaded


@pytest.fixture(scope="module")
def plain(path):
    """The same checkpoint loaded by plain transformers, untouched by the library."""
    loaded = AutoModelForImageTextToText.from_pretrained(path, attn_implementation="eager").eval()
    skip_if_the_tower_cannot_run(loaded)
    return loaded


def prompt(model, images) -> str:
    return chat_prompt(model.processor, len(images), "Describe the image.")


def processed(model, images) -> dict:
    """The stock processor's outputs for the prompt and images."""
    return model.processor(text=[prompt(model, images)], images=images, return_tensors="pt")


def tokens_per_tile(model, images) -> int:
    """Image tokens per tile, from the processor: the tile's patches over its pixel-shuffle downsampling."""
    processor = model.processor
    side_h, side_w = processed(model, images)["pixel_values"].shape[-2:]
    return (side_h // processor.patch_size) * (side_w // processor.patch_size) // processor.downsample_ratio


def tiles(model, images) -> int:
    return processed(model, images)["pixel_values"].shape[0]


def patches_per_tile(model, images) -> int:
    side_h, side_w = processed(model, images)["pixel_values"].shape[-2:]
    return (side_h // model.processor.patch_size) * (side_w // model.processor.patch_size)


def repeat_heads(tensor: torch.Tensor, heads: int) -> torch.Tensor:
    """Key/value heads repeated to the query heads, as grouped-query attention does."""
    return tensor.repeat_interleave(heads // tensor.shape[1], dim=1)


# -- loading and names -----------------------------------------------------------------------------


def test_loads_with_its_stock_processor(model):
    assert type(model.processor).__name__ == "Llama4Processor"
    # the stock image processor, under its Fast name on releases that have only that name (4.57 to 5.2)
    assert type(model.processor.image_processor).__name__.removesuffix("Fast") == "Llama4ImageProcessor"
    assert model.family.model_type == "llama4" and model.family.root_scatter == "inputs_embeds_masked_scatter_0"


def test_the_configs_moe_and_rope_layouts(model):
    text = model.config.text_config
    assert [type(block._module.feed_forward).__name__ for block in model.layers] == ["Llama4TextMoe", "Llama4TextMLP"]
    assert [block._module.self_attn.use_rope for block in model.layers] == [1, 0]
    assert text.layer_types == ["chunked_attention", "full_attention"]
    vision = model.config.vision_config  # the tiny-checkpoint constraints
    assert vision.intermediate_size == vision.hidden_size / vision.pixel_shuffle_ratio**2
    assert vision.vision_output_dim == vision.projector_output_dim


@WITH_THE_BUG
def test_the_plain_forward_scatters_one_feature_per_patch_token(model, plain):
    """The checkpoint itself, without the library: the projected tower output lands on the <|patch|> tokens.

    Also for the checkpoint's row's images (its CONTRACTS), whose token counts tests/test_tiny_checkpoints.py
    cannot check through the failing forward.
    """
    row = CONTRACTS["llama4"]
    shared = row.images
    for images in (ONE, TWO, shared[:1], shared):
        inputs = processed(model, images).to(torch.float32)
        seen: dict = {}
        handle = plain.language_model.register_forward_pre_hook(
            lambda m, a, kwargs, seen=seen: seen.update(embeds=kwargs["inputs_embeds"].detach().clone()), with_kwargs=True
        )
        try:
            with pytest.raises(AttributeError), torch.no_grad():
                plain(**inputs)
        finally:
            handle.remove()
        with torch.no_grad():
            tower = plain.vision_model(inputs["pixel_values"]).last_hidden_state
            features = plain.multi_modal_projector(tower.reshape(-1, tower.shape[-1]))
            embedded = plain.get_input_embeddings()(inputs["input_ids"])
        patch_id = model.processor.tokenizer.convert_tokens_to_ids("<|patch|>")
        positions = inputs["input_ids"] == patch_id
        assert int(positions.sum()) == tiles(model, images) * tokens_per_tile(model, images) == features.shape[0]
        assert torch.equal((seen["embeds"] != embedded).any(-1), positions)
        assert torch.equal(seen["embeds"][positions], features)
        if images[0] is shared[0]:
            assert int(positions.sum()) == sum(row.image_tokens[: len(images)])


# -- where the image meets the text model ----------------------------------------------------------


@pytest.mark.parametrize("images", SETS.values(), ids=SETS.keys())
def test_the_tower_runs_on_the_processors_pixels_and_the_adapter_gives_the_projector_its_tokens(model, images):
    with model.trace(prompt(model, images), images=images) as tracer:
        pixels = model.vision.patch_embed.input.save()
        received = model.projector.input.save()
        tracer.stop()
    inputs = processed(model, images)
    assert pixels.dtype == torch.float32 and torch.equal(pixels, inputs["pixel_values"].float())  # in the model's dtype
    count, per_tile = tiles(model, images), tokens_per_tile(model, images)
    dim = model.config.vision_config.vision_output_dim
    assert received.shape == ((count, per_tile, dim) if PROJECTS_PER_TILE else (count * per_tile, dim))


def test_the_cls_token_is_last_on_the_patch_axis(model):
    vision = model.vision._module
    with model.trace(prompt(model, TWO), images=TWO) as tracer:
        patches = model.vision.patch_embeddings.save()
        block_input = model.vision.layers[0].layer_input.save()
        tracer.stop()
    positions = vision.positional_embedding_vlm
    cls = vision.layernorm_pre(vision.class_embedding + positions[-1])
    assert torch.equal(block_input[:, -1], cls.expand(block_input.shape[0], -1))
    assert torch.equal(block_input[:, :-1], vision.layernorm_pre(patches + positions[:-1]))


def test_the_adapter_feeds_the_projector_from_tower_output(model):
    vision = model.vision._module
    text = prompt(model, TWO)
    with model.trace(text, images=TWO) as tracer:
        tower = model.vision.tower_output.save()
        received = model.projector.input.save()
        tracer.stop()
    adapted = vision.vision_adapter(tower[:, :-1])  # the CLS dropped, pixel-shuffled, through the adapter's MLP
    assert torch.equal(received, adapted if PROJECTS_PER_TILE else adapted.reshape(-1, adapted.shape[-1]))
    with model.trace(text, images=TWO) as tracer:
        model.vision.tower_output = torch.ones_like(tower)
        edited = model.projector.input.save()
        tracer.stop()
    expected = vision.vision_adapter(torch.ones_like(tower[:, :-1]))
    assert torch.equal(edited, expected if PROJECTS_PER_TILE else expected.reshape(-1, expected.shape[-1]))


def test_patch_embeddings_are_writable(model):
    text = prompt(model, ONE)
    vision = model.vision._module
    with model.trace(text, images=ONE) as tracer:
        model.vision.patch_embeddings[:] = 0
        block_input = model.vision.layers[0].layer_input.save()
        tracer.stop()
    expected = vision.layernorm_pre(vision.positional_embedding_vlm[:-1])
    assert torch.equal(block_input[0, :-1], expected)


# -- the tower's and the text model's blocks -------------------------------------------------------


def test_block_values_add_up_on_the_moe_and_the_dense_text_blocks(model):
    with model.trace(prompt(model, TWO), images=TWO) as tracer:
        moe = nnsight.save([model.layers[0].layer_input, model.layers[0].attention_output])
        routed = model.layers[0].mlp.output[0].save()  # the MoE's own output, [batch * seq, hidden]
        moe += nnsight.save([model.layers[0].mlp_output, model.layers[0].layer_output])
        dense = nnsight.save([model.layers[1].layer_input, model.layers[1].attention_output,
                              model.layers[1].mlp_output, model.layers[1].layer_output])
        tracer.stop()
    for layer_input, attention, mlp, output in (moe, dense):
        assert torch.equal(layer_input + attention + mlp, output)
    assert torch.equal(dense[0], moe[3])
    assert routed.dim() == 2 and torch.equal(moe[2], routed.view(moe[2].shape))


def test_mlp_output_on_a_moe_layer_is_writable(model):
    text = prompt(model, ONE)
    with model.trace(text, images=ONE) as tracer:
        before = model.layers[0].layer_input.save()
        attention = model.layers[0].attention_output.save()
        model.layers[0].mlp_output = torch.zeros_like(model.layers[0].mlp_output)
        after = model.layers[0].layer_output.save()
        tracer.stop()
    assert torch.equal(after, before + attention)


def test_tower_attention_is_whole_per_tile_and_consistent(model):
    attention = model.vision.layers[0].self_attn
    with model.trace(prompt(model, TWO), images=TWO) as tracer:
        queries = attention.attention_queries.save()
        keys = attention.attention_keys.save()
        values = attention.attention_values.save()
        scores = attention.attention_scores.save()
        probabilities = attention.attention_probabilities.save()
        heads = attention.attention_head_outputs.save()
        projected_in = attention.o_proj.input.save()
        tracer.stop()
    head_dim = model.vision.head_dim
    assert torch.equal(scores, queries @ keys.transpose(2, 3) * head_dim**-0.5)  # no mask
    assert torch.equal(scores.softmax(-1), probabilities)
    assert torch.allclose(probabilities.sum(-1), torch.ones(probabilities.shape[:-1]))
    assert bool((probabilities > 0).all())  # every patch and the CLS see each other
    assert torch.equal(probabilities @ values, heads.transpose(1, 2))
    assert torch.equal(heads.reshape(*heads.shape[:2], -1), projected_in)


def test_text_attention_is_chunked_on_rope_layers_and_causal_on_the_others(model):
    chunk = model.config.text_config.attention_chunk_size
    with model.trace(prompt(model, ONE), images=ONE) as tracer:
        interior = nnsight.save([])
        for block in model.layers:
            attention = block.self_attn
            interior.append(nnsight.save([attention.attention_queries, attention.attention_keys,
                                          attention.attention_values, attention.attention_scores,
                                          attention.attention_probabilities, attention.attention_head_outputs,
                                          attention.o_proj.input]))
        tracer.stop()
    heads = model.config.text_config.num_attention_heads
    for index, (_queries, _keys, values, scores, probabilities, outputs, projected_in) in enumerate(interior):
        length = probabilities.shape[-1]
        assert probabilities.shape == (1, heads, length, length) and length > chunk
        assert torch.equal(scores.softmax(-1), probabilities)
        assert torch.allclose(probabilities.sum(-1), torch.ones(probabilities.shape[:-1]))
        assert torch.equal(probabilities @ repeat_heads(values, heads), outputs.transpose(1, 2))
        assert torch.equal(outputs.reshape(1, length, -1), projected_in)
        query, key = torch.arange(length)[:, None], torch.arange(length)[None, :]
        allowed = key <= query
        if model.config.text_config.layer_types[index] == "chunked_attention":
            allowed &= key // chunk == query // chunk
        assert torch.equal(probabilities[..., ~allowed], torch.zeros_like(probabilities[..., ~allowed])), index
        assert bool((probabilities[..., allowed] > 0).all()), index


def test_values_up_to_the_logits_are_writable(model):
    """Writes to a tower block, a tower pattern, a text block (one-sided, at the image rows) and a text pattern
    reach what follows them, in a trace that ends with tracer.stop()."""
    text = prompt(model, ONE)
    tower, block = model.vision.layers[0], model.layers[0]
    with model.trace(text, images=ONE) as tracer:
        mask = model.vision.image_token_mask.save()  # off the root's inputs: first
        tower.layer_output = torch.ones_like(tower.layer_output)
        following = model.vision.layers[1].layer_input.save()
        model.vision.layers[1].self_attn.attention_probabilities[:] = 0
        attended = model.vision.layers[1].attention_output.save()
        block.self_attn.attention_probabilities[:] = 0
        attention = block.attention_output.save()
        before = block.layer_output.clone().save()
        block.layer_output[mask] = 0
        after = model.layers[1].layer_input.save()
        tracer.stop()
    assert torch.equal(following, torch.ones_like(following))
    o_proj = model.vision.layers[1].self_attn.o_proj._module
    assert torch.equal(attended, o_proj.bias.expand_as(attended))  # zero weights on the values: the bias alone
    assert torch.equal(attention, torch.zeros_like(attention))  # the text o_proj has no bias
    assert torch.equal(after[mask], torch.zeros_like(after[mask])) and torch.equal(after[~mask], before[~mask])


# -- the ablation ----------------------------------------------------------------------------------


def test_under_an_ablation_the_logits_are_the_head_of_the_last_blocks_output(model):
    """The logits are read at the language model's output (the root's forward fails after it on some releases):
    ablated, they are the final norm and the head of the last block's ablated output, and a clean rerun is clean."""
    text = prompt(model, ONE)
    with model.trace(text, images=ONE) as tracer:
        clean = model.layers[-1].layer_output.save()
        clean_logits = model.logits.save()
        tracer.stop()
    with model.trace(text, images=ONE) as tracer:
        model.vision.image_features[:] = 0
        ablated = model.layers[-1].layer_output.save()
        ablated_logits = model.logits.save()
        tracer.stop()
    assert not torch.equal(ablated, clean) and not torch.equal(ablated_logits, clean_logits)
    assert torch.equal(ablated_logits, model.lm_head._module(model.norm._module(ablated)))
    with model.trace(text, images=ONE) as tracer:
        again = model.layers[-1].layer_output.save()
        again_logits = model.logits.save()
        tracer.stop()
    assert torch.equal(again, clean) and torch.equal(again_logits, clean_logits)


# -- transformers 5.24.0's bug ---------------------------------------------------------------------


@WITH_THE_BUG
def test_a_full_forward_raises_the_explained_error(model):
    with pytest.raises(TransformersBug) as raised:
        with model.trace(prompt(model, ONE), images=ONE):
            model.logits.save()
    message = str(raised.value)
    assert "Llama4ForConditionalGeneration.forward reads `outputs.image_outputs`" in message
    assert "tracer.stop()" in message and "generate cannot run" in message
    assert isinstance(raised.value.__cause__, AttributeError) and "image_outputs" in str(raised.value.__cause__)


@WITH_THE_BUG
def test_generation_cannot_run_and_says_why(model, plain):
    inputs = processed(model, ONE).to(torch.float32)
    with pytest.raises(AttributeError, match="image_outputs"):  # transformers' own generate, without the library
        plain.generate(**inputs, max_new_tokens=2, do_sample=False)
    with pytest.raises(TransformersBug, match=r"so every forward, and so generate, raises AttributeError"):
        with model.generate(prompt(model, ONE), images=ONE, max_new_tokens=2, do_sample=False):
            model.vision.image_token_mask.save()


@WITH_THE_BUG
def test_an_out_of_order_read_before_stop_is_explained_too(model):
    """The forward fails before nnsight's own out-of-order check runs, so the explanation names that case."""
    with pytest.raises(TransformersBug, match=r"one of its reads was never served: reads follow the forward's order"):
        with model.trace(prompt(model, ONE), images=ONE) as tracer:
            model.layers[0].layer_output.save()
            model.vision.layers[0].layer_output.save()
            tracer.stop()


@WITH_THE_BUG
def test_support_says_so(model):
    support = model.support()
    for name in ("output", "generate"):
        assert "outputs.image_outputs" in support[name] and "tracer.stop()" in support[name], name
    assert support["logits"] is None


def fixed_forward(self, input_ids=None, **kwargs):
    """A root forward as a fixed release might have it: the language model's output is returned as it is."""
    outputs = self.language_model(input_ids=input_ids, **kwargs)
    return outputs


def failing_forward(self, input_ids=None, **kwargs):
    """A root forward that reads no field of the language model's output, failing with the bug's error anyway."""
    raise AttributeError("'CausalLMOutputWithPast' object has no attribute 'image_outputs'")


@dataclasses.dataclass
class OutputWithImageOutputs(getattr(modeling_llama4, "MoeCausalLMOutputWithPast", None) or modeling_llama4.CausalLMOutputWithPast):
    image_outputs: object = None


@WITH_THE_BUG
def test_the_bug_is_detected_by_its_condition_not_the_version(model, monkeypatch):
    assert llama4.reads_a_field_its_output_lacks()
    assert llama4.reads_language_model_field(modeling_llama4.Llama4ForConditionalGeneration.forward, "image_outputs")
    with monkeypatch.context() as patched:  # a release whose root no longer reads the field
        patched.setattr(modeling_llama4.Llama4ForConditionalGeneration, "forward", fixed_forward)
        assert not llama4.reads_a_field_its_output_lacks()
        assert llama4.IMAGE_OUTPUTS_BUG.reason() is None
        assert "output" not in model.support() and "generate" not in model.support()
        # the instance runs the class's forward as patched (instrument.dispatch); an error like the bug's is no
        # longer explained, as nothing says it is the bug
        patched.setattr(modeling_llama4.Llama4ForConditionalGeneration, "forward", failing_forward)
        assert not llama4.reads_a_field_its_output_lacks()
        with pytest.raises(AttributeError, match="image_outputs") as raised, pytest.warns(SitesNotServed):
            with model.trace(prompt(model, ONE), images=ONE):
                model.logits.save()
        assert not isinstance(raised.value, TransformersBug)
    with monkeypatch.context() as patched:  # a release whose language model's output has the field
        forward = inspect.unwrap(modeling_llama4.Llama4ForCausalLM.forward)
        patched.setitem(forward.__annotations__, "return", OutputWithImageOutputs)
        assert not llama4.reads_a_field_its_output_lacks()
        assert llama4.IMAGE_OUTPUTS_BUG.translate(AttributeError("no attribute 'image_outputs'")) is None
    assert llama4.reads_a_field_its_output_lacks()
    assert "outputs.image_outputs" in model.support()["output"]


def test_another_error_is_not_taken_for_the_bug(model):
    with pytest.raises(ValueError, match=r"image_features takes a tensor of shape") as raised:
        with model.trace(prompt(model, ONE), images=ONE) as tracer:
            model.vision.image_features = torch.zeros(3, model.hidden_size)
            tracer.stop()
    assert not isinstance(raised.value, TransformersBug)


# -- sizes, loading --------------------------------------------------------------------------------


def test_the_tile_sizes(model):
    vision, config = model.vision, model.config.vision_config
    assert vision.patch_size == model.processor.patch_size
    assert vision.image_size == model.processor.image_processor.size["height"] == processed(model, ONE)["pixel_values"].shape[-1]
    assert vision.pixel_shuffle_ratio == config.pixel_shuffle_ratio



def test_a_rotary_table_left_on_meta_by_loading_is_refused_before_anything_is_instrumented(tiny_checkpoint, monkeypatch):
    """transformers 5.0 to 5.2 leave the tower's freqs_ci on the meta device: loading the weights says so and
    instruments nothing. Made true here by a loader (this module's stand-in for the library's) that leaves it there."""
    loaded = []

    class LeavesTheTableOnMeta:
        @staticmethod
        def from_pretrained(*args, **kwargs):
            model = AutoModelForImageTextToText.from_pretrained(*args, **kwargs)
            owner = next(m for m in model.modules() if isinstance(getattr(m, "freqs_ci", None), torch.Tensor))
            owner.freqs_ci = owner.freqs_ci.to("meta")
            loaded.append(model)
            return model

    monkeypatch.setattr(envoys.model, "AutoModelForImageTextToText", LeavesTheTableOnMeta)
    with pytest.raises(BrokenLoad, match=r"loads Llama 4's vision rotary table \(freqs_ci\) on the meta device, so its "
                                         r"tower cannot run.*load Llama 4 with transformers 4.57 or 5.3 and later"):
        StandardizedTransformer(tiny_checkpoint("llama4"), task="image-text-to-text", attn_implementation="eager",
                                dispatch=True)
    assert not any(installed(module) for module in loaded[0].modules())


# -- the grids (tiled_grids.TiledGridSuite) ----------------------------------------------------------------------


class TestGrids(TiledGridSuite):
    """Llama 4: tiles by aspect ratio then a global one, CLS last, a linear patch embedding, a pre-norm, a pixel shuffle."""

    checkpoint = "llama4"
    images = [(4, 4, 8), (4, 8, 8), (8, 8, 8)]
    cls_rows = "last"

    def placed(self, model, inputs):
        ratios = model.processor.image_processor(self.pictures(), return_tensors="pt")["aspect_ratios"]
        return tiles_in_order([(rows, columns, int(rows * columns > 1)) for rows, columns in ratios.tolist()])

    def hand_patch_embedding(self, model, pixels):
        linear = model.vision._module.patch_embedding.linear
        patch = model.config.vision_config.patch_size
        unfolded = F.unfold(pixels, kernel_size=patch, stride=patch).permute(0, 2, 1)
        return F.linear(unfolded, linear.weight, linear.bias)

    def token_sources(self, model, inputs, index):
        return flat_sources(modeling_llama4.pixel_shuffle(index, model.config.vision_config.pixel_shuffle_ratio))

    def first_stream(self, model):
        return model.vision.layernorm_pre.input


def test_the_rewritten_root_runs_inside_accelerates_hook(tiny_checkpoint, tmp_path):
    """Llama 4's root scatters the image features in its own (rewritten) forward, and accelerate hooks the
    root: the values equal an unsharded load's. Its traces end with tracer.stop() (see above)."""
    images = [noise_image(32, 32, seed=0)]
    path = tiny_checkpoint("llama4")
    device_map = {"language_model.lm_head": "cpu", "vision_model": "disk", "multi_modal_projector": "disk",
                  "language_model.model": "disk"}
    models = [
        StandardizedTransformer(path, task="image-text-to-text", device="cpu", attn_implementation="eager"),
        StandardizedTransformer(path, task="image-text-to-text", device_map=device_map, offload_folder=str(tmp_path),
                                attn_implementation="eager", dispatch=True),
    ]
    root = models[1]._module
    assert "_hf_hook" in root.__dict__ and root.__dict__[STATE].body is root.__dict__[BODY]
    reads = []
    for model in models:
        with model.trace(chat_prompt(model.processor, 1, "What is in the picture?"), images=images) as tracer:
            reads.append(nnsight.save([model.vision.layers[0].self_attn.attention_probabilities,
                                       model.vision.image_features, model.logits]))
            tracer.stop()
    for got, expected in zip(reads[1], reads[0], strict=True):
        assert torch.equal(got, expected)
