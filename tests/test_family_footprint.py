"""A family is named in few hand-written files: its module, its builder and its own test file, as a rule.

A file names a family when its text holds the family's model_type as a word
(``qwen2_vl``, not ``qwen2_vl_moe`` nor ``Qwen2VL``), transformers' own module
paths left out (``transformers.models.qwen2_vl...``, ``modeling_qwen2_vl``: they
name transformers' code, not this library's family). The hand-written files are
the repository's tracked text files but the rewritten forwards (``snapshots/``)
and the user documentation (``docs/``, the README), whose tables list every
family. Shared code and tests choose families by their facts (a row, a family
record, a builder module), never by name; a family's kin may name it (a kin
family module importing what it reuses, a kin builder, a kin's test).
"""

from __future__ import annotations

import re
import statistics
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: The families the documentation uses as examples, named wherever an example is needed.
EXAMPLES = {"llava", "qwen2_5_vl", "qwen3_vl"}
#: transformers' module paths, which name its code rather than a family of this library
TRANSFORMERS_MODULES = re.compile(r"transformers\.models\.\w+|modeling_\w+")
SUFFIXES = {".py", ".md", ".toml", ".cfg", ".txt"}


def hand_written() -> dict[str, str]:
    """Every tracked text file but the snapshots and the user documentation: path -> text, transformers' module paths
    removed."""
    try:
        listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError) as error:
        pytest.skip(f"not a git checkout, so the tracked files are unknown: {error}")
    kept = [path for path in listed if Path(path).suffix in SUFFIXES and path != "README.md"
            and not path.startswith(("snapshots/", "docs/")) and (ROOT / path).is_file()]
    return {path: TRANSFORMERS_MODULES.sub("", (ROOT / path).read_text(encoding="utf-8")) for path in kept}


def family_model_types() -> list[str]:
    """The model_type of every family module (those of families the installed transformers lacks included)."""
    found = []
    for module in sorted((ROOT / "envoys" / "families").glob("*.py")):
        match = re.search(r'\bFamily\(\s*"([^"]+)"', module.read_text(encoding="utf-8"))
        if match:
            found.append(match.group(1))
    return found


@pytest.fixture(scope="module")
def naming() -> dict[str, list[str]]:
    """model_type -> the hand-written files that name it."""
    texts = hand_written()
    return {model_type: [path for path, text in texts.items()
                         if re.search(rf"(?<!\w){re.escape(model_type)}(?!\w)", text)]
            for model_type in family_model_types()}


def test_every_family_is_found_with_its_module(naming):
    assert len(naming) >= 60 and EXAMPLES <= set(naming)
    for model_type, paths in naming.items():
        assert any(path.startswith("envoys/families/") for path in paths), f"{model_type}: no family module names it"


def test_half_the_families_are_named_in_three_files_at_most(naming):
    counts = {model_type: len(paths) for model_type, paths in naming.items()}
    assert statistics.median(counts.values()) <= 3, sorted(counts.items(), key=lambda item: -item[1])[:10]


def test_no_family_but_the_examples_is_named_in_more_than_five_files(naming):
    crowded = {model_type: paths for model_type, paths in naming.items() if len(paths) > 5 and model_type not in EXAMPLES}
    assert not crowded, f"choose families by their facts, not their names: {crowded}"
