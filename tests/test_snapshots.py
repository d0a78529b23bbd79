"""Snapshots of every rewritten forward match the installed transformers; what changed is judged per rule."""

from __future__ import annotations

import shutil

import pytest
import transformers
from packaging.version import Version

from envoys.rules import rule_named
from instrument import Rule, Variant, snapshot

INSTALLED = f"transformers-{transformers.__version__}"
LLAVA = "modeling_llava.LlavaModel.forward.py"


@pytest.fixture
def installed_folder():
    folder = snapshot.DEFAULT_ROOT / INSTALLED
    if not folder.is_dir():
        pytest.skip(f"no snapshot folder for {INSTALLED}: write it with `python -m instrument.releases {transformers.__version__}`")
    return folder


def test_every_rewritten_forward_matches_its_snapshot(installed_folder):
    report = snapshot.check()
    assert report.reference == installed_folder
    assert report.diffs == (), "\n".join(report.diffs)
    assert {v.verdict for v in report.verdicts} <= {snapshot.UNCHANGED, snapshot.UNAVAILABLE, snapshot.ABSENT}


def test_a_snapshot_names_no_release_and_no_file_line(tmp_path):
    text = (snapshot.update(tmp_path) / LLAVA).read_text()
    header = text.split("\n\n", 1)[0]
    assert transformers.__version__ not in text
    assert header.splitlines()[2] == "# transformers/models/llava/modeling_llava.py"
    assert header.splitlines()[3] == "# sites: inputs_embeds_masked_scatter_0"


def test_an_edited_snapshot_is_judged_changed_with_a_diff(tmp_path, installed_folder):
    folder = tmp_path / INSTALLED
    shutil.copytree(installed_folder, folder)
    edited = folder / LLAVA
    edited.write_text(edited.read_text().replace("inputs_embeds_masked_scatter_0", "renamed_site_0"))
    report = snapshot.check(tmp_path)
    changed = [v for v in report.verdicts if v.diff]
    assert [(v.rule, v.verdict) for v in changed] == [("llava.image-scatter", snapshot.CHANGED)]
    assert report.diffs == (changed[0].diff,)
    assert changed[0].diff.startswith(f"--- {folder.name}/{LLAVA}\n+++ installed/{LLAVA}\n")
    assert "-        inputs_embeds = __vlm_site__(\"renamed_site_0\"" in changed[0].diff
    assert "+        inputs_embeds = __vlm_site__(\"inputs_embeds_masked_scatter_0\"" in changed[0].diff


def _near(version: Version, minor: int) -> str:
    return f"transformers-{version.major}.{version.minor + minor}.0"


def test_without_its_folder_a_release_compares_with_the_nearest_either_way(tmp_path):
    version = Version(transformers.__version__)
    farther_older = f"transformers-{version.major - 1}.0.0"
    for name in (farther_older, _near(version, 1), _near(version, 3)):
        snapshot.update(tmp_path)
        (tmp_path / INSTALLED).rename(tmp_path / name)
    assert snapshot.check(tmp_path).reference == tmp_path / _near(version, 1)  # newer, but nearest
    shutil.rmtree(tmp_path / _near(version, 1))
    shutil.rmtree(tmp_path / _near(version, 3))
    report = snapshot.check(tmp_path)
    assert report.reference == tmp_path / farther_older and report.diffs == ()


def test_with_no_folder_at_all_the_command_says_how_to_write_one(tmp_path, capsys):
    assert snapshot.main(["--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no snapshot folder under" in err and "--update" in err


def test_a_moved_site_and_an_absent_target_have_their_verdicts(tmp_path):
    llava = rule_named("llava.image-scatter")
    moved = Rule(llava.name, llava.target, {"inputs_embeds.masked_scatter": ("inputs_embeds_masked_scatter_7",)}, purpose=llava.purpose)
    absent = Rule("gone.rule", "transformers.models.no_such_model.modeling_no_such_model:Gone.forward", {"f": ("f_0",)})
    snapshot.update(tmp_path, (llava,))
    report = snapshot.check(tmp_path, (moved, absent))
    assert [(v.rule, v.verdict) for v in report.verdicts] == [
        ("llava.image-scatter", snapshot.MOVED), ("gone.rule", snapshot.ABSENT)
    ]
    moved_verdict, absent_verdict = report.verdicts
    assert "expected call sites ['inputs_embeds_masked_scatter_7']" in moved_verdict.detail
    assert transformers.__version__ not in moved_verdict.detail and "site-packages" not in moved_verdict.detail
    assert moved_verdict.file == "modeling_llava.LlavaModel.forward.drift" and moved_verdict.diff
    assert "the target is missing" in absent_verdict.detail and absent_verdict.diff == ""
    assert snapshot.update(tmp_path, (moved, absent)).joinpath("modeling_llava.LlavaModel.forward.drift").is_file()
    again = snapshot.check(tmp_path, (moved, absent))
    assert again.diffs == () and again.verdicts[0].verdict == snapshot.MOVED  # recorded for the release: no diff


def test_a_variant_that_cannot_serve_the_release_is_judged_unavailable(tmp_path):
    llava = rule_named("llava.image-scatter")
    refused = Variant(f"=={transformers.__version__}", unavailable="this release scatters inline; read X instead")
    rule = Rule(llava.name, llava.target, llava.sites, purpose=llava.purpose, variants=(refused,))
    folder = snapshot.update(tmp_path, (rule,))
    assert [p.name for p in folder.iterdir()] == ["modeling_llava.LlavaModel.forward.unavailable"]
    report = snapshot.check(tmp_path, (rule,))
    assert [(v.verdict, v.diff) for v in report.verdicts] == [(snapshot.UNAVAILABLE, "")]
    assert "this release scatters inline; read X instead" in report.verdicts[0].detail


def test_update_writes_the_installed_release_folder(tmp_path):
    folder = snapshot.update(tmp_path)
    assert folder.name == INSTALLED
    assert snapshot.check(tmp_path).diffs == ()


def test_a_failed_update_leaves_the_folder_as_it_was(tmp_path, monkeypatch):
    folder = snapshot.update(tmp_path)
    before = {p.name: p.read_text() for p in folder.iterdir()}

    def failing(rules):
        raise RuntimeError("compiling failed")

    monkeypatch.setattr(snapshot, "current", failing)
    with pytest.raises(RuntimeError, match="compiling failed"):
        snapshot.update(tmp_path)
    assert {p.name: p.read_text() for p in folder.iterdir()} == before


def test_a_file_no_rule_writes_is_stale_and_fails_the_check(tmp_path, capsys):
    folder = snapshot.update(tmp_path)
    (folder / "modeling_gone.GoneModel.forward.py").write_text("def forward(self):\n    pass\n")
    report = snapshot.check(tmp_path)
    assert report.stale == ("modeling_gone.GoneModel.forward.py",)
    assert report.diffs == ("stale file modeling_gone.GoneModel.forward.py\n",)
    assert snapshot.main(["--root", str(tmp_path), "--quiet"]) == 1
    assert "stale          modeling_gone.GoneModel.forward.py" in capsys.readouterr().out
