"""StandardizedTransformer on a tiny Nemotron-H Omni checkpoint: RADIO, the root's scatter, the NemotronH hybrid, exact.

Every expected number comes from outside the code under test: the stock
processor's ``input_ids``, ``pixel_values`` and ``image_grid_hw``, the
modules' own weights and attributes, transformers' own functions, or a
recomputation from other values read in the same trace. The spec's contracts
(the scatter and the mask, the packed stream with its prefix rows and every
block's identity, the pattern's Unavailable reason, what the projector gives,
ablation, sizes, support with the hybrid's missing rows, the text-only load,
generation, outputs against the plain model) run on this checkpoint in
test_vision_contracts.py; this file holds what is particular to Nemotron-H
Omni.
"""

from __future__ import annotations

import re

import nnsight
import pytest

pytest.importorskip("transformers.models.nemotron_h_omni", reason="target absent: this transformers release has no nemotron_h_omni")
import torch
import torch.nn.functional as F
from family_inputs import prompt
from packed_grids import GridSuite

from envoys import StandardizedTransformer, Unavailable
from envoys.image.grids import GridError
from envoys.testing import chat_prompt, noise_audio, noise_image, noise_video
from envoys.vision.scatter_host import scatter_host

NAME = "nemotron_h_omni"
ONE = [noise_image(32, 32, seed=0)]
TWO = [noise_image(32, 32, seed=0), noise_image(64, 48, seed=1)]  # two sizes: 32x32, and 64 wide by 48 high
COUNTS = ["one-image", "two-images"]


CHECKPOINT = NAME


def inputs(model, images) -> dict[str, torch.Tensor]:
    """The stock processor's outputs for the prompt and the images."""
    return model.processor(text=[prompt(model, images)], images=images, return_tensors="pt")


def grids(model, images) -> list[tuple[int, int]]:
    """The processor's ``image_grid_hw``: ``(h, w)`` patches per image."""
    return [tuple(g) for g in inputs(model, images)["image_grid_hw"].tolist()]


def prefix(model) -> int:
    """The cls and register rows before each image's patches, off the embedder's own parameter."""
    return model._module.vision_model.embeddings.cls_register_token.shape[0]


def image_rows(model, images) -> list[tuple[int, int, int]]:
    """``(start, first patch row, end)`` of each image in the packed stream: prefix rows, then h * w patches."""
    rows, start = [], 0
    for h, w in grids(model, images):
        end = start + prefix(model) + h * w
        rows.append((start, start + prefix(model), end))
        start = end
    return rows


def merge(model) -> int:
    """The side of the patch block folded into one image token: the processor's pixel-shuffle ratio, inverted."""
    return round(1 / model.processor.image_processor.downsample_ratio)


def eager_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scaling: float) -> torch.Tensor:
    """RADIO's eager kernel on one image: [1, heads, n, d] in, [1, n, heads, d] out."""
    weights = torch.softmax(torch.matmul(q, k.transpose(2, 3)) * scaling, dim=-1)
    return torch.matmul(weights, v).transpose(1, 2).contiguous()


# -- loading and names -------------------------------------------------------------------------------


def test_loads_with_its_stock_processor_and_each_block_names_its_one_mixer_alone(model):
    root = model._module
    assert type(model.processor).__name__ == "NemotronH_Omni_Reasoning_V3Processor"
    assert type(model.processor.image_processor).__name__ == "NemotronH_Omni_Reasoning_V3ImageProcessor"
    assert model.family.model_type == root.config.model_type == NAME
    kinds = root.config.text_config.layers_block_type
    for layer, kind in zip(model.layers, kinds, strict=True):  # the mixer itself under its name: the row's native
        assert (getattr(layer, "self_attn", None) is not None) == (kind == "full_attention")
        assert (getattr(layer, "mlp", None) is not None) == (kind == "moe")
    assert set(kinds) == {"linear_attention", "moe", "full_attention"}


