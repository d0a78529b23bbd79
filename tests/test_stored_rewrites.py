"""A first build takes each rewrite from the snapshot store, without libcst, where the store records the installed
forward's very source; anything the store cannot vouch for is rewritten with libcst, as if it held nothing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import transformers
from conftest import compiled_or_skip

from envoys.catalog import catalog, rule_named
from instrument import compile_rule, compiler, rewrite, stored
from instrument.sources import digest
from instrument.store import SOURCES, StoreError, forward_stem, read_sources
from instrument.stored import read_rewrite, stored_rewrite
from maintain.store import Store, Stored

REPOSITORY = Path(__file__).resolve().parent.parent
INSTALLED = f"transformers-{transformers.__version__}"


@pytest.fixture(scope="module")
def recorded_release():
    if INSTALLED not in stored.recorded(stored.STORE).releases:
        pytest.skip(f"{INSTALLED} is not recorded: record it with `python -m maintain.releases {transformers.__version__}`")


def stem_of(rule) -> str:
    return forward_stem(rule.module_name, rule.qualname)


@pytest.mark.parametrize("rule", catalog(), ids=lambda rule: rule.name)
def test_the_store_gives_every_rule_the_rewrite_libcst_makes(rule, recorded_release):
    instrumented = compiled_or_skip(rule)
    from_store = stored_rewrite(stem_of(rule), instrumented.original_source)
    assert from_store is not None, f"the store records no rewrite of {rule.qualname}: python -m maintain.snapshot --update"
    chosen = instrumented.rule  # the variant for the installed release
    assert from_store == rewrite(instrumented.original_source, set(chosen.sites), chosen.serve_as)


def test_a_first_build_in_a_fresh_process_imports_no_libcst_and_takes_its_time_from_the_store(tmp_path, recorded_release):
    code = """
import json, sys
from instrument import compile_rule
from instrument.targets import select
rules = [rule for family in ("llava", "qwen3_vl") for rule in select(family)]
built = [compile_rule(rule) for rule in rules]
print(json.dumps({"rules": len(built), "libcst": sorted(m for m in sys.modules if m.partition(".")[0] == "libcst")}))
"""
    environment = {**os.environ, "VLM_INSTRUMENT_CACHE": str(tmp_path / "empty cache")}
    done = subprocess.run([sys.executable, "-c", code], cwd=REPOSITORY, env=environment, capture_output=True, text=True,
                          check=True)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["rules"] >= 10
    assert report["libcst"] == []


@pytest.fixture
def copied_store(tmp_path, monkeypatch):
    """A copy of the repository's store that the compiler reads from, and a clean build: nothing compiled in this
    process or on disk."""
    root = tmp_path / "snapshots"
    shutil.copytree(stored.STORE, root)
    monkeypatch.setattr(stored, "STORE", root)
    monkeypatch.setenv("VLM_INSTRUMENT_CACHE", "off")
    monkeypatch.setattr(compiler, "_CACHE", {})
    stored.forget()
    yield root
    stored.forget()


def rewrites_made(monkeypatch) -> list[str]:
    """The rules the compiler rewrites with libcst from now on, by name."""
    made = []
    original = compiler._rewrite

    def counted(rule, source, code):
        made.append(rule.name)
        return original(rule, source, code)

    monkeypatch.setattr(compiler, "_rewrite", counted)
    return made


RULE = "llava.image-scatter"


def stored_path(root: Path, rule) -> Path:
    manifest = stored.recorded(root)
    return root / manifest.path(INSTALLED, stem_of(rule))


def test_a_rule_the_store_records_is_not_rewritten(copied_store, monkeypatch, recorded_release):
    made = rewrites_made(monkeypatch)
    compile_rule(rule_named(RULE))
    assert made == []


def test_a_stored_text_edited_since_it_was_recorded_is_not_used(copied_store, monkeypatch, recorded_release):
    rule = rule_named(RULE)
    path = stored_path(copied_store, rule)
    path.write_text(path.read_text().replace("masked_scatter_0\", ", "masked_scatter_0\",  "))
    made = rewrites_made(monkeypatch)
    built = compile_rule(rule)
    assert made == [RULE]
    assert "__vlm_site__(\"inputs_embeds_masked_scatter_0\", inputs_embeds.masked_scatter," in built.rewritten.source


def test_a_forward_whose_source_the_store_does_not_record_is_rewritten(copied_store, monkeypatch, recorded_release):
    rule = rule_named(RULE)
    records = copied_store / SOURCES
    path = stored_path(copied_store, rule).relative_to(copied_store).as_posix()
    recorded_digest = read_sources(copied_store)[path]["original"]
    records.write_text(records.read_text().replace(recorded_digest, "0" * 64))
    stored.forget()
    made = rewrites_made(monkeypatch)
    compile_rule(rule)
    assert made == [RULE]


def test_a_rule_that_selects_other_sites_than_the_stored_text_is_rewritten(copied_store, monkeypatch, recorded_release):
    rule = rule_named(RULE)
    renamed = replace(rule, serve_as={"inputs_embeds_masked_scatter_0": "image_scatter"})
    made = rewrites_made(monkeypatch)
    built = compile_rule(renamed)
    assert made == [RULE]
    assert built.site_names == ("image_scatter",)


@pytest.mark.parametrize("text, why", [
    ("def forward(self):\n    return 1\n", "no header of comment lines and a blank line"),
    ("# rule r: p\n\ndef forward(self):\n    return 1\n", "no sites line"),
    ("# sites: a_0\n\ndef forward(self, x):\n    return x.a(1)\n", r"the sites line names \['a_0'\], the source calls \[\]"),
    ("# sites: a_0\n\ndef forward(self, x):\n    return __vlm_site__(a_0, x.a, 1)\n", "a site call of another shape"),
])
def test_a_text_that_does_not_read_as_a_rewrite_is_refused(text, why):
    with pytest.raises(ValueError, match=why):
        read_rewrite(text)


def test_the_store_keeps_each_texts_original_digest_across_releases_and_drops_one_whose_text_changed(tmp_path):
    text = "# rule r: p\n# sites: f_0\n\ndef forward(self, x):\n    return __vlm_site__(\"f_0\", x.f)\n"
    entry = Stored("m.C.forward.py", text)
    Store().put("transformers-5.1.0", {"m.C.forward": entry}, {"m.C.forward": "a" * 64}).write(tmp_path)
    Store.load(tmp_path).put("transformers-5.2.0", {"m.C.forward": entry}).write(tmp_path)
    assert read_sources(tmp_path) == {"m.C.forward.py": {"original": "a" * 64, "text": digest(text)}}
    stored.forget()
    assert stored.rewrites_of(tmp_path, "m.C.forward", "a" * 64) == ["m.C.forward.py"]
    (tmp_path / "m.C.forward.py").write_text(text + "# edited\n")
    Store.load(tmp_path).write(tmp_path)
    assert read_sources(tmp_path) == {} and not (tmp_path / SOURCES).exists()
    stored.forget()


@pytest.mark.parametrize("content, why", [("[1, 2]", "not a table"), ('{"a.py": {"original": 1}}', "not a table"),
                                           ("{", "cannot be read")])
def test_digests_that_do_not_read_as_a_table_are_refused_and_the_build_rewrites(tmp_path, content, why):
    (tmp_path / SOURCES).write_text(content)
    with pytest.raises(StoreError, match=why):
        read_sources(tmp_path)
    assert stored_rewrite("m.C.forward", "def forward(self):\n    pass\n", tmp_path) is None
    stored.forget()
