"""One way down: the compiler (instrument/) imports neither the rules (rewrites/) nor the user layer (envoys/), the rules
do not import the user layer, and none of the three imports the maintainer's tools (maintain/), which sit above them
all. ``python -m instrument.show`` finds the rules through the entry point the rules package registers
(instrument.targets.GROUP)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def imported(path: Path) -> set[str]:
    """Every module ``path`` imports, anywhere in it (a function's body included), and every module name it hands
    ``importlib.import_module`` as a literal."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module":
            names.update(arg.value for arg in node.args[:1] if isinstance(arg, ast.Constant) and isinstance(arg.value, str))
    return names


@pytest.mark.parametrize(("package", "above"), [
    ("instrument", ("envoys", "rewrites", "maintain")), ("rewrites", ("envoys", "maintain")), ("envoys", ("maintain",)),
])
def test_a_package_imports_nothing_of_the_packages_above_it(package, above):
    reaching_up = {
        str(path.relative_to(ROOT)): sorted(name for name in imported(path) if name.split(".")[0] in above)
        for path in sorted((ROOT / package).rglob("*.py"))
    }
    assert not {path: names for path, names in reaching_up.items() if names}


def test_the_rules_package_registers_what_the_tools_ask_for():
    from envoys.catalog import catalog
    from instrument.targets import provider

    assert provider("catalog") is catalog
    with pytest.raises(LookupError, match=r"no installed package registers 'nothing' in the entry-point group "
                                          r"'instrument.rules': install the project"):
        provider("nothing")


#: Where a project import inside a function is the point: the plugin transformers' test runs load with ``-p`` must
#: import nothing of the project (nnsight mounts ``.save`` on every object) until pytest has configured its plugins.
DEFERRED_ON_PURPOSE = {"maintain/hf_plugin.py"}


def project_imports_in_functions(path: Path) -> list[str]:
    """The project imports ``path`` makes inside a function's body: relative ones, and of the project's packages."""
    found = []
    for function in ast.walk(ast.parse(path.read_text())):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(function):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] in PACKAGES):
                found.append(f"{function.name}: from {'.' * node.level}{node.module or ''}")
            elif isinstance(node, ast.Import):
                found += [f"{function.name}: import {a.name}" for a in node.names if a.name.split(".")[0] in PACKAGES]
    return found


PACKAGES = ("envoys", "instrument", "maintain", "rewrites")


def test_no_project_import_sits_inside_a_function():
    inside = {
        str(path.relative_to(ROOT)): project_imports_in_functions(path)
        for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))
    }
    assert not {path: found for path, found in inside.items() if found and path not in DEFERRED_ON_PURPOSE}


def _name(node: ast.AST) -> str | None:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None


def value_classes(sources: list[str]) -> set[str]:
    """The names of the classes a standard value is: nnsight's ``eproperty``, `EProperty`, and every class in
    ``sources`` deriving from one of them."""
    classes = [node for source in sources for node in ast.walk(ast.parse(source)) if isinstance(node, ast.ClassDef)]
    names = {"eproperty", "EProperty"}
    while True:
        found = {c.name for c in classes if any(_name(base) in names for base in c.bases)} - names
        if not found:
            return names
        names |= found


def built_by_hand(source: str, classes: set[str]) -> list[int]:
    """The lines of ``source`` that build one of ``classes`` (called, or as a decorator's call) or decorate with one."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and _name(node.func) in classes:
            lines.append(node.lineno)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lines += [d.lineno for d in node.decorator_list if _name(d) in classes]
    return lines


def test_a_value_is_declared_with_value_outside_the_core():
    """A standard value is declared with ``value`` (``pinned_value`` where it is pinned to an occurrence); only
    envoys/core builds an `EProperty` or a subclass of it itself."""
    sources = {path: path.read_text() for path in sorted((ROOT / "envoys").rglob("*.py"))}
    classes = value_classes(list(sources.values()))
    assert {"PinnedEProperty", "KernelValue"} <= classes
    assert built_by_hand("@EProperty(key='output')\ndef f(self, x): ...\n\ng = PinnedEProperty(key='input')(f)", classes) == [1, 4]
    by_hand = {
        str(path.relative_to(ROOT)): built_by_hand(source, classes)
        for path, source in sources.items() if path.relative_to(ROOT / "envoys").parts[0] != "core"
    }
    assert not {path: lines for path, lines in by_hand.items() if lines}