def test_plain_mlp_blocks_are_named_only_on_a_stack_that_has_them(model):
    """A mixture of experts holds one MLP (its shared expert): keyed by class on every stack, it would be ``mlp.mlp``."""
    from transformers.models.nemotron_h.modeling_nemotron_h import NemotronHMLP

    config = model.config
    assert NemotronHMLP not in model.family.rename_for(config)
    moe = kinds(model).index("moe")
    assert "mlp" not in model.layers[moe].mlp.__dict__
    with_mlp = type(config).from_dict(config.to_dict())
    with_mlp.text_config.layers_block_type = ["linear_attention", "mlp"]
    assert model.family.rename_for(with_mlp)[NemotronHMLP] == "mlp"


def test_the_root_is_the_scatter_host(model):
    host, operation, argument = scatter_host(model)
    assert host is model and operation == model.family.root_scatter == "inputs_embeds_masked_scatter_0"
    assert argument.index == 1
    assert not hasattr(model._module, "model")  # no inner model to key a host on


def test_the_scatters_mask_is_pre_expanded_and_image_token_mask_is_its_token_axis(tiny_checkpoint):
    """Read through nnsight's own ``.source`` of the root (a fresh load: opening it changes which body runs)."""
    model = StandardizedTransformer(tiny_checkpoint(NAME), task="image-text-to-text")
    with model.trace(prompt(model, TWO), images=TWO):
        mask = model.vision.image_token_mask.save()
        scattered = model.source.inputs_embeds_masked_scatter_0.inputs[0][0].save()
        features = model.vision.image_features.save()
    assert scattered.shape == (*mask.shape, model.hidden_size)
    assert torch.equal(scattered, mask[..., None].expand_as(scattered))
    assert features.shape == (int(mask.sum()), model.hidden_size)


# -- where the image meets the text model ----------------------------------------------------------


