"""The check of a release by transformers' own model tests (``python -m maintain.releases X --hf-tests``).

Its own logic, without the network: the outcomes the recorder writes and how
they fold, the comparison of two runs, the test modules found in a source
tree, the pins read from a setup.py, the plugins' loading, and one family's
two runs end to end on a tiny fake tests tree (two pytest processes, a tiny
LLaVA built from a config), where a test that passes only without the
rewrites must be reported as a regression by its id.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
from family_inputs import family_of

from envoys import testing as tiny
from envoys.testing import NAMES
from maintain import hf_compare, hf_record, hf_source, hf_tests
from maintain.hf_plugin import rules_for
from maintain.releases import Outcome, table

FILE = "tests/models/llava/test_modeling_llava.py"
#: pytest reports unittest's subtests one by one from 9.0 on.
SUBTESTS = int(pytest.__version__.split(".")[0]) >= 9


def report(nodeid: str, when: str, outcome: str, **extra) -> SimpleNamespace:
    return SimpleNamespace(nodeid=nodeid, when=when, outcome=outcome, **extra)


def write_outcomes(path: Path, entries: list[tuple[str, str, str]]) -> Path:
    path.write_text("".join(json.dumps({"id": i, "when": w, "outcome": o}) + "\n" for i, w, o in entries))
    return path


# -- the recorder -------------------------------------------------------------------------------------


def test_a_subtest_is_recorded_under_its_test_and_its_parameters():
    assert hf_record.id_of(report(f"{FILE}::T::test_a", "call", "passed")) == f"{FILE}::T::test_a"
    sub = report(f"{FILE}::T::test_a", "call", "failed", context=SimpleNamespace(msg="sdpa", kwargs={"dtype": "fp32"}))
    assert hf_record.id_of(sub) == f"{FILE}::T::test_a [sdpa] (dtype=fp32)"
    bare = report(f"{FILE}::T::test_a", "call", "passed", context=SimpleNamespace(msg=None, kwargs={}))
    assert hf_record.id_of(bare) == f"{FILE}::T::test_a (<subtest>)"


def test_an_expected_failure_is_told_from_a_skip():
    assert hf_record.phase_outcome(report("t", "call", "skipped", wasxfail="known")) == "xfailed"
    assert hf_record.phase_outcome(report("t", "call", "passed", wasxfail="known")) == "xpassed"
    assert hf_record.phase_outcome(report("t", "call", "skipped")) == "skipped"


def test_the_recorder_appends_a_line_per_phase(tmp_path, monkeypatch):
    path = tmp_path / "outcomes.jsonl"
    monkeypatch.setenv(hf_record.OUTCOMES, str(path))
    hf_record.pytest_runtest_logreport(report("m.py::test_a", "setup", "passed"))
    hf_record.pytest_runtest_logreport(report("m.py::test_a", "call", "failed"))
    hf_record.pytest_collectreport(SimpleNamespace(nodeid="broken.py", failed=True))
    hf_record.pytest_collectreport(SimpleNamespace(nodeid="fine.py", failed=False))
    assert hf_record.read_outcomes(path) == {"m.py::test_a": "failed", "broken.py": "error"}


def test_phases_fold_into_one_outcome_per_test(tmp_path):
    path = write_outcomes(tmp_path / "o.jsonl", [
        ("a", "setup", "passed"), ("a", "call", "passed"), ("a", "teardown", "passed"),
        ("b", "setup", "failed"), ("b", "teardown", "passed"),
        ("c", "setup", "passed"), ("c", "call", "passed"), ("c", "teardown", "failed"),
        ("d", "setup", "skipped"), ("d", "teardown", "passed"),
        ("e [m]", "call", "failed"), ("e [m]", "call", "passed"),  # a subtest repeated under one message
    ])
    assert hf_record.read_outcomes(path) == {"a": "passed", "b": "error", "c": "error", "d": "skipped", "e [m]": "failed"}
    assert hf_record.read_outcomes(tmp_path / "none.jsonl") == {}


# -- the comparison -----------------------------------------------------------------------------------


def test_a_regression_is_a_test_that_passed_without_and_not_with():
    without = {"a": "passed", "b": "passed", "c": "failed", "d": "skipped", "e": "passed", "g": "passed"}
    with_ = {"a": "passed", "b": "failed", "c": "passed", "d": "failed", "f": "passed", "g": "error"}
    changes = hf_compare.compare(without, with_)
    assert [(c.test, c.without, c.with_) for c in changes] == [
        ("b", "passed", "failed"), ("c", "failed", "passed"), ("d", "skipped", "failed"),
        ("e", "passed", "absent"), ("f", "absent", "passed"), ("g", "passed", "error"),
    ]
    assert [c.test for c in changes if c.regression] == ["b", "e", "g"]
    assert hf_compare.compare(without, dict(without)) == []


def test_the_report_names_each_regression_and_change_by_id():
    ok = hf_compare.FamilyResult("qwen3_vl", without={"x": "passed", "y": "skipped"}, with_={"x": "passed", "y": "skipped"},
                                 installs=[{"model": "G", "rules": ["qwen3_vl.image-scatter"]}])
    bad = hf_compare.FamilyResult("llava", without={"t1": "passed", "t2": "failed"}, with_={"t1": "failed", "t2": "passed"},
                                  installs=[{"model": "L", "rules": ["r"]}, {"model": "M", "error": "DriftError: moved"}])
    absent = hf_compare.FamilyResult("qwen2_5_vl", error="no tests/models/qwen2_5_vl/test_modeling_*.py in src")
    text = hf_compare.report([ok, bad, absent])
    rows = text.splitlines()
    assert rows[0].split()[:3] == ["family", "test", "ids"]
    assert rows[1].split() == ["qwen3_vl", "2", "1", "passed,", "1", "skipped", "1", "passed,", "1", "skipped", "0", "0", "1", "model", "classes"]
    assert rows[2].split()[:6] == ["llava", "2", "1", "passed,", "1", "failed"] and rows[2].split()[-4:] == ["1", "1", "model", "classes"]
    assert "no tests/models/qwen2_5_vl/test_modeling_*.py in src" in rows[3]
    assert "  llava  t1: passed -> failed\n" in text.split("other changes")[0]
    assert "  llava  t2: failed -> passed\n" in text.split("other changes")[1]
    assert "  llava  M: DriftError: moved\n" in text
    assert not ok.failed and bad.failed and absent.failed
    improved = hf_compare.FamilyResult("x", without={"a": "failed"}, with_={"a": "passed"}, installs=[{"model": "X", "rules": []}])
    assert not improved.failed and improved.changes and not improved.regressions


def test_the_release_table_gains_a_column_where_transformers_tests_ran():
    plain = table([Outcome("5.0.0", "transformers-5.0.0", {"unchanged": 3}, [], "kept", "9 passed")])
    assert "transformers' tests" not in plain
    ran = table([Outcome("5.24.0", "transformers-5.24.0", {"unchanged": 3}, [], "kept", "", hf_tests="14 families, 1 regressions",
                         hf_tests_passed=False)])
    assert ran.splitlines()[0].endswith("transformers' tests") and ran.splitlines()[1].endswith("14 families, 1 regressions")
    assert Outcome("5.24.0", hf_tests="x", hf_tests_passed=False).failed and not Outcome("5.24.0", hf_tests="x").failed


# -- the source tree ----------------------------------------------------------------------------------


def test_a_familys_test_module_is_found_by_its_model_type_or_its_folder(tmp_path):
    for path in (FILE, "tests/models/llava/test_processing_llava.py", "tests/models/qwen3_vl/test_modeling_qwen3_vl_moe.py",
                 "tests/models/qwen3_vl/test_modeling_qwen3_vl_text.py", "tests/models/blip_2/test_modeling_blip_2.py"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("")
    assert hf_source.model_test_files(tmp_path, "llava") == (Path(FILE),)
    assert hf_source.model_test_files(tmp_path, "qwen3_vl") == (
        Path("tests/models/qwen3_vl/test_modeling_qwen3_vl_moe.py"), Path("tests/models/qwen3_vl/test_modeling_qwen3_vl_text.py"))
    assert hf_source.model_test_files(tmp_path, "qwen2_5_vl") == ()
    assert hf_source.model_test_files(tmp_path, "blip-2") == (Path("tests/models/blip_2/test_modeling_blip_2.py"),)
    assert hf_source.missing(tmp_path) == ""


def test_a_source_without_model_tests_is_refused_with_the_reason(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_modeling_common.py").write_text("")  # what the source distributions ship
    why = hf_source.missing(tmp_path)
    assert "has no tests/models/" in why and "--hf-tests-source" in why


def test_the_packages_are_pinned_as_the_releases_setup_pins_them(tmp_path):
    (tmp_path / "setup.py").write_text(textwrap.dedent('''
        _deps = [
            "Pillow>=10.0.1,<=15.0",
            "parameterized>=0.9",  # older versions break collection
            "pytest>=7.2.0,<9.0.0",
            "pytest-timeout",
        ]
        deps = {b: a for a, b in _deps}
    '''))
    assert hf_source.pinned_dependencies(tmp_path / "setup.py")["parameterized"] == "parameterized>=0.9"
    assert hf_source.packages_for_tests(tmp_path) == ("parameterized>=0.9", "pytest-timeout")
    assert hf_source.packages_for_tests(tmp_path / "elsewhere") == hf_source.PACKAGES  # no setup.py: by name


# -- the runs -----------------------------------------------------------------------------------------


def test_only_the_run_with_the_rewrites_loads_their_plugin(tmp_path, monkeypatch):
    without = hf_tests.pytest_command(Path("py"), (Path(FILE),), False, ("-k", "x"))
    with_ = hf_tests.pytest_command(Path("py"), (Path(FILE),), True, ("-k", "x"))
    assert "vlm_hf_plugin" not in without and with_[with_.index("vlm_hf_plugin") - 1] == "-p"
    assert "vlm_hf_record" in without and "vlm_hf_record" in with_ and without[-2:] == ["-k", "x"]
    monkeypatch.setenv("RUN_SLOW", "1")
    env = hf_tests.run_environment(tmp_path, tmp_path / "o", tmp_path / "i", slow=False)
    assert "RUN_SLOW" not in env and env["HF_HUB_OFFLINE"] == "1" and env["PYTHONPATH"].split(":")[0] == str(tmp_path)
    assert hf_tests.run_environment(tmp_path, tmp_path / "o", tmp_path / "i", slow=True)["RUN_SLOW"] == "1"


def test_the_plugins_load_without_the_library(tmp_path):
    """Loaded before pytest's own plugins, they must not import nnsight (nor torch): see maintain.hf_plugin."""
    folder = hf_tests.write_plugins(tmp_path / "plugins")
    probe = (f"import sys; sys.path.insert(0, {str(folder)!r}); import vlm_hf_record, vlm_hf_plugin; "
             "print(sorted(m for m in ('nnsight', 'torch', 'transformers', 'instrument', 'envoys', 'maintain') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("in_root", [name for name in NAMES if family_of(name).scatter.in_root])
def test_the_plugin_finds_the_scatter_where_the_family_puts_it(in_root):
    """The host's scatter on the wrapper, on the base model built alone, and on every root that scatters itself (Llama
    4's, whose config transformers maps to the wrapper as its base model, among them); a tower alone gets its class
    rules."""
    def names(model):
        return {rule.name for rule in rules_for(model)}

    try:
        llava, _ = tiny.build("llava-siglip")
        root, _ = tiny.build(in_root)
    except ValueError as absent:
        pytest.skip(str(absent))
    assert "llava.image-scatter" in names(llava) and "llava.image-scatter" in names(llava.model)
    tower = names(llava.model.vision_tower)
    assert "siglip.SiglipAttention" in tower and not any(name.endswith(".image-scatter") for name in tower)
    assert any(name.endswith(".image-scatter") for name in names(root))
    (native,) = [name for name, standard in family_of(in_root).rename.items() if standard == "vision"]
    assert not any(name.endswith(".image-scatter") for name in names(root.get_submodule(native)))


FAKE_TESTS = '''
import unittest

from transformers import LlavaConfig, LlavaForConditionalGeneration, LlavaModel

from instrument import installed


def config():
    vision = dict(model_type="siglip_vision_model", hidden_size=32, intermediate_size=37, num_hidden_layers=1,
                  num_attention_heads=2, image_size=32, patch_size=8)
    text = dict(model_type="qwen2", hidden_size=32, intermediate_size=37, num_hidden_layers=1, num_attention_heads=2,
                num_key_value_heads=1, vocab_size=100)
    return LlavaConfig(vision_config=vision, text_config=text, image_token_index=99)


class FakeLlavaTest(unittest.TestCase):
    def test_builds(self):
        LlavaForConditionalGeneration(config())

    def test_the_host_runs_the_class_forward(self):  # true without the rewrites only
        self.assertEqual(installed(LlavaModel(config())), {})

    def test_parts(self):
        for part in ("a", "b"):
            with self.subTest(part=part):
                self.assertEqual(part, "a")
'''


def test_one_familys_two_runs_report_a_regression_by_its_id(tmp_path, monkeypatch):
    """The two runs of a fake llava test module: the host gets its scatter only in the run with the rewrites."""
    source, work = tmp_path / "source", tmp_path / "work"
    (source / FILE).parent.mkdir(parents=True)
    (source / FILE).write_text(FAKE_TESTS)
    work.mkdir()
    plugins = hf_tests.write_plugins(work / "plugins")
    command = hf_tests.pytest_command  # without --timeout: pytest-timeout, which the real runs install, may be absent here
    monkeypatch.setattr(hf_tests, "pytest_command", lambda *a: [arg for arg in command(*a) if not arg.startswith("--timeout")])
    result = hf_tests.run_family(Path(sys.executable), source, "llava", work, plugins, hf_tests.Options())
    test = f"{FILE}::FakeLlavaTest::"
    assert result.error == "" and result.notes == [], (result, (work / "llava.with.log").read_text()[-3000:])
    assert {t: o for t, o in result.without.items() if "(" not in t} == {
        f"{test}test_builds": "passed", f"{test}test_the_host_runs_the_class_forward": "passed",
        f"{test}test_parts": "passed" if SUBTESTS else "failed"}
    if SUBTESTS:  # pytest 9 reports each subtest, and the test itself as passed
        assert result.without[f"{test}test_parts (part='a')"] == "passed" and result.without[f"{test}test_parts (part='b')"] == "failed"
    assert [(c.test, c.without, c.with_) for c in result.regressions] == [
        (f"{test}test_the_host_runs_the_class_forward", "passed", "failed")]
    assert result.changes == result.regressions and result.failed  # the failing subtest fails both ways
    rules = {entry["model"].rpartition(".")[2]: entry.get("rules") for entry in result.installs}
    assert "llava.image-scatter" in rules["LlavaModel"] and "llava.image-scatter" in rules["LlavaForConditionalGeneration"]
    assert rules["SiglipVisionModel"] == ["siglip.SiglipAttention"]  # a part, instrumented at its own post_init
    assert "FakeLlavaTest::test_the_host_runs_the_class_forward: passed -> failed" in hf_compare.report([result])


def test_a_family_not_served_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(hf_tests, "served_model_types", lambda python: ("llava", "qwen3_vl"))
    monkeypatch.setattr(hf_tests, "run_logged", lambda *a, **k: SimpleNamespace(returncode=0))  # the packages' install
    (tmp_path / "tests" / "models").mkdir(parents=True)
    options = hf_tests.Options(families=("llava", "nonesuch"), source=tmp_path)
    check = hf_tests.check(Path(sys.executable), "5.24.0", tmp_path / "work", tmp_path / "log", options)
    assert check.failed and check.error == "not served on transformers 5.24.0: nonesuch (served: llava, qwen3_vl)"
