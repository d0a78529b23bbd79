"""pytest plugin: the library's rewritten forwards installed on every model transformers' own tests build.

A test harness for transformers' own model tests (`maintain.hf_tests`),
loaded into that pytest process alone. It wraps
``transformers.PreTrainedModel.post_init`` for the length of that process:
the one place anything of this project patches a class, and only in that
child process, so that each model the tests build, however they build it
(``Model(config)``, ``from_pretrained``, a copy's ``__init__``), runs the
rewritten forwards the library would give it. The library itself installs
per instance and never patches a class.

It is loaded as a file of its own (`maintain.hf_tests` copies it: ``-p
vlm_hf_plugin``) and imports the project only once pytest is configured:
nnsight, which `instrument` imports, mounts ``.save`` on every object, and
anyio's pytest plugin, which pytest loads after the ``-p`` ones, cannot define
its classes once that is done.

After each model's ``post_init`` the rules for it are installed with
`instrument.install.install_all` (all or nothing): the rules the library
would give it (`envoys.rules.rules_to_install`): a served family's model its
host's scatter and the rules for the classes it holds, any other model the
rules for its classes.

Composite models build their parts first: each part's ``post_init`` runs
before the whole's, so a tower gets its rules when it is built, and the whole's
install finds them there (installing a rule already on a module does nothing)
and adds the host's scatter. A model the rules cannot go on (`DriftError`,
`InstallError`) is not skipped: the error is recorded and raised from
``post_init``, so the test that built it fails, and the comparison names it.

Each model class's installed rules, or its error, is appended as a line of
JSON to the file named by `INSTALLS`, once per class and outcome.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

#: The environment variable naming the file the installs are appended to.
INSTALLS = "VLM_HF_TESTS_INSTALLS"

_original_post_init = None
_seen: set[str] = set()


def rules_for(model: Any) -> tuple:
    """The rules to install on ``model``: the library's answer for any model (`envoys.rules.rules_to_install`)."""
    from envoys.rules import rules_to_install

    return rules_to_install(model)


def note(entry: dict[str, Any]) -> None:
    """Append one install (or install error) to the file `INSTALLS` names, once per distinct entry."""
    line = json.dumps(entry, sort_keys=True)
    if line in _seen or INSTALLS not in os.environ:
        return
    _seen.add(line)
    with Path(os.environ[INSTALLS]).open("a") as out:
        out.write(line + "\n")


def install_rules(model: Any) -> None:
    """Install the rules for ``model`` on it; record the rules it then holds (its parts' included), or the error (and raise it)."""
    from instrument import install_all, installed

    name = f"{type(model).__module__}.{type(model).__qualname__}"
    try:
        install_all(model, rules_for(model))
    except Exception as error:
        note({"model": name, "error": f"{type(error).__name__}: {error}"})
        raise
    note({"model": name, "rules": sorted({rule for module in model.modules() for rule in installed(module)})})


def pytest_configure(config: Any) -> None:
    """Wrap ``PreTrainedModel.post_init`` for this process."""
    global _original_post_init
    from transformers import PreTrainedModel

    original = _original_post_init = PreTrainedModel.post_init

    def post_init(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        install_rules(self)
        return result

    post_init.__wrapped__ = original
    PreTrainedModel.post_init = post_init


def pytest_unconfigure(config: Any) -> None:
    """Put ``post_init`` back."""
    global _original_post_init
    if _original_post_init is not None:
        from transformers import PreTrainedModel

        PreTrainedModel.post_init = _original_post_init
        _original_post_init = None