@pytest.mark.parametrize("images", [ONE, TWO], ids=COUNTS)
def test_the_projector_receives_each_images_patch_rows_pixel_shuffled(model, images):
    """What the projector receives: each image's patch rows of tower_output (no cls, no registers), each 2x2 block
    of patches (row-major) folded into one row of 4 * width, image after image."""
    with model.trace(prompt(model, images), images=images):
        tower = model.vision.tower_output.save()
        received = model.projector.input.save()
    m = merge(model)
    folded = []
    for (_start, patches, end), (h, w) in zip(image_rows(model, images), grids(model, images)):
        grid = tower[0, patches:end].reshape(h // m, m, w // m, m, -1)
        folded.append(grid.permute(0, 2, 1, 3, 4).reshape((h // m) * (w // m), -1))
    assert torch.equal(received, torch.cat(folded))
    tokens = sum(h * w for h, w in grids(model, images)) // m**2
    assert received.shape == (tokens, m * m * model.vision.vision_hidden_size)


def test_under_an_ablation_the_text_rows_are_the_token_embeddings(model):
    with model.trace(prompt(model, TWO), images=TWO):
        mask = model.vision.image_token_mask.save()
        model.vision.image_features[:] = 0
        first = model.layers[0].input.save()
    embeddings = model._module.get_input_embeddings().weight
    ids = inputs(model, TWO)["input_ids"]
    assert torch.equal(first[~mask], embeddings[ids][~mask])


# -- the packed tower -------------------------------------------------------------------------------


@pytest.mark.parametrize("images", [ONE, TWO], ids=COUNTS)
def test_the_packed_layout_with_cls_and_register_rows_per_image(model, images):
    batch = inputs(model, images)
    embeddings = model._module.vision_model.embeddings
    with model.trace(prompt(model, images), images=images):
        patches = model.vision.patch_embeddings.save()
        stream = model.vision.layers[0].layer_input.save()
    rows = image_rows(model, images)
    # The patch projection on the processor's flattened patches, image after image.
    assert torch.equal(patches[0], torch.nn.functional.linear(batch["pixel_values"], embeddings.patch_projection.weight))
    # Each image's rows: its cls tokens, its registers (the embedder's own parameter), then its patches plus
    # the position embedding interpolated to its own grid.
    done = 0
    for (start, first_patch, end), (h, w) in zip(rows, grids(model, images)):
        assert torch.equal(stream[0, start:first_patch], embeddings.cls_register_token)
        position = embeddings._interpolate_position_embedding((h, w), patches.dtype)[0]
        assert torch.equal(stream[0, first_patch:end], patches[0, done : done + h * w] + position)
        done += h * w
    assert model.vision.num_prefix_tokens == model.vision.num_cls_tokens + model.vision.num_registers == prefix(model)


@pytest.mark.parametrize("images", [ONE, TWO], ids=COUNTS)
def test_attention_output_is_after_the_layer_scale(model, images):
    block = model.vision.layers[0]
    native = model._module.vision_model.encoder.layer[0]
    with model.trace(prompt(model, images), images=images):
        attended = block.self_attn.output[0].save()
        attention = block.attention_output.save()
    assert torch.equal(attention, attended * native.layer_scale1.lambda1)  # the scaled branch is what is added
    assert not torch.equal(attention, attended)


@pytest.mark.parametrize("images", [ONE, TWO], ids=COUNTS)
def test_queries_keys_and_values_are_whole_and_each_image_attends_with_its_slice(model, images):
    """One dense kernel call for one image, one call per image for two: the per-call outputs, joined, are the
    head outputs, and each is eager attention over the image's rows of the whole queries, keys and values."""
    attention = model.vision.layers[-1].self_attn
    native = model._module.vision_model.encoder.layer[-1].attention
    rows = image_rows(model, images)
    several = len(images) > 1
    with model.trace(prompt(model, images), images=images) as tracer:
        cu_seqlens = attention.inputs[1]["cu_seqlens"].save()
        normed = attention.inputs[0][0].save()
        queries = attention.attention_queries.save()
        keys = attention.attention_keys.save()
        values = attention.attention_values.save()
        calls = nnsight.save([])
        if several:
            for _ in tracer.iter[0 : len(images)]:
                calls.append(attention.source.attention_interface_3.output[0].save())
        else:
            calls.append(attention.source.attention_interface_1.output[0].save())
        heads = attention.attention_head_outputs.save()
        projected = attention.o_proj.input.save()
    head_count, head_dim = native.num_attention_heads, native.head_dim
    assert queries.shape == keys.shape == values.shape == (1, head_count, rows[-1][2], head_dim)
    assert heads.shape == (1, rows[-1][2], head_count, head_dim)
    assert torch.equal(queries, native.q_proj(normed).view(1, -1, head_count, head_dim).transpose(1, 2))
    if several:
        assert cu_seqlens.tolist() == [0, *(end for _, _, end in rows)]
    else:
        assert cu_seqlens is None
    assert [c.shape[1] for c in calls] == [end - start for start, _, end in rows]
    assert torch.equal(torch.cat(list(calls), dim=1), heads)
    assert torch.equal(heads.flatten(2), projected)
    for (start, _, end), call in zip(rows, calls):
        q, k, v = (t[:, :, start:end] for t in (queries, keys, values))
        assert torch.equal(eager_attention(q, k, v, native.scaling), call)


@pytest.mark.parametrize("images", [ONE, TWO], ids=COUNTS)
def test_writes_to_keys_and_head_outputs_reach_every_branch(model, images):
    """Zero keys (assigned) or zero queries (in place) make each image attend evenly over its own rows, on the
    dense branch and the per-image one; zero head outputs leave the output projection's bias."""
    attention = model.vision.layers[-1].self_attn
    text = prompt(model, images)
    with model.trace(text, images=images):
        keys = attention.attention_keys
        attention.attention_keys = torch.zeros_like(keys)
        values = attention.attention_values.save()
        via_keys = attention.attention_head_outputs.save()
    with model.trace(text, images=images):
        attention.attention_queries[:] = 0
        via_queries = attention.attention_head_outputs.save()
    assert torch.equal(via_keys, via_queries)
    for start, _, end in image_rows(model, images):
        mean = values[:, :, start:end].mean(dim=2, keepdim=True).transpose(1, 2)
        assert torch.allclose(via_keys[:, start:end], mean.expand(1, end - start, -1, -1), atol=1e-6)
    with model.trace(text, images=images):
        attention.attention_head_outputs[:] = 0
        projected = attention.output[0].save()
    bias = attention.o_proj._module.bias
    assert torch.equal(projected, bias.expand_as(projected))


def test_a_write_of_the_wrong_shape_is_refused(model):
    attention = model.vision.layers[0].self_attn
    length = image_rows(model, ONE)[-1][2]
    with pytest.raises(ValueError, match=rf"attention_queries takes a tensor of shape \(1, 2, {length}, 16\).*got \(1, 2, 3, 16\)"):
        with model.trace(prompt(model, ONE), images=ONE):
            attention.attention_queries = torch.zeros(1, 2, 3, 16)


def test_writing_patch_embeddings_reaches_the_first_block(model):
    text = prompt(model, TWO)
    vision = model.vision
    with model.trace(text, images=TWO):
        clean_patches = vision.patch_embeddings.save()
        clean = vision.layers[0].layer_input.save()
    with model.trace(text, images=TWO):
        vision.patch_embeddings[:] = 0
        zeroed = vision.layers[0].layer_input.save()
    for start, first_patch, _end in image_rows(model, TWO):
        assert torch.equal(zeroed[0, start:first_patch], clean[0, start:first_patch])  # prefix rows untouched
    patch_rows = torch.cat([torch.arange(p, e) for _, p, e in image_rows(model, TWO)])
    assert torch.allclose(zeroed[0, patch_rows], clean[0, patch_rows] - clean_patches[0], atol=1e-6)  # positions remain


# -- the pattern: per image ------------------------------------------------------------------------


@pytest.mark.parametrize("images", [ONE, TWO], ids=COUNTS)
def test_the_pattern_is_the_block_diagonal_weights_the_module_returns(model, images):
    """Under eager RADIO's attention returns (and its block discards) each image's probabilities laid out
    block-diagonally, zero between images: what attention_probabilities serves, from inside the kernel calls."""
    attention = model.vision.layers[0].self_attn
    rows = image_rows(model, images)
    with model.trace(prompt(model, images), images=images):
        pattern = attention.attention_probabilities.save()
        weights = attention.output[1].save()
    assert torch.equal(pattern, weights)
    length = rows[-1][2]
    assert weights.shape == (1, model.vision.num_heads, length, length)
    assert torch.allclose(weights.sum(-1), torch.ones(weights.shape[:-1]))
    inside = torch.zeros(length, length, dtype=torch.bool)
    for start, _, end in rows:
        inside[start:end, start:end] = True
    assert torch.equal(weights[..., ~inside], torch.zeros_like(weights[..., ~inside]))


# -- the hybrid text model ---------------------------------------------------------------------------


def kinds(model) -> list[str]:
    return list(model.config.text_config.layers_block_type)


def test_each_block_adds_its_one_sublayer(model):
    blocks = kinds(model)
    mamba, moe, attention = (blocks.index(k) for k in ("linear_attention", "moe", "full_attention"))
    text = prompt(model, ONE)
    with model.trace(text, images=ONE):
        mixed = nnsight.save([model.layers[mamba].layer_input, model.layers[mamba].mixer.output,
                              model.layers[mamba].layer_output])
        experts = nnsight.save([model.layers[moe].layer_input, model.layers[moe].mlp_output,
                                model.layers[moe].layer_output])
        attended_input = model.layers[attention].layer_input.save()
        probabilities = model.layers[attention].self_attn.attention_probabilities.save()
        attended = nnsight.save([attended_input, model.layers[attention].attention_output,
                                 model.layers[attention].layer_output])
    for layer_input, added, output in (mixed, experts, attended):
        assert torch.equal(layer_input + added, output)
    length = mixed[0].shape[1]
    heads = model.config.text_config.num_attention_heads
    assert probabilities.shape == (1, heads, length, length)
    assert torch.allclose(probabilities.sum(-1), torch.ones(probabilities.shape[:-1]))
    assert torch.equal(probabilities.triu(1), torch.zeros_like(probabilities))  # causal


def test_a_value_a_block_lacks_is_unavailable_with_the_reason(model):
    blocks = kinds(model)
    mamba, moe, attention = (blocks.index(k) for k in ("linear_attention", "moe", "full_attention"))
    with pytest.raises(Unavailable, match=rf"layers\[{mamba}\]'s token mixer is a Mamba2 selective state-space mixer, "
                                          rf"mixer, not softmax attention.*layers\[{mamba}\]\.mixer\.output"):
        model.layers[mamba].attention_output
    with pytest.raises(Unavailable, match=rf"layers\[{mamba}\] has no MLP.*layers\[{mamba}\]\.mixer\.output"):
        model.layers[mamba].mlp_output
    with pytest.raises(Unavailable, match=rf"layers\[{attention}\] has no MLP: this NemotronHBlock holds one "
                                          rf"sublayer, softmax attention.*layers\[{attention}\]\.attention_output"):
        model.layers[attention].mlp_output
    with pytest.raises(Unavailable, match=rf"layers\[{moe}\] holds no token mixer, only its MLP \(NemotronHMoE\).*"
                                          rf"layers\[{moe}\]\.mlp_output"):
        model.layers[moe].attention_output


def test_the_one_norm_answers_to_the_pre_norm_name_of_its_sublayer_alone(model):
    """The block's norm is the attention's pre-norm or the MLP's (the row's native); the other name says why not."""
    blocks = kinds(model)
    mamba, attention = (blocks.index(k) for k in ("linear_attention", "full_attention"))
    with pytest.raises(Unavailable, match=rf"layers\[{attention}\] holds no MLP: .*before its sublayer, softmax attention"):
        model.layers[attention].post_attention_layernorm
    with pytest.raises(Unavailable, match=rf"layers\[{mamba}\] holds no softmax attention: .*layers\[{mamba}\]\.norm, "
                                          r"which here comes before its sublayer, a Mamba2"):
        model.layers[mamba].input_layernorm


def test_sdpa_serves_the_same_whole_values(model, tiny_checkpoint):
    """The projections run on every branch: under sdpa the queries and head outputs are where eager has them,
    the discarded weights are None, and the pattern, served under eager, says to load eager."""
    sdpa = StandardizedTransformer(tiny_checkpoint(NAME), task="image-text-to-text", attn_implementation="sdpa")
    text = prompt(model, TWO)
    reads = {}
    for name, loaded in (("eager", model), ("sdpa", sdpa)):
        attention = loaded.vision.layers[0].self_attn  # its input does not depend on any kernel
        with loaded.trace(text, images=TWO):
            queries = attention.attention_queries.save()
            heads = attention.attention_head_outputs.save()
            weights = attention.output[1].save()
        reads[name] = (queries, heads, weights)
    assert torch.equal(reads["sdpa"][0], reads["eager"][0])
    assert torch.allclose(reads["sdpa"][1], reads["eager"][1], atol=1e-6)  # up to each kernel's rounding
    assert reads["sdpa"][2] is None
    served, asked = model.vision.support(), sdpa.vision.support()
    for value in ("self_attn.attention_scores", "self_attn.attention_probabilities"):
        assert served.pop(value) is None
        assert all("load it with attn_implementation='eager'" in why for why in asked.pop(value).values())
    assert asked == served


def test_repr_shows_each_kind_of_block(model):
    text = repr(model)
    assert text.startswith("StandardizedTransformer(nemotron_h_omni: NemotronH_Omni_Reasoning_V3; text: 4 blocks")
    for line in ("  layers: 4 x NemotronHBlock", "    [0]:", "    [1, 3]:", "    [2]:", "      mlp: NemotronHMoE()",
                 "      self_attn: NemotronHAttention()", "  vision: RadioModel()", "    layers: 2 x RadioLayer",
                 "    patch_embed: Linear(in_features=192, out_features=32, bias=False)"):
        assert line in text.splitlines(), line


# -- video and audio, at nnsight's own sites ---------------------------------------------------------


VIDEO = [noise_video(4, 32, 32)]
AUDIO = [noise_audio(1.0)]
#: The root's scatters after the images' (``_0``): the videos' (``_1``), then the audio's (``_2``).
SITES = {"videos": "inputs_embeds_masked_scatter_1", "audio": "inputs_embeds_masked_scatter_2"}


@pytest.mark.parametrize("media", [{"videos": VIDEO}, {"audio": AUDIO}, {"videos": VIDEO, "audio": AUDIO},
                                   {"images": ONE, "audio": AUDIO}], ids=["video", "audio", "video-audio", "image-audio"])
def test_videos_and_audio_are_scattered_at_their_own_tokens(model, media):
    """The root's second scatter writes a video's tubelet features at the IMAGE token's positions (the processor
    writes each tubelet as ``<img><image>...</img>``; no position holds ``video_token_id``), its third the audio's at
    ``audio_token_id``: what the first text block receives there, read at nnsight's own ``.source`` sites."""
    text = chat_prompt(model.processor, len(media.get("images", [])), "Describe.",
                       videos=len(media.get("videos", [])), audio=len(media.get("audio", [])))
    kinds = [kind for kind in SITES if kind in media]  # in forward order
    with model.trace(text, **media):
        scattered = nnsight.save([])
        for kind in kinds:
            scattered.append(getattr(model.source, SITES[kind]).inputs.save())
        layer_input = model.layers[0].input.save()
    encoded = model.processor(text=[text], return_tensors="pt", **media)
    ids = encoded["input_ids"]
    assert not (ids == model.config.video_token_id).any()
    expected = {}
    if "videos" in media:
        # 4 frames: 2 tubelets of 2 frames, each a 4x4 patch grid folded 2x2 into 4 tokens
        tubelets, height, width = (encoded["pixel_values_videos"].shape[i] for i in (1, 3, 4))
        patch = model.processor.video_processor.patch_size
        tokens = tubelets * (height // patch) * (width // patch) // merge(model) ** 2
        assert tokens == 8
        expected["videos"] = (model.config.image_token_id, tokens)
    if "audio" in media:
        expected["audio"] = (model.config.audio_token_id, 13)  # a second: 101 mel frames, subsampled by 8
    assert len(scattered) == len(kinds)
    for kind, (args, _) in zip(kinds, scattered):
        token, count = expected[kind]
        mask = ids == token
        assert int(mask.sum()) == count
        assert torch.equal(layer_input[mask], args[1].reshape(-1, model.config.text_config.hidden_size))


# -- RADIO's grids, on patch-coloured images (packed_grids.py) ------------------------------------------


class TestGrids(GridSuite):
    """RADIO: each image's cls and register rows lead its stream and the grids drop them; the host pixel-shuffles."""

    checkpoint = NAME

    def test_radio_patch_grid_drops_the_cls_and_register_rows(self, case):
        """The patch embeddings are the projection of the processor's flat patches (no prefix rows: ``of=
        "patch_embeddings"``); the blocks' stream has each image's cls and register rows first, which the grid drops:
        the tower's own ``features`` (its output less the prefix rows) is the grid of its last stream."""
        model = case.model
        assert case.inputs["image_grid_hw"].tolist() == [list(shape) for shape in case.shapes]
        rows = case.patch_rows(case.inputs["pixel_values"])
        projection = model.vision.patch_embed._module
        by_hand = F.linear(case.inputs["pixel_values"], projection.weight, projection.bias)
        with case.trace():
            embeddings = model.vision.patch_embeddings.save()
            tower = model.vision.tower_output.save()
            features = model.vision.output.features.save()
        prefix = model.vision.num_prefix_tokens
        assert tower.shape[1] == embeddings.shape[1] + 2 * prefix
        assert torch.equal(embeddings[0], by_hand)
        own = features.split([h * w for h, w in case.shapes])
        for image, (where, (h, w)) in enumerate(zip(rows, case.shapes)):
            assert torch.equal(model.vision.patch_grid(embeddings, image=image, of="patch_embeddings"), by_hand[where])
            assert torch.equal(model.vision.patch_grid(tower, image=image), own[image].reshape(h, w, -1))
        with pytest.raises(GridError, match="'stream' or 'patch_embeddings'"):
            model.vision.patch_grid(tower, image=0, of="features")
        # the patch embeddings read as the stream (of= forgotten) would be shifted by the prefix rows: refused
        with pytest.raises(GridError, match=rf"holding exactly {tower.shape[1]} rows"):
            model.vision.patch_grid(embeddings, image=0)

    def test_radio_token_grid_is_the_pixel_shuffle(self, case):
        """Token (a, b) of an image is its features at (2a, 2b), (2a, 2b + 1), (2a + 1, 2b), (2a + 1, 2b + 1), joined:
        what the projector receives (the host's pixel shuffle)."""
        model = case.model
        merge = round(1 / model.config.downsample_ratio)
        assert model._module.vision_final_layernorm is None
        with case.trace():
            features = model.vision.output.features.save()
            shuffled = model.projector.input.save()
            image_features = model.vision.image_features.save()
        assert int((case.inputs["input_ids"] == model.config.image_token_id).sum()) == image_features.shape[0]
        own = features.split([h * w for h, w in case.shapes])
        for image, (h, w) in enumerate(case.shapes):
            patches = own[image].reshape(h // merge, merge, w // merge, merge, -1).permute(0, 2, 1, 3, 4)
            expected = patches.reshape(h // merge, w // merge, -1)
            assert torch.equal(model.vision.token_grid(shuffled, image=image), expected)
            assert model.vision.token_grid(image_features, image=image).shape[:2] == (h // merge, w // merge)

    def test_radio_grids_round_trip_leaving_the_prefix_rows(self, case):
        vision = case.model.vision
        with case.trace():
            tower = vision.tower_output.save()
            features = vision.image_features.save()
        for image in range(2):
            grid = vision.patch_grid(tower, image=image)
            assert torch.equal(vision.place_patch_grid(grid, into=tower.clone(), image=image), tower)
            emptied = vision.place_patch_grid(torch.zeros_like(grid), into=tower.clone(), image=image)
            changed = (emptied != tower).any(dim=-1)[0].nonzero().squeeze(1)
            first = sum(h * w + vision.num_prefix_tokens for h, w in case.shapes[:image]) + vision.num_prefix_tokens
            assert torch.equal(changed, torch.arange(first, first + grid.shape[0] * grid.shape[1]))
            tokens = vision.token_grid(features, image=image)
            assert torch.equal(vision.place_token_grid(tokens, into=features.clone(), image=image), features)


def test_its_videos_are_withheld_saying_why(model):
    reason = "nemotron_h_omni's video is not served: its processor writes a video's frames with the image token"
    assert model.support()["video"].startswith(reason)
    with pytest.raises(Unavailable, match=re.escape(f"vision.video_features is unavailable: {reason}")):
        model.vision.video_features
