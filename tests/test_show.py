"""``python -m instrument.show``: its exact text, and the command as a person runs it."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import transformers

from envoys import catalog, testing
from instrument.show import main
from instrument.targets import rules_near, select

LLAVA_FILE = Path(transformers.__file__).parent / "models" / "llava" / "modeling_llava.py"
SCATTER_TEXT = "inputs_embeds = inputs_embeds.masked_scatter(special_image_mask, image_features)"


def llava_lines() -> tuple[list[str], int, int]:
    """The file's lines, LlavaModel.forward's first line and its scatter's line (1-based), read off the file."""
    from transformers.models.llava.modeling_llava import LlavaModel

    lines = LLAVA_FILE.read_text().splitlines()
    first = inspect.getsourcelines(LlavaModel.forward)[1]
    scatter = [number for number, line in enumerate(lines, start=1) if line.strip() == SCATTER_TEXT]
    assert len(scatter) == 1 and scatter[0] > first
    return lines, first, scatter[0]


def llava_diff() -> str:
    """The diff the command must print: three lines of context each side of the scatter, from the file."""
    lines, _, scatter = llava_lines()
    context = lambda numbers: [f" {lines[n - 1][4:]}" if lines[n - 1] else " " for n in numbers]  # noqa: E731
    site = SCATTER_TEXT.replace(
        "inputs_embeds.masked_scatter(", '__vlm_site__("inputs_embeds_masked_scatter_0", inputs_embeds.masked_scatter, '
    )
    indent = lines[scatter - 1][4 : len(lines[scatter - 1]) - len(lines[scatter - 1].lstrip())]
    return "".join(
        line + "\n"
        for line in [
            "--- a/transformers/models/llava/modeling_llava.py",
            "+++ b/transformers/models/llava/modeling_llava.py",
            f"@@ -{scatter - 3},7 +{scatter - 3},7 @@",
            *context(range(scatter - 3, scatter)),
            f"-{indent}{SCATTER_TEXT}",
            f"+{indent}{site}",
            *context(range(scatter + 1, scatter + 4)),
        ]
    )


