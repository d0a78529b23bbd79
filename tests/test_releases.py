"""Rules that know releases: variants by version range, and a release that moved a site.

Every test here runs on the installed transformers: other releases are
simulated (a synthetic forward numbered as an older release numbers it, a
modified copy of a forward installed for one test), never installed.
"""

from __future__ import annotations

import inspect
import textwrap
import warnings
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
import transformers
from nnsight.intervention.source import compile_source
from packaging.version import Version
from synthetic import write_module

from envoys import StandardizedTransformer, Unavailable
from envoys.testing import chat_prompt, noise_image
from instrument import DriftError, Rule, TargetMissing, Variant, compile_rule
from instrument.decorators import peel

IMAGE = [noise_image(32, 32, seed=0)]

#: A forward as releases before 5.1 write it: the kernel assigned twice, then called.
TWICE_ASSIGNED = '''
def kernel(x, scale):
    return x * scale

KERNELS = {"eager": kernel}

def forward(x, implementation="eager"):
    attention_interface = kernel
    if implementation != "eager":
        attention_interface = KERNELS[implementation]
    return attention_interface(x, 2.0)
'''

OLD_NUMBERING = Variant(
    "<5.1",
    sites={"attention_interface": ("attention_interface_2",)},
    serve_as={"attention_interface_2": "attention_interface_1"},
)


def the_rule(target: str, variants: tuple[Variant, ...] = (OLD_NUMBERING,)) -> Rule:
    return Rule("test.kernel", target, {"attention_interface": ("attention_interface_1",)}, variants=variants)


def test_the_first_matching_variant_is_chosen_else_the_rule_itself():
    rule = the_rule("m:f", (Variant("<5.1", sites={"a": ("a_2",)}), Variant("<6", sites={"a": ("a_9",)})))
    assert rule.at("4.57.6").sites == {"a": ("a_2",)} and rule.at("4.57.6").variant == "<5.1"
    assert rule.at("5.0.0").sites == {"a": ("a_2",)}
    assert rule.at(Version("5.1.0")).sites == {"a": ("a_9",)}
    assert rule.at("6.0.0").sites == rule.sites and rule.at("6.0.0").variant == ""
    assert rule.at("5.0.0").variants == ()  # a chosen rule does not choose again


def test_a_variant_serves_a_renumbered_call_under_the_rules_label(tmp_path):
    module = write_module(tmp_path, "twice_assigned", TWICE_ASSIGNED)
    rule = the_rule("twice_assigned:forward")
    assert "attention_interface_2" in compile_source(module.forward).names  # how nnsight numbers the call
    with pytest.raises(DriftError, match=r"expected call sites \['attention_interface_1'\].*found \['attention_interface_2'\]"):
        compile_rule(rule.at("5.1.0"))  # the newest form does not fit this source
    instrumented = compile_rule(rule.at("5.0.0"))
    assert instrumented.site_names == ("attention_interface_1",)
    assert [site.label for site in instrumented.rewritten.sites] == ["attention_interface_2"]
    served = []

    def site(label, fn, *args, **kwargs):
        served.append((label, args))
        return fn(*args, **kwargs)

    x = torch.arange(3.0)
    assert torch.equal(instrumented.build(site)(x), x * 2.0)
    assert [label for label, _ in served] == ["attention_interface_1"]


#: A kernel call drilled into: the release decides which function it reaches (the drill key of a variant).
DRILLED = '''
import torch

def kernel(x):
    return torch.softmax(x, -1)

def old_kernel(x):
    return torch.nn.functional.softmax(x, -1)

def forward(x):
    attention_interface = kernel
    return attention_interface(x)
'''


