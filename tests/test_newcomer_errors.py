"""The errors a newcomer meets first, each saying what was wrong and what to do (issue #22, item 4).

- a local path that does not exist: the folder is named as missing, and a hub id is said to need the hub;
- a block index past the end, text or tower: how many blocks there are;
- a value name the envoy does not have: did-you-mean, the values it has, and which families have another
  family's value;
- a value read outside a trace: it is read inside ``with model.trace(...)``;
- a vision value in a trace whose prompt carries no image: `Unavailable`, saying no image reached the forward;
- the Qwen ViT's pattern over several kernel calls, edited in place as read: it says where an edit reaches the model;
- a recipe's target word the tokenizer does not have, or that is several tokens: refused before anything runs.
"""

from __future__ import annotations

import os
import re

import pytest
import torch
from nnsight.intervention.interleaver import OutOfOrderError

from envoys import StandardizedTransformer
from envoys.core.values import Unavailable
from envoys.image import recipes
from envoys.model import looks_like_path
from envoys.testing import chat_prompt, noise_image

IMAGE = noise_image(32, 32, seed=5)


@pytest.fixture(scope="module")
def qwen(tiny_checkpoint):
    return StandardizedTransformer(tiny_checkpoint("qwen2_5_vl"), task="image-text-to-text", attn_implementation="eager")


@pytest.fixture(scope="module")
def llava(tiny_checkpoint):
    return StandardizedTransformer(tiny_checkpoint("llava-siglip"), task="image-text-to-text", attn_implementation="eager")


# -- a local path that does not exist ------------------------------------------------------------


@pytest.mark.parametrize("path", ["some/local/path/that/does/not/exist", "./nope", "/no/such/folder", "~/nope-at-all"])
def test_a_missing_local_folder_is_named_and_a_hub_id_is_said_to_need_the_hub(path):
    with pytest.raises(FileNotFoundError) as raised:
        StandardizedTransformer(path, task="image-text-to-text")
    message = str(raised.value)
    where = os.path.abspath(os.path.expanduser(path))
    assert message.startswith(f"no folder {path!r} ({where}): ")
    assert "a local checkpoint is a folder saved with save_pretrained (the model and its processor)" in message
    assert "a hub id such as 'org/name' is downloaded from the hub, which needs network access" in message


def test_a_path_under_an_existing_folder_says_which_part_exists(tmp_path):
    path = tmp_path / "checkpoints" / "qwen"
    (tmp_path / "checkpoints").mkdir()
    with pytest.raises(FileNotFoundError, match=re.escape(f"no such folder ({tmp_path / 'checkpoints'} exists but holds no 'qwen')")):
        StandardizedTransformer(path, task="image-text-to-text")


@pytest.mark.parametrize("name", ["org/name", "llava-hf/llava-1.5-7b-hf", "gpt2"])
def test_a_plain_hub_id_still_goes_to_the_hub(name):
    assert not looks_like_path(name)


@pytest.mark.parametrize("name", ["./nope", "../nope", "/abs/nope", "~/nope", "a/b/c", f"a{os.sep}b{os.sep}c"])
def test_what_looks_like_a_path(name):
    assert looks_like_path(name)


def test_a_name_whose_first_part_is_a_folder_here_is_a_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert not looks_like_path("org/name")
    (tmp_path / "org").mkdir()
    assert looks_like_path("org/name")
    with pytest.raises(FileNotFoundError, match=re.escape(f"no such folder ({tmp_path / 'org'} exists but holds no 'name')")):
        StandardizedTransformer("org/name", task="image-text-to-text")


# -- a block index past the end ------------------------------------------------------------------


def test_a_text_block_past_the_end_says_how_many_there_are(qwen):
    with pytest.raises(IndexError, match=re.escape("layers[7]: the text model has 2 blocks (0 to 1); got 7")):
        qwen.layers[7]
    with pytest.raises(IndexError, match=re.escape("the text model has 2 blocks (0 to 1); got -3")):
        qwen.layers[-3]
    assert qwen.layers[-1] is qwen.layers[1]


def test_a_tower_block_past_the_end_says_how_many_there_are(qwen):
    count = len(qwen.vision.layers)
    with pytest.raises(
        IndexError, match=re.escape(f"vision.layers[7]: the tower has {count} blocks (0 to {count - 1}); got 7")
    ):
        qwen.vision.layers[7]


# -- a value name the envoy does not have --------------------------------------------------------


def test_a_typo_says_did_you_mean_and_lists_the_block_values(qwen):
    with pytest.raises(AttributeError) as raised:
        qwen.layers[0].atention_output  # noqa: B018
    message = str(raised.value)
    assert message.startswith("layers[0] has no value or module 'atention_output' (did you mean 'attention_output' or ")
    assert "; its values: layer_input, attention_output, mlp_output, layer_output; its modules: self_attn, mlp" in message


@pytest.mark.parametrize(("name", "meant"), [("logitz", "logits"), ("visoin", "vision"), ("num_layer", "num_layers")])
def test_a_typo_on_the_model_says_did_you_mean(qwen, name, meant):
    with pytest.raises(AttributeError, match=re.escape(f"model has no value or module {name!r} (did you mean {meant!r}")):
        getattr(qwen, name)


