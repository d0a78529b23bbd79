"""Snapshots of every rewritten forward match the installed transformers; what changed is judged per rule; the store
keeps each text once and every release it records checkable."""

from __future__ import annotations

import difflib
import shutil
from pathlib import Path

import pytest
import transformers
from packaging.version import Version

from envoys.catalog import catalog, rule_named
from instrument import Rule, Variant
from instrument.sources import digest
from instrument.store import SOURCES, read_sources
from maintain import snapshot
from maintain.store import MANIFEST, OLDER, Store, Stored, StoreError

INSTALLED = f"transformers-{transformers.__version__}"
LLAVA = "modeling_llava.LlavaModel.forward.py"
LLAVA_STEM = LLAVA.removesuffix(".py")


def _release(minor: int = 0, major: int = 0) -> str:
    """A release named relative to the installed one (``major=-1``: the series before it, ``minor=1`` the next minor)."""
    version = Version(transformers.__version__)
    return f"transformers-{version.major + major}.{version.minor + minor}.0"


def _files(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


def _changed(before: dict[str, str], after: dict[str, str]) -> dict[str, str]:
    """What a commit of ``after`` over ``before`` shows, per path: added, removed or modified."""
    return {
        path: "added" if path not in before else "removed" if path not in after else "modified"
        for path in sorted(before.keys() | after.keys())
        if before.get(path) != after.get(path)
    }


def _lines(before: str, after: str) -> tuple[list[str], list[str]]:
    """The lines a diff of two texts removes and adds."""
    lines = list(difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0))[2:]
    return [line[1:] for line in lines if line[0] == "-"], [line[1:] for line in lines if line[0] == "+"]


@pytest.fixture(scope="module")
def installed_entries(tmp_path_factory) -> dict[str, Stored]:
    """What the installed release gives each forward, as the store holds it."""
    root = tmp_path_factory.mktemp("installed")
    snapshot.update(root)
    return Store.load(root).entries(INSTALLED)


@pytest.fixture
def recorded():
    store = Store.load(snapshot.DEFAULT_ROOT)
    if INSTALLED not in store.releases:
        pytest.skip(f"{INSTALLED} is not recorded: record it with `python -m maintain.releases {transformers.__version__}`")
    return store


def test_every_rewritten_forward_matches_its_snapshot(recorded):
    report = snapshot.check()
    assert report.reference == INSTALLED
    assert report.diffs == (), "\n".join(report.diffs)
    assert {v.verdict for v in report.verdicts} <= {snapshot.UNCHANGED, snapshot.UNAVAILABLE, snapshot.ABSENT}


def test_every_recorded_release_resolves_each_forward_to_one_stored_text():
    root = snapshot.DEFAULT_ROOT
    store = Store.load(root)  # every file the manifest names exists
    assert store.unreferenced(root) == ()
    assert _files(root) == store.files()  # the canonical form: --update of any release rewrites nothing else
    paths = store.paths()
    stored_files = [path for entries in paths.values() for path in entries.values()]
    assert len(stored_files) == len(set(stored_files)) == len(_files(root)) - 2  # one file per distinct text
    first, newest = {}, {}
    for release in store.releases:
        entries = store.entries(release)
        assert entries, release
        for stem, stored in entries.items():
            assert (root / paths[stem][stored]).read_text() == stored.text
            first.setdefault((stem, stored), release)
            newest[stem] = stored
    for (stem, stored), release in first.items():  # the newest text in the head file, the others under their first release
        assert paths[stem][stored] == (stored.name if newest[stem] == stored else f"{OLDER}/{release}/{stored.name}")
    for path, record in read_sources(root).items():  # each digest recorded of a text is that text's
        assert record["text"] == digest((root / path).read_text())


def test_every_recorded_release_is_checkable(monkeypatch):
    """The check run as if each recorded release were installed: it compares with that release's entries."""
    root = snapshot.DEFAULT_ROOT
    store = Store.load(root)
    paths = store.paths()
    now = snapshot.current(catalog())  # what check() enumerates
    monkeypatch.setattr(snapshot, "current", lambda rules: now)
    for release in store.releases:
        monkeypatch.setattr(snapshot, "release_name", lambda rules, release=release: release)
        report = snapshot.check(root)
        recorded = store.entries(release)
        assert report.reference == release and len(report.verdicts) == len(now) and report.unreferenced == ()
        for entry, verdict in zip(now, report.verdicts):
            stored = recorded.get(entry.stem)
            same = stored is not None and stored == Stored(entry.file, entry.text or "")
            assert (verdict.diff == "") == (same or (stored is None and entry.text is None)), (release, entry.rule)
            assert verdict.stored == (paths[entry.stem][stored] if stored is not None else "")
            if verdict.diff:
                assert verdict.diff.startswith(f"--- {verdict.stored or entry.file}\n")


