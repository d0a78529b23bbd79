"""Write a Python module to a temporary folder and import it, so its functions have real source files."""

from __future__ import annotations

import importlib
import sys
import textwrap
from pathlib import Path
from types import ModuleType


def write_module(folder: Path, name: str, source: str) -> ModuleType:
    """Import ``source`` as module ``name`` from a file in ``folder`` (replacing any earlier one)."""
    path = folder / f"{name}.py"
    path.write_text(textwrap.dedent(source))
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    sys.modules.pop(name, None)
    importlib.invalidate_caches()
    return importlib.import_module(name)
