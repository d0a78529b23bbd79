"""StandardizedTransformer on tiny LLaVA checkpoints: what is particular to the family, exact.

The spec's contracts (the scatter, the tower's stream, the pattern, what the
projector reads, ablation, sizes, support, the text-only load, generation,
outputs against the plain model) run on these checkpoints in
test_vision_contracts.py; this file holds the rest.

Two checkpoints: llava-interleave-like (SigLIP tower, no CLS, Qwen2 text,
vision_feature_layer -1, strategy "full") and Llava 1.5-like (CLIP tower, CLS
first, Llama text, block -2, strategy "default", CLS dropped).
"""

from __future__ import annotations

import json
import shutil

import nnsight
import pytest
import torch
from nnsight.intervention.interleaver import OutOfOrderError
from tiled_grids import TiledGridSuite, side
from tiled_grids import trace as grid_trace
from tower_body import tower_body

from envoys import StandardizedTransformer, Unavailable
from envoys.testing import chat_prompt, noise_image

CHECKPOINTS = ["llava-siglip", "llava-clip"]
ONE = [noise_image(32, 32, seed=0)]
TWO = [noise_image(32, 32, seed=0), noise_image(48, 64, seed=1)]


@pytest.fixture(scope="module", params=CHECKPOINTS)
def model(request, tiny_checkpoint):
    return StandardizedTransformer(
        tiny_checkpoint(request.param), task="image-text-to-text", device="cpu", attn_implementation="eager"
    )


def prompt(model, images) -> str:
    return chat_prompt(model.processor, len(images), "What colour is this?")


def has_cls(model) -> bool:
    return model.config.vision_config.model_type == "clip_vision_model"


