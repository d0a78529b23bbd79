"""Write a stand-in tests tree for ``python -m maintain.releases X --hf-tests --hf-tests-source DIR``.

For where no checkout of transformers is at hand. A release's source
distribution ships ``tests/`` with its shared mixins (``tests/test_modeling_common.py``:
``ModelTesterMixin``, about 160 tests a model: save/load, eager/sdpa, gradient
checkpointing, compile, initialisation, ...) but not ``tests/models/``, nor
``tests/generation/`` and ``tests/exporters/``, which ``test_modeling_common``
imports. This copies the source distribution's ``setup.py``, ``pyproject.toml``
and ``tests/`` into OUT and adds:

- stubs of ``GenerationTesterMixin`` and ``ExportTesterMixin`` (so no generation
  or export tests run);
- ``tests/models/<model_type>/test_modeling_<model_type>.py`` for each family with
  tiny checkpoints (`envoys.testing`): a ``unittest`` class per checkpoint, running
  transformers' ``ModelTesterMixin`` with a tester whose config is the tiny
  checkpoint's and whose inputs its processor makes from two prompts with one
  noise image each (one prompt where the processor takes no batch).

It is transformers' own common tests on the project's tiny configs, not
transformers' model tests: those testers, and the tests each family file adds,
are not in the source distribution. Usage::

    python docs/hf_tests_standin.py SDIST_ROOT OUT   # SDIST_ROOT: the unpacked transformers-X.tar.gz
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

TESTER = '''"""The stand-in tester: a tiny checkpoint's config and its processor's inputs (docs/hf_tests_standin.py)."""

import copy
import functools

from transformers import MODEL_MAPPING

from envoys import testing as tiny

from .test_modeling_common import ModelTesterMixin


@functools.cache
def checkpoint(name):
    """The tiny checkpoint's config, model class and inputs: two prompts with one image each, or one."""
    model, processor = tiny.build(name)
    image, prompt = tiny.noise_image(32, 32, seed=0), tiny.chat_prompt(processor, 1, "Describe the image.")
    try:
        inputs = processor(text=[prompt, prompt], images=[[image], [image]], return_tensors="pt")
    except Exception:
        inputs = processor(text=[prompt], images=[image], return_tensors="pt")
    config = copy.deepcopy(model.config)
    config._attn_implementation_internal = None
    return config, type(model), dict(inputs)


class Tester:
    is_training = True

    def __init__(self, parent, name):
        self.parent, self.name = parent, name
        config, _, inputs = checkpoint(name)
        text = config.get_text_config()
        self.batch_size, self.seq_length = inputs["input_ids"].shape
        self.vocab_size, self.hidden_size = text.vocab_size, text.hidden_size
        self.num_hidden_layers, self.num_attention_heads = text.num_hidden_layers, text.num_attention_heads
        self.text_config = text.to_dict()
        vision = getattr(config, "vision_config", None)
        self.vision_config = vision.to_dict() if vision is not None else {}

    def get_config(self):
        return copy.deepcopy(checkpoint(self.name)[0])

    def prepare_config_and_inputs_for_common(self):
        config, _, inputs = checkpoint(self.name)
        return copy.deepcopy(config), {key: value.clone() for key, value in inputs.items()}


def model_classes(name):
    """The family's base model (where transformers maps its config to one) and the checkpoint's class."""
    config, wrapper, _ = checkpoint(name)
    base = MODEL_MAPPING.get(type(config), None)
    return tuple(dict.fromkeys(c for c in (base, wrapper) if c is not None))


class TinyCheckpointTest(ModelTesterMixin):
    checkpoint_name = ""
    _is_composite = True

    def setUp(self):
        self.model_tester = Tester(self, self.checkpoint_name)
'''

FAMILY = '''"""Stand-in for transformers' tests/models/{model_type}/test_modeling_{model_type}.py (docs/hf_tests_standin.py)."""

import unittest

from ...standin_tester import TinyCheckpointTest, model_classes
{classes}'''

CLASS = '''

class {title}Test(TinyCheckpointTest, unittest.TestCase):
    checkpoint_name = "{name}"
    all_model_classes = model_classes("{name}")
'''

STUBS = {
    "generation/test_utils.py": "class GenerationTesterMixin:  # stand-in: tests/generation is not in the sdist\n    pass\n",
    "exporters/test_export.py": "class ExportTesterMixin:  # stand-in: tests/exporters is not in the sdist\n    pass\n",
}


def checkpoints_by_model_type() -> dict[str, list[str]]:
    """The tiny checkpoints' names by the model_type each builds (``llava-siglip`` is ``llava``'s)."""
    from envoys import testing as tiny

    found: dict[str, list[str]] = {}
    for name in tiny.NAMES:
        found.setdefault(name.partition("-")[0], []).append(name)
    return found


def write(sdist: Path, out: Path) -> list[Path]:
    """The stand-in tree at ``out``; the family test modules written."""
    out.mkdir(parents=True, exist_ok=True)
    for name in ("setup.py", "pyproject.toml"):
        shutil.copy(sdist / name, out / name)
    shutil.copytree(sdist / "tests", out / "tests", dirs_exist_ok=True)
    tests = out / "tests"
    for path, text in {**STUBS, "standin_tester.py": TESTER}.items():
        (tests / path).parent.mkdir(parents=True, exist_ok=True)
        (tests / path).write_text(text)
    written = []
    for model_type, names in checkpoints_by_model_type().items():
        folder = tests / "models" / model_type
        folder.mkdir(parents=True, exist_ok=True)
        classes = "".join(CLASS.format(title="".join(p.title() for p in n.replace("-", "_").split("_")), name=n) for n in names)
        (folder / f"test_modeling_{model_type}.py").write_text(FAMILY.format(model_type=model_type, classes=classes))
        written.append(folder / f"test_modeling_{model_type}.py")
    for folder in [tests, *(p for p in tests.rglob("*") if p.is_dir())]:
        (folder / "__init__.py").touch()
    return written


if __name__ == "__main__":
    for path in write(Path(sys.argv[1]), Path(sys.argv[2])):
        print(path)
