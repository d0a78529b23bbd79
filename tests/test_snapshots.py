"""Snapshots of every rewritten forward match the installed transformers; an edit shows up as a diff."""

from __future__ import annotations

import shutil

import transformers

from instrument import snapshot


def test_every_rewritten_forward_matches_its_snapshot():
    report = snapshot.check()
    assert report.reference.name == f"transformers-{transformers.__version__}"
    assert report.diffs == (), "\n".join(report.diffs)


def test_an_edited_snapshot_fails_with_a_diff(tmp_path):
    folder = tmp_path / f"transformers-{transformers.__version__}"
    shutil.copytree(snapshot.DEFAULT_ROOT / folder.name, folder)
    edited = folder / "modeling_llava.LlavaModel.forward.py"
    edited.write_text(edited.read_text().replace("inputs_embeds_masked_scatter_0", "renamed_site_0"))
    report = snapshot.check(tmp_path)
    assert len(report.diffs) == 1
    diff = report.diffs[0]
    assert diff.startswith(f"--- {folder.name}/modeling_llava.LlavaModel.forward.py\n+++ installed/")
    assert "-        inputs_embeds = __vlm_site__(\"renamed_site_0\"" in diff
    assert "+        inputs_embeds = __vlm_site__(\"inputs_embeds_masked_scatter_0\"" in diff


def test_a_release_without_a_folder_compares_with_the_newest_older_one(tmp_path):
    current = f"transformers-{transformers.__version__}"
    shutil.copytree(snapshot.DEFAULT_ROOT / current, tmp_path / "transformers-5.0.0")
    shutil.copytree(snapshot.DEFAULT_ROOT / current, tmp_path / "transformers-5.10.0")
    (tmp_path / "transformers-5.10.0" / "modeling_llava.LlavaModel.forward.py").write_text("older\n")
    report = snapshot.check(tmp_path)
    assert report.reference == tmp_path / "transformers-5.10.0"  # 5.10 is newer than 5.0, not 5.9
    assert len(report.diffs) == 1 and "-older" in report.diffs[0]


def test_update_writes_the_installed_release_folder(tmp_path):
    folder = snapshot.update(tmp_path)
    assert folder.name == f"transformers-{transformers.__version__}"
    assert snapshot.check(tmp_path).diffs == ()