def test_another_familys_value_says_which_families_have_it(llava):
    with pytest.raises(AttributeError) as raised:
        llava.vision.deepstack_output  # noqa: B018
    message = str(raised.value)
    assert message.startswith("vision has no value or module 'deepstack_output'")
    others = message.partition("deepstack_output is a value of other families: ")[2].partition(" (at ")[0]
    assert "qwen3_vl" in others.split(", ")
    assert " (at model.layers[i].deepstack_output); " in message
    assert "its values: " in message and "image_features" in message


def test_a_private_or_dunder_name_is_a_plain_attribute_error(qwen):
    assert not hasattr(qwen.layers[0], "_no_such_thing")
    assert not hasattr(qwen.layers[0], "__no_such_thing__")
    assert hasattr(qwen.layers[0], "self_attn") and hasattr(qwen.layers[0], "training")  # a module, the module's


# -- a value read outside a trace ----------------------------------------------------------------


@pytest.mark.parametrize("read", ["vision.image_features", "layers[0].layer_output", "logits"])
def test_a_value_read_outside_a_trace_says_to_read_it_inside_one(qwen, read):
    with pytest.raises(ValueError, match=re.escape(f"{read} is read inside a trace, while the model runs: "
                                                   f"with model.trace(prompt, images=[image]):")):
        eval(f"model.{read}", {"model": qwen})


def test_a_value_written_outside_a_trace_says_to_write_it_inside_one(qwen):
    with pytest.raises(ValueError, match=re.escape("layers[0].layer_output is written inside a trace")):
        qwen.layers[0].layer_output = torch.zeros(1)


# -- a vision value with no image ----------------------------------------------------------------


@pytest.mark.parametrize("read", ["vision.image_features", "vision.layers[0].layer_output", "vision.patch_embeddings",
                                  "vision.tower_output"])
def test_a_vision_value_on_a_prompt_with_no_image_is_unavailable(qwen, read):
    with pytest.raises(Unavailable, match=re.escape("is unavailable: no image reached this forward: the trace's "
                                                    "inputs carry no images")):
        with qwen.trace(chat_prompt(qwen.processor, 0, "Hello there")):
            eval(f"model.{read}", {"model": qwen})


def test_a_module_of_the_image_pathway_on_a_prompt_with_no_image_says_no_image_reached(qwen):
    with pytest.raises(OutOfOrderError, match=re.escape("was requested but the model already ran past it; no image "
                                                        "reached this forward")):
        with qwen.trace(chat_prompt(qwen.processor, 0, "Hello there")):
            qwen.projector.output.save()


def test_text_values_on_a_prompt_with_no_image_are_served(qwen):
    with qwen.trace(chat_prompt(qwen.processor, 0, "Hello there")):
        mask = qwen.vision.image_token_mask.save()
        output = qwen.layers[0].layer_output.save()
    assert not mask.any() and output.shape[1] == mask.shape[1]


# -- the Qwen ViT's pattern, assembled from its kernel calls ------------------------------------------


def test_an_edit_of_the_assembled_pattern_says_where_an_edit_reaches_the_model(qwen):
    images = [IMAGE, noise_image(64, 32, seed=6)]
    with pytest.raises(AttributeError, match=re.escape(
            "it is assembled from the patterns of the 2 kernel calls after the last of them ran, so an edit to it "
            "would change nothing the model uses; edit a call's own block in place "
            "(vision.layers[1].self_attn.kernel_calls[k].attention_probabilities)")):
        with qwen.trace(chat_prompt(qwen.processor, 2, "What is in the pictures?"), images=images):
            qwen.vision.layers[1].self_attn.attention_probabilities[..., 0] = 0  # a full-attention block: per image


# -- a recipe's target word ----------------------------------------------------------------------


def test_a_target_word_the_tokenizer_does_not_have_is_refused(qwen):
    with pytest.raises(ValueError, match=re.escape(
        "'xyzzyq' is not in the tokenizer's vocabulary: it became [0], the unknown token '<unk>'; "
        "pick a word that is one token of this tokenizer"
    )):
        recipes.token_id(qwen, "xyzzyq")


def test_a_target_of_several_tokens_is_refused_naming_them(qwen):
    with pytest.raises(ValueError, match=re.escape(
        "'red blue' is 2 tokens, [55, 57] ('red', 'blue'), not one; pick a word that is one token"
    )):
        recipes.token_id(qwen, "red blue")


def test_patching_refuses_a_target_it_cannot_tell_apart_before_running(qwen, monkeypatch):
    def no_trace(*args, **kwargs):
        raise AssertionError("a trace ran")

    monkeypatch.setattr(qwen, "trace", no_trace)
    prompt = chat_prompt(qwen.processor, 1, "What colour?")
    with pytest.raises(ValueError, match=re.escape("the target's two tokens are one token, 53 ('cat'): the logit "
                                                   "difference would be 0 in every run; pick two different tokens")):
        recipes.patch_image_rows(qwen, prompt, [IMAGE], [IMAGE], target=("cat", " cat"))
    with pytest.raises(ValueError, match="is not in the tokenizer's vocabulary"):
        recipes.patch_image_rows(qwen, prompt, [IMAGE], [IMAGE], target=("Paris", "cat"))
