"""Shared pytest fixtures: tiny random checkpoints built once per session."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from instrument.cache import ENVIRONMENT

# The suite builds into a build cache of its own, not the user's (unless one is named).
if ENVIRONMENT not in os.environ:
    os.environ[ENVIRONMENT] = tempfile.mkdtemp(prefix="vlm-instrument-cache-")
    atexit.register(shutil.rmtree, os.environ[ENVIRONMENT], True)

from envoys.tiny import build_checkpoint


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """A factory: ``tiny_checkpoint("llava-siglip")`` is the directory of that saved checkpoint.

    Each (name, seed) is built once per session into its own temporary
    directory; later calls return the same path. Treat the directory as
    read-only.
    """
    built: dict[tuple[str, int], Path] = {}

    def get(name: str, seed: int = 0) -> Path:
        key = (name, seed)
        if key not in built:
            built[key] = build_checkpoint(name, tmp_path_factory.mktemp(f"{name}-seed{seed}"), seed=seed)
        return built[key]

    return get