def test_a_snapshot_names_no_release_and_no_file_line(tmp_path):
    snapshot.update(tmp_path)
    text = (tmp_path / LLAVA).read_text()
    header = text.split("\n\n", 1)[0]
    assert transformers.__version__ not in text
    assert header.splitlines()[2] == "# transformers/models/llava/modeling_llava.py"
    assert header.splitlines()[3] == "# sites: inputs_embeds_masked_scatter_0"


def test_an_edited_snapshot_is_judged_changed_with_a_diff(tmp_path):
    snapshot.update(tmp_path)
    edited = tmp_path / LLAVA
    edited.write_text(edited.read_text().replace("inputs_embeds_masked_scatter_0", "renamed_site_0"))
    report = snapshot.check(tmp_path)
    changed = [v for v in report.verdicts if v.diff]
    assert [(v.rule, v.verdict, v.stored) for v in changed] == [("llava.image-scatter", snapshot.CHANGED, LLAVA)]
    assert report.diffs == (changed[0].diff,)
    assert changed[0].diff.startswith(f"--- {LLAVA}\n+++ installed/{LLAVA}\n")
    assert "-        inputs_embeds = __vlm_site__(\"renamed_site_0\"" in changed[0].diff
    assert "+        inputs_embeds = __vlm_site__(\"inputs_embeds_masked_scatter_0\"" in changed[0].diff


def test_without_its_entries_a_release_compares_with_the_nearest_either_way(tmp_path, installed_entries):
    farther_older, nearer_newer, farther_newer = _release(major=-1), _release(1), _release(3)
    store = Store()
    for name in (farther_older, nearer_newer, farther_newer):
        store = store.put(name, installed_entries)
    store.write(tmp_path)
    assert snapshot.check(tmp_path).reference == nearer_newer  # newer, but nearest
    Store({farther_older: installed_entries}).write(tmp_path)
    report = snapshot.check(tmp_path)
    assert report.reference == farther_older and report.diffs == ()


