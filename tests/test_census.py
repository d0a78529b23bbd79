"""The census (``python -m envoys.families``): every image-text-to-text model_type, supported or why not."""

from __future__ import annotations

import subprocess
import sys

import pytest

from envoys.census import (
    ELSEWHERE,
    KINDS,
    LEFT_OUT,
    NOT_SCATTER,
    SCATTERS,
    SUPPORTED,
    census,
    entry,
    image_text_to_text_classes,
)
from envoys.families import families
from envoys.families.__main__ import main


@pytest.fixture(scope="module")
def entries():
    return {e.model_type: e for e in census()}


def needs(entries, *model_types: str) -> None:
    """Skip where the installed transformers lacks one of ``model_types`` (older releases lack some)."""
    missing = [t for t in model_types if t not in entries]
    if missing:
        pytest.skip(f"target absent: this transformers has no {', '.join(missing)}")


def test_every_image_text_to_text_model_type_has_one_line(entries):
    assert list(entries) == sorted(image_text_to_text_classes())
    assert {e.status for e in entries.values()} <= {SUPPORTED, SCATTERS, ELSEWHERE, NOT_SCATTER}


def test_the_supported_are_the_family_modules_and_each_scatters_where_its_rule_looks(entries):
    supported = {family.model_type for family in families()}
    assert {t for t, e in entries.items() if e.status == SUPPORTED} == supported & set(entries)
    assert {"llava", "qwen3_vl"} <= supported


def test_a_scatter_vlm_not_served_says_where_it_scatters_and_whether_its_tower_is_served(entries):
    needs(entries, "glm5_next", "shieldgemma2")
    # a model_type served by another's classes: ShieldGemma 2 is Gemma 3's, whose inner model scatters
    shieldgemma2 = entries["shieldgemma2"]
    assert shieldgemma2.status == SCATTERS
    assert shieldgemma2.reason.startswith("Gemma3Model.forward calls inputs_embeds.masked_scatter (1)")
    assert "its tower, siglip_vision_model, is served (" in shieldgemma2.reason and "llava" in shieldgemma2.reason
    assert "glm5_next_vision, is not served yet" in entries["glm5_next"].reason


def test_the_models_that_are_not_scatter_vlms_say_what_they_are(entries):
    needs(entries, "pix2struct", "udop", "t5gemma2", "vision-encoder-decoder", "git", "idefics", "fuyu")
    for model_type in ("pix2struct", "udop", "t5gemma2"):
        assert entries[model_type].status == NOT_SCATTER and "encoder-decoder" in entries[model_type].reason
    # a config that cannot be built without arguments (before 5.24) says nothing; its modeling module has no scatter
    assert entries["vision-encoder-decoder"].status == NOT_SCATTER
    for model_type, kind in KINDS.items():
        if model_type in entries:  # pi05 came in 5.25
            assert entries[model_type] == entry(model_type, "", (), {}) and entries[model_type].reason == kind
    assert entries["git"].status == NOT_SCATTER and "no forward of transformers.models.git.modeling_git" in entries["git"].reason


def test_a_scatter_in_another_class_than_the_host_is_named(entries):
    needs(entries, "granite4_vision")
    granite = entries["granite4_vision"]
    found = granite.reason.partition("; left out: ")[0]
    assert granite.status == ELSEWHERE and found.endswith("Granite4VisionTextModel scatters in its own forward")


def test_the_command_prints_a_line_per_model_type_and_the_count(entries, capsys):
    assert main([]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == len(entries) + 2
    counts = {status: sum(e.status == status for e in entries.values()) for status in (SUPPORTED, SCATTERS, ELSEWHERE)}
    assert f"{counts[SUPPORTED]} supported, {counts[SCATTERS]} more scatter at the host we look in" in out[-1]
    left_out = sum(t in LEFT_OUT for t, e in entries.items() if e.status in (SCATTERS, ELSEWHERE))
    assert out[-1].endswith(f"({counts[SUPPORTED]} of {sum(counts.values())} scatter VLMs served; {left_out} of the others "
                            "left out, saying why)")


def test_the_library_s_own_builds_say_nothing_on_stderr(entries):
    """The census and the rule catalogue build every tiny checkpoint; transformers' remarks on their configs are held
    back (`envoys.testing.quiet`), so both commands print nothing on stderr (no terminal here: no progress bar)."""
    for command, lines in ((["envoys.families"], len(entries) + 2), (["instrument.show", "qwen3_vl"], None)):
        done = subprocess.run([sys.executable, "-m", *command], capture_output=True, text=True, timeout=600)
        assert done.returncode == 0 and done.stderr == "", (command, done.stderr[-2000:])
        assert lines is None or len(done.stdout.splitlines()) == lines


def test_a_scatter_vlm_left_out_says_why_after_what_was_found(entries):
    present = [t for t in LEFT_OUT if t in entries]
    assert present, "this transformers has none of the model_types left out"
    for model_type in present:
        line = entries[model_type]
        assert line.status in (SCATTERS, ELSEWHERE), f"{model_type} is {line.status}: its LEFT_OUT entry is stale"
        found, _, why = line.reason.partition("; left out: ")
        assert why == LEFT_OUT[model_type] and found  # what was found comes first, then why it is left out
    assert not {family.model_type for family in families()} & set(LEFT_OUT)