def test_a_variant_drills_into_the_function_its_release_calls(tmp_path):
    write_module(tmp_path, "drilled", DRILLED)
    new = Rule("test.kernel-new", "drilled:kernel", {"torch.softmax": ("torch_softmax_0",)})
    old = Rule("test.kernel-old", "drilled:old_kernel", {"torch.nn.functional.softmax": ("torch_nn_functional_softmax_0",)})
    rule = Rule(
        "test.drilled", "drilled:forward", {"attention_interface": ("attention_interface_1",)},
        drill={"attention_interface_1": new},
        variants=(Variant("<5.1", drill={"attention_interface_1": old}, note="the kernel calls softmax functionally"),),
    )
    assert rule.at("5.0.0").drill == {"attention_interface_1": old} and rule.at("5.1.0").drill == {"attention_interface_1": new}
    assert rule.at("5.0.0").variant_note == "the kernel calls softmax functionally" and rule.at("5.1.0").variant_note == ""
    drilled = compile_rule(rule.at("5.0.0")).drills["attention_interface_1"]
    assert drilled.rule.target == "drilled:old_kernel" and drilled.site_names == ("torch_nn_functional_softmax_0",)
    assert compile_rule(rule.at("5.1.0")).drills["attention_interface_1"].site_names == ("torch_softmax_0",)


def test_show_and_the_snapshot_name_the_variant_and_what_differs(tmp_path):
    from instrument.listing import header, snapshot_header

    write_module(tmp_path, "twice_assigned_shown", TWICE_ASSIGNED)
    variant = Variant(OLD_NUMBERING.versions, OLD_NUMBERING.sites, OLD_NUMBERING.serve_as, note="assigned twice")
    instrumented = compile_rule(the_rule("twice_assigned_shown:forward", (variant,)).at("5.0.0"))
    for text in (header(instrumented), snapshot_header(instrumented)):
        assert "# variant: transformers<5.1: assigned twice\n" in text
        assert "# sites: attention_interface_1 (numbered attention_interface_2)" in text
    assert "(line " in header(instrumented) and "(line " not in snapshot_header(instrumented)


def test_a_variant_that_cannot_serve_a_release_refuses_with_its_reason():
    target = "transformers.models.llava.modeling_llava:LlavaModel.forward"
    rule = Rule(
        "test.unavailable", target, {"inputs_embeds.masked_scatter": ("inputs_embeds_masked_scatter_0",)},
        variants=(Variant(f"=={transformers.__version__}", unavailable="this release permutes inline; read X instead"),),
    )
    with pytest.raises(DriftError, match="this release permutes inline; read X instead"):
        compile_rule(rule)
    assert compile_rule(rule.at("0.1")).site_names == ("inputs_embeds_masked_scatter_0",)


def test_a_target_the_release_lacks_is_target_missing():
    rule = Rule("test.absent", "transformers.models.no_such_model.modeling_no_such_model:NoSuchModel.forward", {"f": ("f_0",)})
    with pytest.raises(TargetMissing, match="the target is missing"):
        compile_rule(rule)


def test_check_model_inputs_is_peeled_like_the_known_decorators():
    generic = pytest.importorskip("transformers.utils.generic")
    if not hasattr(generic, "check_model_inputs"):
        pytest.skip(f"transformers {transformers.__version__} has no check_model_inputs")

    def forward(self, x):
        return x

    innermost, layers = peel(generic.check_model_inputs(forward))
    assert innermost is forward and len(layers) == 1


# -- a release that moved a site: a modified copy of LlavaModel.forward -----------------------------


def moved_scatter(tmp_path):
    """LlavaModel.forward as a release might write it: the same values, the scatter no longer a masked_scatter call."""
    from transformers.models.llava import modeling_llava

    source = textwrap.dedent(inspect.getsource(modeling_llava.LlavaModel.forward))
    original = "inputs_embeds.masked_scatter(special_image_mask, image_features)"
    assert source.count(original) == 1
    source = source.replace(original, "inputs_embeds.clone().masked_scatter_(special_image_mask, image_features)")
    source = source.replace("@auto_docstring\n", "")  # it documents classes; the other decorators are kept
    path = tmp_path / "moved_llava_forward.py"
    path.write_text(source)
    namespace = dict(vars(modeling_llava))
    exec(compile(source, str(path), "exec"), namespace)
    return namespace["forward"]


