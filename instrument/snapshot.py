"""Snapshots: every rewritten forward as text, one folder per library release.

``snapshots/<library>-<version>/`` holds one file per rule's rewritten forward
(`listing.snapshot`). `check` rebuilds every rule against the installed
library and compares it with that release's folder, or, for a release with no
folder yet, with the newest older one; it returns one unified diff per file
that differs. ``python -m instrument.snapshot`` checks (exit 1 with the diffs);
``--update`` rewrites the installed release's folder.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from .compiler import DriftError, compile_rule, library_version
from .listing import snapshot, snapshot_file_name
from .rule import Rule
from .targets import all_rules

#: The repository's snapshot folder (the tools run from a checkout).
DEFAULT_ROOT = Path(__file__).resolve().parent.parent / "snapshots"


def folder_name(rules: tuple[Rule, ...]) -> str:
    """``transformers-5.24.0``: the library the rules target, at its installed version."""
    library, version = library_version(rules[0].module_name).split(" ", 1)
    return f"{library}-{version}"


def _version(folder: Path) -> Version | None:
    try:
        return Version(folder.name.rpartition("-")[2])
    except InvalidVersion:
        return None


def reference_folder(root: Path, name: str) -> Path | None:
    """The folder for ``name``'s release, else the newest older release's folder, else None."""
    if (root / name).is_dir():
        return root / name
    library, _, version = name.rpartition("-")
    installed = Version(version)
    older = [
        (v, folder)
        for folder in root.glob(f"{library}-*")
        if folder.is_dir() and (v := _version(folder)) is not None and v < installed
    ]
    return max(older)[1] if older else None


def current(rules: tuple[Rule, ...]) -> dict[str, str]:
    """Each rule's snapshot text as the installed library gives it, by file name (drift shown as text)."""
    texts = {}
    for rule in rules:
        try:
            instrumented = compile_rule(rule)
        except DriftError as error:
            texts[f"{rule.name}.drift"] = f"{error}\n"
            continue
        texts[snapshot_file_name(instrumented)] = snapshot(instrumented)
    return texts


@dataclass(frozen=True)
class Report:
    """What `check` compared, and how it differed."""

    reference: Path | None  #: the folder compared against
    diffs: tuple[str, ...]  #: one unified diff per differing file, empty when all match


def check(root: Path = DEFAULT_ROOT, rules: tuple[Rule, ...] | None = None) -> Report:
    """Compare every rule's rewritten forward with the reference snapshot folder."""
    rules = all_rules() if rules is None else rules
    reference = reference_folder(root, folder_name(rules))
    if reference is None:
        return Report(None, (f"no snapshot folder under {root} for {folder_name(rules)} or an older release\n",))
    texts = current(rules)
    names = sorted(set(texts) | {p.name for p in reference.iterdir() if p.is_file()})
    diffs = []
    for name in names:
        stored = (reference / name).read_text() if (reference / name).is_file() else ""
        now = texts.get(name, "")
        if stored != now:
            diffs.append(
                "".join(
                    difflib.unified_diff(
                        stored.splitlines(keepends=True),
                        now.splitlines(keepends=True),
                        fromfile=f"{reference.name}/{name}",
                        tofile=f"installed/{name}",
                    )
                )
            )
    return Report(reference, tuple(diffs))


def update(root: Path = DEFAULT_ROOT, rules: tuple[Rule, ...] | None = None) -> Path:
    """Rewrite the installed release's folder from the installed library; returns the folder."""
    rules = all_rules() if rules is None else rules
    folder = root / folder_name(rules)
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.iterdir():
        stale.unlink()
    for name, text in current(rules).items():
        (folder / name).write_text(text)
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m instrument.snapshot", description=__doc__.splitlines()[0])
    parser.add_argument("--update", action="store_true", help="regenerate the installed release's folder")
    parser.add_argument("--root", type=Path, default=DEFAULT_ROOT, help="the snapshots folder")
    args = parser.parse_args(argv)
    if args.update:
        print(f"wrote {update(args.root)}")
        return 0
    report = check(args.root)
    for text in report.diffs:
        sys.stdout.write(text)
    if report.diffs:
        print(f"{len(report.diffs)} snapshot(s) differ from {report.reference}", file=sys.stderr)
        return 1
    print(f"every rewritten forward matches {report.reference}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
