"""The GPU benchmark runs, at tiny size on CPU: the day a device is lent, benchmarks/gpu.py is known to work.

Its timings mean nothing here (tiny checkpoints, one round, a loaded CPU); what is checked is that every variant ran
on both architectures' tiny checkpoints and that every ratio the table prints is a positive number.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARK = Path(__file__).resolve().parent.parent / "benchmarks" / "gpu.py"
VARIANTS = ("plain forward", "empty trace", "empty trace, StandardizedTransformer", "trace, standard names",
            "trace, nnsight .source", "standard names / trace, nnsight .source (paired)",
            "standard names / empty trace (paired)")


@pytest.fixture(scope="module")
def table() -> str:
    done = subprocess.run([sys.executable, str(BENCHMARK), "--tiny", "--rounds", "1"], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_gpu_benchmark_runs_every_variant_on_both_architectures_at_tiny_size(table):
    rows = [line.split("|")[1:-1] for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    measured = {(cells[0].strip(), cells[1].strip()): cells[-1].strip() for cells in rows[1:]}
    for checkpoint in ("llava-interleave-qwen-0.5b", "qwen2.5-vl-7b"):
        for variant in VARIANTS:
            ratio = measured[(checkpoint, variant)]
            assert re.fullmatch(r"\d+\.\d{3}", ratio) and float(ratio) > 0, (checkpoint, variant, ratio)
    assert "CPU" in table and "float32" in table
    assert table.startswith("<!-- gpu: benchmarks/gpu.py -->") and table.rstrip().endswith("<!-- /gpu -->")


def test_the_real_sizes_are_the_checkpoints_parameter_counts():
    """Built on the meta device (no memory), each architecture has its checkpoint's parameter count: Qwen2.5-VL-7B's
    8,292,166,656 (its safetensors' total), llava-interleave-qwen-0.5b's about 0.9 billion."""
    import torch

    kept = list(sys.path)
    sys.path.insert(0, str(BENCHMARK.parent))
    try:
        import gpu  # it puts the repository and benchmarks/ first on the path, as a script does
    finally:
        sys.path[:] = kept
    counts = {}
    for checkpoint in gpu.CHECKPOINTS:
        with torch.device("meta"):
            model, _ = checkpoint.build()
        counts[checkpoint.name] = sum(parameter.numel() for parameter in model.parameters())
    assert counts["qwen2.5-vl-7b"] == 8_292_166_656
    assert 0.85e9 < counts["llava-interleave-qwen-0.5b"] < 0.95e9


def test_a_site_visits_the_interleaver_only_while_a_worker_waits():
    """benchmarks/sites.py times each path of a site; the visits it counts per call are exact: none outside a trace or
    while no worker waits, and nnsight's three (input, skip, output) while one waits elsewhere."""
    spec = importlib.util.spec_from_file_location("benchmark_sites", BENCHMARK.parent / "sites.py")
    sites = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sites)
    costs = sites.site_costs(calls=10)
    assert {path: visits for path, (_, visits) in costs.items()} == {
        "the plain call": 0,
        "outside a trace": 0,
        "in a trace, no worker waits and no cache observes": 0,
        "in a trace, a worker waits elsewhere": 3,
    }
    assert all(nanoseconds > 0 for nanoseconds, _ in costs.values())
