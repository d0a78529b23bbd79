"""Shared pytest fixtures: tiny random checkpoints built once per session."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
import transformers

from instrument.cache import ENVIRONMENT

# The suite builds into a build cache of its own, not the user's (unless one is named).
if ENVIRONMENT not in os.environ:
    os.environ[ENVIRONMENT] = tempfile.mkdtemp(prefix="vlm-instrument-cache-")
    atexit.register(shutil.rmtree, os.environ[ENVIRONMENT], True)

from nnsight import TransformersModel

from envoys import StandardizedTransformer, testing
from envoys.core.bugs import BrokenLoad
from envoys.testing import ABSENT, in_release
from instrument import DriftError, Instrumented, Rule, TargetMissing, compile_rule
from instrument.versions import for_installed

#: the helper modules whose checks and suites report their values as a test module's do
pytest.register_assert_rewrite("family_inputs", "logit_caps", "packed_grids", "pixtral_inputs", "standard_reads", "tiled_grids", "video_edits")


@pytest.fixture(scope="session")
def tiny_checkpoint() -> Callable[..., Path]:
    """A factory: ``tiny_checkpoint("llava-siglip")`` is the directory of that saved checkpoint.

    Each (name, seed) is built once per session (`envoys.testing.tiny_checkpoint`, which the documentation's
    snippets share); later calls return the same path. Treat the directory as read-only.
    """

    def get(name: str, seed: int = 0) -> Path:
        skip_if_absent(name.partition("-")[0])
        return testing.tiny_checkpoint(name, seed)

    return get


@pytest.fixture(scope="module")
def model(request: pytest.FixtureRequest, tiny_checkpoint: Callable[..., Path]) -> StandardizedTransformer:
    """The test module's checkpoint (its ``CHECKPOINT``, a name of `envoys.testing.NAMES`), loaded as a user loads it,
    on the CPU with eager attention, once per module, its weights loaded at once (``dispatch=True``), so that a test
    may read the modules' own weights whichever test runs first; the contract suite builds every checkpoint weightless
    and loads it at its first trace. A module or class may define its own ``model`` instead."""
    name = getattr(request.module, "CHECKPOINT", None)
    if name is None:
        raise pytest.UsageError(f"{request.module.__name__} asks for the model fixture: set CHECKPOINT = '<a tiny "
                                "checkpoint's name>' in it, or define its own model fixture")
    return StandardizedTransformer(tiny_checkpoint(name), task="image-text-to-text", device="cpu", attn_implementation="eager",
                                   dispatch=True)


@pytest.fixture(scope="module")
def stock(model: StandardizedTransformer) -> TransformersModel:
    """The test module's checkpoint (the ``model`` fixture's folder) in a stock nnsight model: ``TransformersModel``,
    eager, weights loaded; nnsight's own forward and labels, which no rule of this library rewrites, to compare the
    standard values with."""
    return TransformersModel(str(model._module.name_or_path), task="image-text-to-text", dispatch=True,
                             attn_implementation="eager")


def absent(model_type: str) -> str | None:
    """Why the installed transformers cannot build ``model_type``'s tiny checkpoint ("target absent"), or None."""
    if not in_release(model_type):
        return f"target absent: transformers {transformers.__version__} has no {model_type} model"
    if model_type in ABSENT:
        return f"no tiny {model_type} checkpoint: {ABSENT[model_type]}"
    return None


def skip_if_absent(model_type: str) -> None:
    """Skip the test when the installed transformers lacks ``model_type``'s model."""
    reason = absent(model_type)
    if reason is not None:
        pytest.skip(reason)


def compiled_or_skip(rule: Rule) -> Instrumented:
    """``rule`` compiled against the installed transformers; the test skips where the release lacks its target
    or the rule's variant for the release says it cannot be served (the snapshot verdicts list both)."""
    try:
        return compile_rule(rule)
    except TargetMissing as error:
        pytest.skip(f"target absent: {error}")
    except DriftError as error:
        if for_installed(rule).unavailable is not None:
            pytest.skip(f"unavailable on this release: {error}")
        raise


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    """A model the installed transformers loads broken (`BrokenLoad`, a known bug of that release, e.g. Llama 4 on
    5.0 to 5.2) cannot be tested there: its tests skip with the bug's explanation, as a model the release lacks."""
    try:
        return (yield)
    except BrokenLoad as bug:
        pytest.skip(str(bug))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    try:
        return (yield)
    except BrokenLoad as bug:
        pytest.skip(str(bug))
