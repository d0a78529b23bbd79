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