def run(capsys, *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_diff_is_exact(capsys):
    assert run(capsys, "LlavaModel", "--diff") == (0, llava_diff(), "")


def test_listing_is_the_file_with_line_numbers_and_the_site_marked(capsys):
    file_lines, first, scatter = llava_lines()
    status, out, _ = run(capsys, "LlavaModel")
    assert status == 0
    head, body = out.split("\n\n", 1)
    assert head.splitlines() == [
        "# rule llava.image-scatter: image features scattered into the embeddings",
        "# transformers.models.llava.modeling_llava:LlavaModel.forward",
        f"# transformers/models/llava/modeling_llava.py:{first} (transformers {transformers.__version__})",
        f"# sites: inputs_embeds_masked_scatter_0 (line {scatter})",
    ]
    gutter = " " * len("inputs_embeds_masked_scatter_0 ->")
    for row in body.splitlines():
        number = int(row[len(gutter) : len(gutter) + 6])
        original = file_lines[number - 1][4:]  # the method's source, dedented one level
        if number == scatter:
            wrapped = original.replace(
                "inputs_embeds.masked_scatter(", '__vlm_site__("inputs_embeds_masked_scatter_0", inputs_embeds.masked_scatter, '
            )
            assert row == f"inputs_embeds_masked_scatter_0 -> {number:>5}  {wrapped}"
        else:
            assert row == f"{gutter} {number:>5}  {original}".rstrip()
    assert int(body.splitlines()[0][len(gutter) : len(gutter) + 6]) == first


def test_a_model_type_shows_every_forward_of_the_family(capsys):
    status, out, _ = run(capsys, "qwen3_vl")
    assert status == 0
    assert sorted(line.split(":")[0] for line in out.splitlines() if line.startswith("# rule ")) == sorted([
        "# rule qwen3_vl.image-scatter",
        "# rule qwen3_vl.vision-attention",
        "# rule qwen3_vl.deepstack",
        "# rule qwen3_vl.eager-attention",
        "# rule qwen3_vl.Qwen3VLTextAttention",
    ])
    assert "self__deepstack_process_0 ->" in out and "attention_interface_2 ->" in out


def test_no_target_lists_every_rule(capsys):
    status, out, _ = run(capsys)
    assert status == 0
    assert [line.split()[0] for line in out.splitlines() if not line.startswith(" ")] == [r.name for r in catalog.catalog()]


def test_the_catalogue_builds_no_weights(monkeypatch):
    """The rule list reads each checkpoint's model classes off its model built on the meta device
    (`envoys.testing.build_empty`): no parameter or buffer holds a value, and no checkpoint is built with weights."""
    empty = []
    build_empty = testing.build_empty

    def on_meta(name):
        model = build_empty(name)
        held = [n for n, tensor in (*model.named_parameters(), *model.named_buffers()) if not tensor.is_meta]
        assert not held, f"{name}: {held[:5]} hold values"
        empty.append(name)
        return model

    def with_weights(name, seed=0):
        raise AssertionError(f"the catalogue built {name} with its weights")

    monkeypatch.setattr(testing, "build_empty", on_meta)
    monkeypatch.setattr(testing, "build", with_weights)
    assert catalog.catalog.__wrapped__() == catalog.catalog()  # afresh, as the command does in its own process
    assert sorted(empty) == sorted(testing.NAMES)


def test_the_catalogue_on_the_meta_device_is_the_catalogue_of_the_checkpoints_built(monkeypatch):
    """The same rules, site names and model_types as when every checkpoint is built with its weights."""
    on_meta = catalog.catalog()
    monkeypatch.setattr(catalog, "model_of", lambda name: testing.build(name)[0])
    assert catalog.catalog.__wrapped__() == on_meta


def test_an_unknown_target_says_what_to_type(capsys):
    status, out, err = run(capsys, "NoSuchModel")
    assert (status, out) == (2, "")
    assert "no rewritten forward matches 'NoSuchModel'" in err and "qwen3_vl" in err


def test_an_unknown_target_leads_with_the_nearest_names(capsys):
    for typed, meant in (("Qwen3VLModl", "Qwen3VLModel"), ("qwen3_vl.deepstak", "qwen3_vl.deepstack"),
                         ("qwen3vl", "qwen3_vl")):
        status, _, err = run(capsys, typed)
        first = err.splitlines()[0]
        assert status == 2 and first.startswith(f"no rewritten forward matches {typed!r}; did you mean {meant}"), first


def test_a_class_a_path_or_a_rule_name_finds_the_catalogue_s_rules_from_its_own_module():
    """`rules_near` (the rules of the one modeling module a name points at, no checkpoint built) gives, for every rule
    of the catalogue, by its name and by its class's dotted path, the catalogue's rule: the same target, sites,
    release variants and drills."""
    for rule in catalog.catalog():
        for name in (rule.name, f"{rule.module_name}.{rule.qualname}"):
            near = [found for found in select(name, rules_near(name)) if found.target == rule.target]
            assert near, (rule.name, name)
            assert (near[0].sites, near[0].variants, near[0].serve_as) == (rule.sites, rule.variants, rule.serve_as)
            assert {k: v.target for k, v in near[0].drill.items()} == {k: v.target for k, v in rule.drill.items()}


def test_a_model_type_is_not_a_modeling_module_s_name():
    assert rules_near("qwen3_vl") == () and rules_near("NoSuchModel") == ()


def test_the_command_as_the_readme_writes_it():
    done = subprocess.run(
        [sys.executable, "-m", "instrument.show", "Qwen3VLModel"], capture_output=True, text=True, check=True
    )
    marked = [line for line in done.stdout.splitlines() if line.startswith("inputs_embeds_masked_scatter_0 ->")]
    assert len(marked) == 1 and '__vlm_site__("inputs_embeds_masked_scatter_0"' in marked[0]
    assert done.stderr == ""  # the catalogue's builds of the tiny checkpoints say nothing (transformers' warnings held back)


def test_a_dotted_path_names_the_same_forward(capsys):
    by_class = run(capsys, "LlavaModel")
    for path in ("transformers.models.llava.modeling_llava.LlavaModel",
                 "transformers.models.llava.modeling_llava.LlavaModel.forward",
                 "transformers.models.llava.modeling_llava:LlavaModel.forward"):
        assert run(capsys, path) == by_class


def test_a_reader_that_stops_early_gets_no_traceback():
    """``python -m instrument.show | head``: the listing stops quietly when the pipe closes (`instrument.commands`,
    which every command ends through; show's listing is long enough to still be writing when the pipe closes)."""
    shown = subprocess.Popen([sys.executable, "-m", "instrument.show", "qwen3_vl"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, cwd=Path(__file__).resolve().parent.parent)
    assert shown.stdout.readline().startswith(b"# rule ")
    shown.stdout.close()  # as head does after its lines
    error = shown.stderr.read().decode()
    assert shown.wait(timeout=120) in (0, 1)
    assert "Traceback" not in error and "BrokenPipeError" not in error, error