def test_with_no_store_at_all_the_command_says_how_to_write_one(tmp_path, capsys):
    assert snapshot.main(["--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no release recorded in" in err and "--update" in err


def test_a_folder_that_is_not_a_store_is_refused_and_left_alone(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine\n")
    with pytest.raises(StoreError, match="holds files but no manifest.toml"):
        snapshot.update(tmp_path)
    assert snapshot.main(["--root", str(tmp_path), "--update"]) == 2
    assert "not a snapshot store" in capsys.readouterr().err
    assert _files(tmp_path) == {"notes.txt": "mine\n"}


def test_a_manifest_naming_a_missing_file_is_refused(tmp_path):
    snapshot.update(tmp_path)
    (tmp_path / LLAVA).unlink()
    with pytest.raises(StoreError, match=f"names {LLAVA}, which is not in"):
        snapshot.check(tmp_path)


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
    written = snapshot.update(tmp_path, (moved, absent))
    assert written.written == (MANIFEST, "modeling_llava.LlavaModel.forward.drift") and written.removed == (LLAVA, SOURCES)
    again = snapshot.check(tmp_path, (moved, absent))
    assert again.diffs == () and again.verdicts[0].verdict == snapshot.MOVED  # recorded for the release: no diff
    assert again.regressions == ("llava.image-scatter",)  # but still a value the release does not serve
    assert snapshot.summary(again).endswith(": 1 site moved, 1 target absent")


def test_a_variant_that_cannot_serve_the_release_is_judged_unavailable(tmp_path):
    llava = rule_named("llava.image-scatter")
    refused = Variant(f"=={transformers.__version__}", unavailable="this release scatters inline; read X instead")
    rule = Rule(llava.name, llava.target, llava.sites, purpose=llava.purpose, variants=(refused,))
    snapshot.update(tmp_path, (rule,))
    assert sorted(_files(tmp_path)) == [MANIFEST, "modeling_llava.LlavaModel.forward.unavailable"]
    report = snapshot.check(tmp_path, (rule,))
    assert [(v.verdict, v.diff) for v in report.verdicts] == [(snapshot.UNAVAILABLE, "")]
    assert "this release scatters inline; read X instead" in report.verdicts[0].detail


def test_update_records_the_installed_release(tmp_path, capsys):
    assert snapshot.main(["--root", str(tmp_path), "--update", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert f"wrote {tmp_path / LLAVA}\n" in out and f"wrote {tmp_path / MANIFEST}\n" in out
    store = Store.load(tmp_path)
    assert store.releases == (INSTALLED,) and store.unreferenced(tmp_path) == ()
    assert sorted(_files(tmp_path)) == sorted([MANIFEST, SOURCES, *(s.name for s in store.entries(INSTALLED).values())])
    rewrites = {s.name for s in store.entries(INSTALLED).values() if s.name.endswith(".py")}
    assert set(read_sources(tmp_path)) == rewrites  # the digests of every rewrite's original and text
    assert snapshot.check(tmp_path).diffs == ()
    assert snapshot.main(["--root", str(tmp_path), "--update", "--quiet"]) == 0
    assert "already records the installed release as it is" in capsys.readouterr().out


def test_a_release_that_changes_one_forward_is_a_diff_of_that_forward(tmp_path, installed_entries):
    """The previous release scattered under another label; recording the installed one rewrites LLaVA's head file,
    keeps the previous text for the previous release, and touches no other forward."""
    previous = _release(major=-1)
    llava = installed_entries[LLAVA_STEM]
    old = Stored(LLAVA, llava.text.replace("inputs_embeds_masked_scatter_0", "renamed_site_0"))
    Store({previous: {**installed_entries, LLAVA_STEM: old}}).write(tmp_path)
    before = _files(tmp_path)
    report = snapshot.check(tmp_path)
    assert report.reference == previous and [(v.rule, v.verdict) for v in report.verdicts if v.diff] == [
        ("llava.image-scatter", snapshot.CHANGED)
    ]

    written = snapshot.update(tmp_path)
    after = _files(tmp_path)
    kept = f"{OLDER}/{previous}/{LLAVA}"
    assert _changed(before, after) == {LLAVA: "modified", MANIFEST: "modified", kept: "added", SOURCES: "added"}
    assert written.written == tuple(sorted((LLAVA, MANIFEST, kept, SOURCES))) and written.removed == ()
    assert kept not in read_sources(tmp_path)  # the previous release's original was never recorded
    assert after[kept] == old.text and after[LLAVA] == llava.text  # the head's diff is the forward's change
    renamed = [line for line in old.text.splitlines() if "renamed_site_0" in line]
    assert len(renamed) == 2  # the header's sites line and the call
    assert _lines(before[LLAVA], after[LLAVA]) == (renamed, [r.replace("renamed_site_0", "inputs_embeds_masked_scatter_0") for r in renamed])
    removed, added = _lines(before[MANIFEST], after[MANIFEST])
    assert removed == [f'"{previous}" = "{LLAVA}"']
    assert added == [f'    "{INSTALLED}",', f'"{previous}" = "{kept}"', f'"{INSTALLED}" = "{LLAVA}"']
    store = Store.load(tmp_path)
    assert store.entries(previous)[LLAVA_STEM] == old and store.entries(INSTALLED) == installed_entries
    assert snapshot.check(tmp_path).diffs == ()


def test_a_release_whose_texts_equal_the_previous_adds_one_manifest_line(tmp_path, installed_entries):
    previous = _release(major=-1)
    Store({previous: installed_entries}).write(tmp_path)
    before = _files(tmp_path)
    assert snapshot.check(tmp_path).reference == previous
    assert snapshot.update(tmp_path).written == (MANIFEST, SOURCES)
    after = _files(tmp_path)
    assert _changed(before, after) == {MANIFEST: "modified", SOURCES: "added"}
    assert _lines(before[MANIFEST], after[MANIFEST]) == ([], [f'    "{INSTALLED}",'])
    assert Store.load(tmp_path).releases == (previous, INSTALLED)


def test_a_release_recorded_before_the_newest_keeps_the_newest_in_the_head(tmp_path, installed_entries):
    later = _release(1)
    llava = installed_entries[LLAVA_STEM]
    newer = Stored(LLAVA, llava.text.replace("inputs_embeds_masked_scatter_0", "renamed_site_0"))
    Store({later: {**installed_entries, LLAVA_STEM: newer}}).write(tmp_path)
    snapshot.update(tmp_path)
    files = _files(tmp_path)
    assert files[LLAVA] == newer.text and files[f"{OLDER}/{INSTALLED}/{LLAVA}"] == llava.text
    assert Store.load(tmp_path).releases == (INSTALLED, later) and snapshot.check(tmp_path).diffs == ()


def test_texts_no_release_resolves_to_are_deleted(tmp_path, installed_entries):
    llava = installed_entries[LLAVA_STEM]
    wrong = Stored(LLAVA, llava.text.replace("inputs_embeds_masked_scatter_0", "renamed_site_0"))
    gone = Stored("modeling_gone.GoneModel.forward.py", "# rule gone\n\ndef forward(self):\n    pass\n")
    Store({INSTALLED: {**installed_entries, LLAVA_STEM: wrong, gone.stem: gone}}).write(tmp_path)
    assert (tmp_path / gone.name).is_file()
    written = snapshot.update(tmp_path)
    assert written.removed == (gone.name,) and LLAVA in written.written
    files = _files(tmp_path)
    files.pop(SOURCES)
    assert files == Store({INSTALLED: installed_entries}).files()  # no trace of either text
    assert set(read_sources(tmp_path)) == {s.name for s in installed_entries.values() if s.name.endswith(".py")}
    assert not (tmp_path / OLDER).exists()


def test_an_entry_no_rule_writes_is_stale_and_fails_the_check(tmp_path, capsys, installed_entries):
    gone = Stored("modeling_gone.GoneModel.forward.py", "def forward(self):\n    pass\n")
    Store({INSTALLED: {**installed_entries, gone.stem: gone}}).write(tmp_path)
    report = snapshot.check(tmp_path)
    assert report.stale == (gone.name,)
    assert report.diffs == (f"stale file {gone.name}\n",)
    assert report.regressions == (gone.name,) and report.counts()["stale"] == 1
    assert snapshot.main(["--root", str(tmp_path), "--quiet"]) == 1
    out = capsys.readouterr().out
    assert f"stale          {gone.name}" in out
    assert out.splitlines()[-1].endswith(", 1 stale")  # the summary counts it beside the verdicts


def test_a_file_no_release_resolves_to_fails_the_check(tmp_path, capsys):
    snapshot.update(tmp_path)
    stray = f"{OLDER}/{_release(major=-1)}/{LLAVA}"
    (tmp_path / stray).parent.mkdir(parents=True)
    (tmp_path / stray).write_text("def forward(self):\n    pass\n")
    report = snapshot.check(tmp_path)
    assert report.unreferenced == (stray,) and len(report.diffs) == 1 and stray in report.diffs[0]
    assert snapshot.main(["--root", str(tmp_path), "--quiet"]) == 1
    assert f"unreferenced   {stray}" in capsys.readouterr().out
    assert snapshot.update(tmp_path).removed == (stray,) and not (tmp_path / OLDER).exists()


def test_a_failed_update_leaves_the_store_as_it_was(tmp_path, monkeypatch):
    snapshot.update(tmp_path)
    before = _files(tmp_path)

    def failing(rules):
        raise RuntimeError("compiling failed")

    monkeypatch.setattr(snapshot, "current", failing)
    with pytest.raises(RuntimeError, match="compiling failed"):
        snapshot.update(tmp_path)
    assert _files(tmp_path) == before


def test_the_manifest_reads_back_as_written(tmp_path, installed_entries):
    """A store of three releases where one forward changes and then disappears: every release resolves as put."""
    first, second, third = _release(major=-2), _release(major=-1), INSTALLED
    llava = installed_entries[LLAVA_STEM]
    old = Stored(LLAVA, llava.text + "# older\n")
    without = {stem: stored for stem, stored in installed_entries.items() if stem != LLAVA_STEM}
    table = {first: {**installed_entries, LLAVA_STEM: old}, second: installed_entries, third: without}
    Store(table).write(tmp_path)
    store = Store.load(tmp_path)
    assert {release: store.entries(release) for release in store.releases} == table
    manifest = (tmp_path / MANIFEST).read_text()
    assert f'[forwards."{LLAVA_STEM}"]\n"{first}" = "{OLDER}/{first}/{LLAVA}"\n"{second}" = "{LLAVA}"\n"{third}" = "absent"\n' in manifest
    shutil.rmtree(tmp_path / OLDER)
    with pytest.raises(StoreError, match="restore it from git"):
        Store.load(tmp_path)
