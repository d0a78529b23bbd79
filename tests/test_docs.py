"""Every Python block of the README, CONTRIBUTING.md and the docs runs, in order, on tiny checkpoints; the README's
"Use it" runs on every family; the README's family table names exactly the supported families.

Each document's blocks share one namespace (a page reads as one script) and run
in a temporary working folder. A block that should not run is not written as
``python`` (shell commands are ``sh``).
"""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import pytest
import torch
from sybil import Sybil
from sybil.parsers.markdown import PythonCodeBlockParser

from envoys import StandardizedTransformer, Unavailable
from envoys.core.bugs import TransformersBug
from envoys.families import ABSENT, families
from envoys.testing import CONTRACTS as ROWS
from envoys.testing import chat_prompt, noise_image

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
VALUES = ROOT / "docs" / "values.md"
DOCUMENTS = [README, ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
SYBIL = Sybil(parsers=[PythonCodeBlockParser()])


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_python_block_runs(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for example in SYBIL.parse(path):
        example.evaluate()


def use_it() -> str:
    """The README's "Use it" block, as source."""
    section = README.read_text().split("## Use it", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)


def how_it_differs(name: str, model) -> tuple[type[BaseException], str] | None:
    """How "Use it" fails on the checkpoint ``name`` and the sentence of docs/values.md (the section the README points
    to) saying so, read off the checkpoint's facts (its row, its family's quirks); None where it runs as written."""
    row = ROWS[name]
    if row.cross_layers:  # no token holds the features: the cross-attention layers read them
        return AssertionError, "Mllama no token holds the features"
    if row.embedding_multiplier != 1:  # the ablation's zeros are scaled: the features are no longer what was written
        return AssertionError, "Granite-Docling and HyperCLOVAX the text model receives the features times"
    if row.positions is not None:
        return AssertionError, "BLIP-2 on OPT adds learned positions"
    if model.family.quirks.forward_bug is not None:
        return TransformersBug, "before transformers 5.25, each trace ends with `tracer.stop()`"
    if row.sizes.num_layers == 0:
        return Unavailable, "Gemma 4 Unified has no tower blocks"
    return None


def test_the_readme_is_read_in_one_sitting() -> None:
    assert len(README.read_text()) < 8000  # characters: what does not fit belongs in docs/


@pytest.mark.parametrize("name", ROWS)
def test_use_it_runs_on_every_family(name: str, tiny_checkpoint, tmp_path: Path) -> None:
    model = StandardizedTransformer(tiny_checkpoint(name), task="image-text-to-text")
    script = tmp_path / "use_it.py"  # nnsight reads a trace's body back from its file
    script.write_text(use_it())
    namespace = {"torch": torch, "model": model, "image": noise_image(64, 48),
                 "prompt": chat_prompt(model.processor, 1, "What is in the image?")}
    differs = how_it_differs(name, model)
    if differs is None:
        result = runpy.run_path(str(script), init_globals=namespace)
        assert not torch.equal(result["logits"], result["ablated"])  # it ran to the end, and the ablation reached
        return
    expected, said = differs
    assert "docs/values.md#where-the-snippet-differs" in README.read_text()
    assert said in " ".join(VALUES.read_text().split())  # the docs say how it differs, and it does
    if expected is TransformersBug and not model.family.quirks.forward_bug.present():  # a release that fixed the bug
        result = runpy.run_path(str(script), init_globals=namespace)
        assert not torch.equal(result["logits"], result["ablated"])
        return
    with pytest.raises(expected):
        runpy.run_path(str(script), init_globals=namespace)


def family_tables() -> tuple[str, str]:
    """The README's table of the families by tower, and its table of those that take videos and audio."""
    section = README.read_text().split("## Supported families", 1)[1].split("\n## ", 1)[0]
    towers, media = section.split("| takes |", 1)
    return towers, media.split("\n\n", 1)[0]


def listed(table: str, row: str = "| ") -> set[str]:
    """The model_types (in backticks) of the table's rows that start with ``row``."""
    return set(re.findall(r"`([\w-]+)`", "".join(line for line in table.splitlines() if line.startswith(row))))


def test_the_family_table_names_every_supported_family() -> None:
    """The table lists every family, those whose model the installed transformers lacks (an older one) included."""
    towers, _ = family_tables()
    assert listed(towers) == {family.model_type for family in families()} | set(ABSENT)
    assert f"{len(listed(towers))} model_types" in towers


def test_the_video_and_audio_table_names_the_families_that_serve_them() -> None:
    _, media = family_tables()
    video = {family.model_type for family in families() if "video" in family.media}
    own = {family.model_type for family in families() if family.media.video_tower is not None}
    absent = set(ABSENT)  # a family whose model the installed transformers lacks cannot be asked what it takes
    assert listed(media, "| videos, on the image tower") - absent == video - own
    assert listed(media, "| videos, on a tower") - absent == own
    assert listed(media, "| audio") - absent == {family.model_type for family in families() if "audio" in family.media}