def patches_per_image(model) -> int:
    config = model.config.vision_config
    return (config.image_size // config.patch_size) ** 2


def test_block_values_add_up_on_text_blocks(model):
    text_block = model.layers[1]
    with model.trace(prompt(model, TWO), images=TWO):
        block_input = text_block.input.save()
        parts = nnsight.save([text_block.layer_input, text_block.attention_output, text_block.mlp_output,
                              text_block.layer_output])
    layer_input, attention, mlp, output = parts
    assert torch.equal(layer_input + attention + mlp, output)
    assert torch.equal(layer_input, block_input)


def test_attention_interior_is_consistent_and_probabilities_are_writable(model):
    text = prompt(model, ONE)
    attention = model.vision.layers[0].self_attn
    with model.trace(text, images=ONE):
        queries = attention.attention_queries.save()
        keys = attention.attention_keys.save()
        values = attention.attention_values.save()
        scores = attention.attention_scores.save()
        probabilities = attention.attention_probabilities.save()
        heads = attention.attention_head_outputs.save()
        projected_in = attention.o_proj.input.save()
        clean = model.vision.layers[0].attention_output.save()
    rows = patches_per_image(model) + has_cls(model)
    head_dim = model.vision.head_dim
    assert queries.shape == keys.shape == values.shape == (1, model.vision.num_heads, rows, head_dim)
    assert torch.equal(scores.softmax(-1), probabilities)
    assert torch.equal(probabilities @ values, heads.transpose(1, 2))
    assert torch.equal(heads.reshape(1, rows, -1), projected_in)

    with model.trace(text, images=ONE):
        attention.attention_probabilities[:] = 1.0 / rows  # every patch attends evenly
        edited = model.vision.layers[0].attention_output.save()
    assert not torch.equal(edited, clean)
    uniform = values.mean(dim=2, keepdim=True).expand_as(values).transpose(1, 2).reshape(1, rows, -1)
    assert torch.allclose(edited, attention._module.out_proj(uniform), atol=1e-6)


def test_text_attention_probabilities_are_causal(model):
    with model.trace(prompt(model, ONE), images=ONE):
        probabilities = model.layers[0].self_attn.attention_probabilities.save()
    above = torch.ones(probabilities.shape[-2:], dtype=torch.bool).triu(1)
    assert torch.equal(probabilities[..., above], torch.zeros_like(probabilities[..., above]))


def test_patch_embeddings_are_the_convolution_before_positions(model):
    vision = model.vision
    body = tower_body(vision)
    with model.trace(prompt(model, TWO), images=TWO):
        patches = vision.patch_embeddings.save()
        if has_cls(model):
            first = body.pre_layrnorm.input.save()
        else:
            first = vision.layers[0].layer_input.save()
    positions = body._module.embeddings.position_embedding.weight
    assert patches.shape == (2, patches_per_image(model), vision.vision_hidden_size)
    if has_cls(model):
        assert torch.equal(first[:, 1:], patches + positions[1:])
    else:
        assert torch.equal(first, patches + positions)


def test_writing_patch_embeddings_reaches_the_tower(model):
    text = prompt(model, ONE)
    with model.trace(text, images=ONE):
        clean = model.vision.layers[0].layer_output.save()
    with model.trace(text, images=ONE):
        model.vision.patch_embeddings = torch.zeros(1, patches_per_image(model), model.vision.vision_hidden_size)
        edited = model.vision.layers[0].layer_output.save()
    assert not torch.equal(edited, clean)


def test_a_one_sided_edit_at_the_image_rows_leaves_the_text_rows(model):
    text = prompt(model, ONE)
    with model.trace(text, images=ONE):
        clean = model.logits.save()
    with model.trace(text, images=ONE):
        mask = model.vision.image_token_mask.save()
        before = model.layers[0].layer_output.clone().save()
        model.layers[0].layer_output[mask] = 0
        after = model.layers[1].input.save()
        edited = model.logits.save()
    assert torch.equal(after[mask], torch.zeros_like(after[mask]))
    assert torch.equal(after[~mask], before[~mask])
    assert not torch.equal(edited, clean)


def test_image_features_can_be_replaced_whole(model):
    text = prompt(model, ONE)
    with model.trace(text, images=ONE):
        mask = model.vision.image_token_mask.save()
        features = model.vision.image_features
        model.vision.image_features = torch.ones_like(features)
        first = model.layers[0].input.save()
    assert torch.equal(first[mask], torch.ones_like(first[mask]))


def test_a_bad_shape_written_to_image_features_is_refused_and_the_next_run_is_clean(model):
    text = prompt(model, ONE)
    with model.trace(text, images=ONE):
        clean = model.logits.save()
    with pytest.raises(ValueError, match=r"vision\.image_features takes a tensor of shape \(16, 32\).*got \(3, 32\)"):
        with model.trace(text, images=ONE):
            model.vision.image_features = torch.zeros(3, 32)
    with model.trace(text, images=ONE):
        after = model.logits.save()
    assert torch.equal(after, clean)


def test_the_mask_is_read_only(model):
    with pytest.raises(AttributeError, match="vision.image_token_mask is read-only"):
        with model.trace(prompt(model, ONE), images=ONE):
            model.vision.image_token_mask = torch.zeros(1, 3, dtype=torch.bool)


def test_reads_follow_the_forward(model):
    with pytest.raises(OutOfOrderError):
        with model.trace(prompt(model, ONE), images=ONE):
            model.layers[0].input.save()
            model.vision.layers[0].layer_output.save()


def test_repr_shows_the_standard_tree(model):
    text = repr(model)
    assert text.startswith("StandardizedTransformer(llava: LlavaForConditionalGeneration;")
    for line in ("  layers: 2 x", "  vision: ", "    layers: ", "  projector: LlavaMultiModalProjector",
                 "image_features -> ImageFeatures: what the wrapper scatters into the embeddings [image_tokens, hidden_size]",
                 "attention_probabilities -> Pattern:"):
        assert line in text, line


def test_probs_to_dict(model):
    probabilities = torch.zeros(model.config.text_config.vocab_size)
    probabilities[[5, 7]] = torch.tensor([0.75, 0.25])
    table = model.probs_to_dict(probabilities, k=2)
    assert table == {model.tokenizer.decode([5]): 0.75, model.tokenizer.decode([7]): 0.25}
    with pytest.raises(ValueError, match=r"one distribution, shape \[vocab\]"):
        model.probs_to_dict(probabilities[None], k=2)


def test_a_tower_value_in_a_forward_without_an_image_says_why(model):
    with pytest.raises(Unavailable, match=r"vision\.image_features is unavailable: no image reached this forward"):
        with model.trace("hello there"):
            model.vision.image_features.save()
    with pytest.raises(OutOfOrderError, match=r"layers\[0\]\.layer_input: .*reads follow the order"):
        with model.trace(prompt(model, ONE), images=ONE):
            model.layers[0].layer_output.save()
            model.layers[0].layer_input.save()




# -- the grids (tiled_grids.TiledGridSuite) ----------------------------------------------------------------------


class LlavaGrids(TiledGridSuite):
    """LLaVA: one tile per image, each tower row the select strategy keeps one token; the other strategy tested too."""

    def token_sources(self, model, inputs, index):
        strategy, cls = model.config.vision_feature_select_strategy, int(self.cls_rows == "first")
        stream = torch.cat([torch.full((index.shape[0], cls, 1), -1.0), index], dim=1)
        selected = stream[:, 1:] if strategy == "default" else stream
        return selected.reshape(-1, 1).long()

    # -- the other select strategy: SigLIP under "default", CLIP under "full" -------------------------------------

    #: the select strategy the checkpoint's builder does not use
    other_strategy: str

    @pytest.fixture(scope="class")
    @classmethod
    def strategy_model(cls, tiny_checkpoint, tmp_path_factory):
        """The tiny LLaVA checkpoint with the select strategy its builder does not use, in its config and processor."""
        folder = tmp_path_factory.mktemp(f"{cls.checkpoint}-{cls.other_strategy}")
        shutil.copytree(tiny_checkpoint(cls.checkpoint), folder, dirs_exist_ok=True)
        for file in ("config.json", "processor_config.json"):
            config = json.loads((folder / file).read_text())
            assert config["vision_feature_select_strategy"] != cls.other_strategy
            config["vision_feature_select_strategy"] = cls.other_strategy
            (folder / file).write_text(json.dumps(config))
        return StandardizedTransformer(folder, task="image-text-to-text", device="cpu", attn_implementation="eager")

    def test_the_token_grid_follows_the_select_strategy(self, strategy_model):
        """Under "default" the host drops each tile's first tower row (SigLIP's first patch, which then has no token);
        under "full" it keeps it (CLIP's CLS, a token on no patch). Patch (r, c) is tower row cls + r * side + c, so
        its token is row cls + r * side + c - dropped of the image's tokens."""
        model, images = strategy_model, self.pictures()
        layer = model.config.vision_feature_layer
        with grid_trace(model, images):
            tower = model.vision.layers[layer].layer_output.save()
            selected = model.projector.input.save()
            features = model.vision.image_features.save()
        cls = int(self.cls_rows == "first")
        dropped = int(model.config.vision_feature_select_strategy == "default")
        assert torch.equal(selected, tower[:, dropped:])  # transformers' own selection, on the real values
        n, tokens = side(model), selected.shape[1]
        for image in range(len(images)):
            grid = model.vision.token_grid(features, image=image)
            for r in range(n):
                for c in range(n):
                    row = cls + r * n + c - dropped
                    if row < 0:
                        assert grid[r, c].isnan().all()
                    else:
                        assert torch.equal(grid[r, c], features[image * tokens + row])


class TestGridsSiglip(LlavaGrids):
    """LLaVA with SigLIP: no CLS row, every tower row a token (strategy "full")."""

    checkpoint = "llava-siglip"
    images = [(4, 4, 8), (6, 8, 8)]
    other_strategy = "default"


class TestGridsClip(LlavaGrids):
    """LLaVA with CLIP: a CLS row first, dropped by the strategy "default", and a pre-norm before the blocks."""

    checkpoint = "llava-clip"
    images = [(4, 4, 8), (8, 6, 8)]
    cls_rows = "first"
    other_strategy = "full"

    def first_stream(self, model):
        return tower_body(model.vision).pre_layrnorm.input