def test_a_release_that_moved_a_site_loads_and_says_why(tiny_checkpoint, monkeypatch, tmp_path):
    from transformers.models.llava.modeling_llava import LlavaModel

    path = tiny_checkpoint("llava-siglip")
    reference = StandardizedTransformer(path, task="image-text-to-text", attn_implementation="eager")
    prompt = chat_prompt(reference.processor, 1, "hi")
    with reference.trace(prompt, images=IMAGE):
        expected_tower = reference.vision.tower_output.save()
        expected_logits = reference.logits.save()

    monkeypatch.setattr(LlavaModel, "forward", moved_scatter(tmp_path))  # restored after the test
    model = StandardizedTransformer(path, task="image-text-to-text", attn_implementation="eager")
    reason = model.vision.support()["image_features"]
    assert reason.startswith("rule 'llava.image-scatter'") and "moved_llava_forward.py" in reason
    assert "expected call sites ['inputs_embeds_masked_scatter_0'] of `inputs_embeds.masked_scatter`, found none" in reason
    assert model.support()["vision.image_features"] == reason
    with pytest.raises(Unavailable, match="vision.image_features is unavailable: rule 'llava.image-scatter'"):
        model.vision.image_features
    assert model.vision.support()["tower_output"] is None and model.support()["self_attn.attention_queries"] is None
    with model.trace(prompt, images=IMAGE):
        tower = model.vision.tower_output.save()
        queries = model.layers[0].self_attn.attention_queries.save()
        logits = model.logits.save()
    assert torch.equal(tower, expected_tower) and torch.equal(logits, expected_logits)
    assert queries.shape[1] == model.config.text_config.num_attention_heads


# -- the command that checks other releases (its pure parts; a real run installs a release) ----------


def test_the_release_table_has_a_row_per_release():
    from maintain.releases import Outcome, table

    rows = table([
        Outcome("5.0.0", "transformers-5.10.4", {"unchanged": 40, "unavailable": 1}, [], "written", "700 passed"),
        Outcome("9.9.9", error="installing transformers 9.9.9 failed (see log)"),
    ]).splitlines()
    assert rows[0].split() == ["release", "compared", "with", "verdicts", "stored", "tests"]
    assert rows[1].split("  ")[0] == "5.0.0" and "40 unchanged, 1 unavailable" in rows[1] and rows[1].endswith("700 passed")
    assert "installing transformers 9.9.9 failed" in rows[2] and rows[2].endswith("not run")


def test_a_bad_release_name_is_refused_before_anything_is_made(capsys, tmp_path, monkeypatch):
    from maintain import releases

    monkeypatch.setattr(releases.tempfile, "mkdtemp", lambda **_: pytest.fail("a folder was made"))
    with pytest.raises(SystemExit) as refused:
        releases.main(["5.0.0", "five-point-oh"])
    assert refused.value.code == 2
    assert "'five-point-oh' is not a release number; give transformers versions such as 5.0.0" in capsys.readouterr().err


def test_torch_is_pinned_as_ci_pins_it():
    from maintain.releases import REPOSITORY, TORCH

    ci = (REPOSITORY / ".ci" / "run").read_text()
    assert all("==" in requirement for requirement in TORCH)
    assert f"pip install --quiet {' '.join(TORCH)}\n" in ci


def test_the_other_requirements_are_pyprojects_own():
    from packaging.requirements import Requirement

    from maintain.releases import REPOSITORY, requirements

    wanted = requirements()
    names = {Requirement(r).name for r in wanted}
    assert {"nnsight", "libcst", "num2words", "accelerate", "matplotlib", "pytest"} <= names
    assert not names & {"torch", "torchvision", "transformers"}  # pinned by the command itself
    pyproject = (REPOSITORY / "pyproject.toml").read_text()
    assert all(f'"{requirement}"' in pyproject for requirement in wanted)  # the ranges as written there, not copies
    assert len(names) == len(wanted)


