"""``python -m envoys.demo``: the walkthrough's equalities hold, and the command runs as the README and the docs write it."""

from __future__ import annotations

import subprocess
import sys

from envoys import StandardizedTransformer
from envoys.demo import walkthrough


def test_the_walkthrough_shows_what_the_spec_says(tiny_checkpoint):
    model = StandardizedTransformer(tiny_checkpoint("llava-siglip"), task="image-text-to-text", attn_implementation="eager")
    said: list[str] = []
    facts = walkthrough(model, say=lambda *parts: said.append(" ".join(map(str, parts))))
    assert facts["scatter equality"] is True
    assert facts["ablation changes the logits"] is True
    assert facts["one-sided edit keeps the text rows"] is True
    assert (facts["projector reads the last block"], facts["projector reads tower_output"]) == (True, False)
    assert facts["two images, rows"] == 2
    prompt_length = facts["generation masks"][0][1]
    assert facts["generation masks"] == [(1, prompt_length), (1, 1), (1, 1)]
    assert "layers[0].input[image_token_mask] == image_features: True" in said


def test_the_command_runs():
    done = subprocess.run([sys.executable, "-m", "envoys.demo"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "layers[0].input[image_token_mask] == image_features: True" in done.stdout
    assert "support(): every value available" in done.stdout