def test_checking_a_release_compares_with_the_nearest_recorded_and_records_it(tmp_path):
    """The command's check and write, run on the installed release with this interpreter, into a scratch store."""
    import sys

    from maintain import snapshot
    from maintain.releases import check_release
    from maintain.store import MANIFEST, SOURCES, Store

    installed = f"transformers-{transformers.__version__}"
    recorded = Store.load(snapshot.DEFAULT_ROOT)
    if installed not in recorded.releases:
        pytest.skip(f"the snapshot store does not record transformers {transformers.__version__}")
    entries = recorded.entries(installed)
    root = tmp_path / "snapshots"
    Store({"transformers-0.0.1": entries}).write(root)  # the only, and so the nearest, release
    before = {p.name: p.read_text() for p in root.iterdir()}
    work = tmp_path / "work"
    work.mkdir()
    outcome = check_release(Path(sys.executable), transformers.__version__, work, work / "log.txt", False, root)
    assert outcome.error == "" and outcome.moved == [] and outcome.reference == "transformers-0.0.1"
    assert set(outcome.counts) <= {"unchanged", "unavailable", "target absent"} and outcome.counts["unchanged"] > 0
    assert outcome.stored == "written"
    store = Store.load(root)
    assert store.releases == ("transformers-0.0.1", installed) and store.entries(installed) == entries
    after = {p.name: p.read_text() for p in root.iterdir()}
    # the same texts: a manifest line, and the digests of the originals they were rewritten from
    assert {name for name in after if after[name] != before.get(name)} == {MANIFEST, SOURCES}
    again = check_release(Path(sys.executable), transformers.__version__, work, work / "log.txt", False, root)
    assert not again.failed and again.stored == "kept" and again.reference == installed


def test_a_failing_test_run_fails_the_release(tmp_path):
    import sys

    from maintain.releases import Outcome, run_tests

    (tmp_path / "test_fails.py").write_text("def test_fails():\n    assert False\n\ndef test_passes():\n    pass\n")
    summary, passed = run_tests(Path(sys.executable), tmp_path / "log.txt", [str(tmp_path), "-p", "no:cacheprovider"], 120)
    assert summary.startswith("1 failed, 1 passed") and passed is False
    assert Outcome("5.0.0", tests=summary, tests_passed=passed).failed
    assert not Outcome("5.0.0", tests="2 passed").failed


def test_a_release_that_lost_a_rule_is_not_recorded_and_the_lost_rule_is_named(tmp_path):
    """A reference entry that no rule writes on the installed release (an attention class the finder stopped
    recognising) is a regression: the command says which and leaves the store as it was."""
    import sys

    from maintain import snapshot
    from maintain.releases import check_release, table
    from maintain.store import Store, Stored

    installed = f"transformers-{transformers.__version__}"
    recorded = Store.load(snapshot.DEFAULT_ROOT)
    if installed not in recorded.releases:
        pytest.skip(f"the snapshot store does not record transformers {transformers.__version__}")
    gone = Stored("modeling_gone.GoneAttention.forward.py", "def forward(self):\n    pass\n")
    root = tmp_path / "snapshots"
    Store({"transformers-0.0.1": {**recorded.entries(installed), gone.stem: gone}}).write(root)
    before = {p.name: p.read_text() for p in root.iterdir()}
    work = tmp_path / "work"
    work.mkdir()
    outcome = check_release(Path(sys.executable), transformers.__version__, work, work / "log.txt", True, root)
    assert outcome.failed and outcome.stored == "refused" and outcome.regressed == [gone.name]
    assert outcome.error == (
        f"not recorded: against transformers-0.0.1, 1 rule regressed ({gone.name}); fix the rules "
        "(docs/releases.md), then run this again"
    )
    assert outcome.counts["stale"] == 1 and "1 stale: not recorded" in table([outcome])
    assert {p.name: p.read_text() for p in root.iterdir()} == before


# -- a release the snapshot store does not record: served only where it reads as the nearest recorded one ----------


@pytest.fixture
def older_store(tmp_path, monkeypatch):
    """A store whose only release is one before the installed one, recording the installed release's texts except
    LlavaModel.forward's (one line differs): to the library, the installed release is a newer one it has not seen."""
    from maintain import snapshot
    from maintain.store import Store, Stored

    installed = f"transformers-{transformers.__version__}"
    recorded = Store.load(snapshot.DEFAULT_ROOT)
    if installed not in recorded.releases:
        pytest.skip(f"the snapshot store does not record transformers {transformers.__version__}")
    entries = recorded.entries(installed)
    host = entries["modeling_llava.LlavaModel.forward"]
    entries[host.stem] = Stored(host.name, host.text.replace("inputs_embeds = ", "inputs_embeds  = ", 1))
    assert entries[host.stem] != host
    older = Version(transformers.__version__)
    previous = f"transformers-{older.major}.{older.minor - 1}.99" if older.minor else "transformers-0.0.1"
    Store({previous: entries}).write(tmp_path)
    with judged_against(tmp_path, monkeypatch):
        yield previous


@contextmanager
def judged_against(root: Path, monkeypatch):
    """Builds in the block judge the installed release against the snapshot store at ``root``, read afresh."""
    from instrument import checked

    monkeypatch.setattr(checked, "STORE", root)
    checked.forget()
    try:
        yield
    finally:
        checked.forget()


def test_a_release_the_store_does_not_record_serves_only_the_forwards_that_read_as_the_nearest_recorded_one(
    older_store, tiny_checkpoint
):
    from instrument.checked import UncheckedRelease

    path = tiny_checkpoint("llava-siglip")
    with pytest.warns(UncheckedRelease) as said:
        model = StandardizedTransformer(path, task="image-text-to-text", attn_implementation="eager")
    installed, previous = f"transformers {transformers.__version__}", older_store.replace("-", " ")
    assert len(said) == 1 and str(said[0].message).startswith(
        f"{installed} is not a release this library was checked against (the newest checked is {previous}): values "
        f"at rewritten forwards are served where they read as on {previous}, and the others say why they are "
        f"unavailable; python -m maintain.releases {transformers.__version__} checks it"
    )
    reason = model.support()["vision.image_features"]
    assert reason == (
        f"{installed} is not a release this library was checked against, and LlavaModel.forward "
        f"(transformers.models.llava.modeling_llava) is not served there: it reads differently from {previous}'s "
        f"(modeling_llava.LlavaModel.forward.py in the snapshot store). Check the release (python -m "
        f"maintain.releases {transformers.__version__}, docs/releases.md), or install a checked one"
    )
    with pytest.raises(Unavailable, match="vision.image_features is unavailable: transformers"):
        model.vision.image_features
    # the attention forwards read as the recorded release's: their values are served
    assert model.vision.support()["self_attn.attention_probabilities"] is None
    prompt = chat_prompt(model.processor, 1, "hi")
    with model.trace(prompt, images=IMAGE):
        probabilities = model.vision.layers[0].self_attn.attention_probabilities.save()
    assert torch.allclose(probabilities.sum(-1), torch.ones(()))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UncheckedRelease)  # said once per process
        StandardizedTransformer(path, task="image-text-to-text", attn_implementation="eager")


def test_without_a_snapshot_store_no_rewritten_forward_is_served_and_the_warning_says_how_to_install(
    tmp_path, monkeypatch, tiny_checkpoint
):
    from instrument.checked import UncheckedRelease

    with judged_against(tmp_path, monkeypatch):  # an install without the checkout's snapshots/
        with pytest.warns(UncheckedRelease, match=r"no release of transformers is recorded in a snapshot store at .*"
                                                  r"install the library from its checkout \(pip install -e \.\)"):
            model = StandardizedTransformer(tiny_checkpoint("llava-siglip"), task="image-text-to-text")
        assert f"no release is recorded at {tmp_path}" in model.support()["vision.image_features"]
        assert "no release is recorded" in str(model.vision.support()["self_attn.attention_queries"])  # per block
        assert model.vision.support()["tower_output"] is None  # a module's output: no rewritten forward behind it
