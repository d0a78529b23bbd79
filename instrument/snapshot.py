"""Snapshots: every rewritten forward as text, one folder per library release, and what changed.

``snapshots/<library>-<version>/`` holds one file per rule: the rewritten
forward (``<module>.<Class>.<method>.py``, `listing.snapshot`), or, where the
release does not have the rule's sites, why (``....drift``), or the reason the
rule's variant gives for not serving the release (``....unavailable``); a rule
whose target the release lacks has no file. The text names no release and no file
line, so two releases whose forwards read the same have the same files; the
version is in the folder's name only.

`check` rebuilds every rule against the installed library and compares it
with the installed release's folder, or, when there is none, with the nearest
release's (older or newer). It gives one `Verdict` per rule: ``unchanged``,
``changed`` (with the unified diff), ``site moved`` (the drift error, and the
diff), ``unavailable`` (the variant's reason), ``target absent`` or ``new``
(no file in the reference). ``python -m
instrument.snapshot`` prints the verdicts and the diffs (exit 1 when anything
differs or the reference holds a file no rule writes); ``--update`` writes the
installed release's folder.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from .commands import run
from .compiler import DriftError, TargetMissing, compile_rule
from .listing import snapshot, snapshot_file_name
from .rule import Rule
from .targets import all_rules
from .versions import for_installed, library_version

#: The repository's snapshot folder (the tools run from a checkout).
DEFAULT_ROOT = Path(__file__).resolve().parent.parent / "snapshots"

UNCHANGED, CHANGED, MOVED, ABSENT, NEW = "unchanged", "changed", "site moved", "target absent", "new"
#: The rule's variant for this release says it cannot be served (`Variant.unavailable`).
UNAVAILABLE = "unavailable"
#: The file of a rule that is not built on a release, by why: its text is the reason.
SUFFIXES = {MOVED: ".drift", UNAVAILABLE: ".unavailable"}


def folder_name(rules: tuple[Rule, ...]) -> str:
    """``transformers-5.24.0``: the library the rules target, at its installed version."""
    library, version = library_version(rules[0].module_name).split(" ", 1)
    return f"{library}-{version}"


def _version(folder: Path) -> Version | None:
    try:
        return Version(folder.name.rpartition("-")[2])
    except InvalidVersion:
        return None


def _nearer(installed: Version, a: Version, b: Version) -> Version:
    """Of two releases, the one nearer ``installed``: the one in its major series, else the nearer minor, micro."""
    def key(v: Version) -> tuple[int, ...]:
        parts = [abs(x - y) for x, y in zip((*v.release, 0, 0)[:3], (*installed.release, 0, 0)[:3])]
        return (parts[0], parts[1], parts[2], v > installed)  # the older wins a tie

    return min(a, b, key=key)


def reference_folder(root: Path, name: str) -> Path | None:
    """The folder for ``name``'s release, else the nearer of the releases just before and just after it, else None."""
    if (root / name).is_dir():
        return root / name
    library, _, version = name.rpartition("-")
    installed = Version(version)
    folders = {
        v: folder
        for folder in root.glob(f"{library}-*")
        if folder.is_dir() and (v := _version(folder)) is not None
    }
    older = max((v for v in folders if v < installed), default=None)
    newer = min((v for v in folders if v > installed), default=None)
    if older is None or newer is None:
        return folders[older or newer] if (older or newer) is not None else None
    return folders[_nearer(installed, older, newer)]


def _portable(message: str, rule: Rule) -> str:
    """A drift error without what names this machine or release: the install directory, the version, file lines."""
    top = sys.modules[rule.module_name.partition(".")[0]]
    base = str(Path(top.__file__).resolve().parent.parent) + "/"
    message = message.replace(base, "").replace(f" ({library_version(rule.module_name)})", "")
    return re.sub(r"(\.py):\d+", r"\1", message)


@dataclass(frozen=True)
class Current:
    """One rule against the installed library: its file's name and text, or why there is none."""

    rule: str
    file: str  #: the snapshot file's name (``.py``; ``.drift`` when the sites moved, ``.unavailable`` when the variant says why not)
    text: str | None  #: the file's text; None when the target is absent
    absent: str | None = None  #: why the target is absent
    kind: str = ""  #: MOVED or UNAVAILABLE when the rule is not built, else empty


def current(rules: tuple[Rule, ...]) -> list[Current]:
    """Each rule's snapshot as the installed library gives it."""
    found = []
    for rule in rules:
        name = snapshot_file_name(rule)
        try:
            instrumented = compile_rule(rule)
        except TargetMissing as error:
            found.append(Current(rule.name, name, None, _portable(str(error), rule)))
        except DriftError as error:
            kind = UNAVAILABLE if for_installed(rule).unavailable is not None else MOVED
            text = _portable(str(error), rule) + "\n"
            found.append(Current(rule.name, name.removesuffix(".py") + SUFFIXES[kind], text, kind=kind))
        else:
            found.append(Current(rule.name, name, snapshot(instrumented)))
    return found


@dataclass(frozen=True)
class Verdict:
    """What happened to one rule's forward since the reference release."""

    rule: str
    verdict: str  #: unchanged, changed, site moved, unavailable, target absent or new
    file: str  #: the file compared (the installed form's name)
    detail: str = ""  #: the drift error (site moved) or why the target is absent
    diff: str = ""  #: the unified diff against the reference, empty when the same


@dataclass(frozen=True)
class Report:
    """What `check` compared, and how it differed."""

    installed: str  #: ``transformers-5.24.0``
    reference: Path | None  #: the folder compared against
    verdicts: tuple[Verdict, ...]  #: one per rule, in rule order
    stale: tuple[str, ...] = ()  #: reference files no rule writes

    @property
    def diffs(self) -> tuple[str, ...]:
        """One unified diff per differing file, empty when everything matches."""
        return tuple(v.diff for v in self.verdicts if v.diff) + tuple(f"stale file {name}\n" for name in self.stale)

    def counts(self) -> dict[str, int]:
        counts = dict.fromkeys((UNCHANGED, CHANGED, MOVED, UNAVAILABLE, ABSENT, NEW), 0)
        for verdict in self.verdicts:
            counts[verdict.verdict] += 1
        return counts


def _diff(stored: str, now: str, reference: Path, stored_name: str, name: str) -> str:
    return "".join(
        difflib.unified_diff(
            stored.splitlines(keepends=True),
            now.splitlines(keepends=True),
            fromfile=f"{reference.name}/{stored_name}",
            tofile=f"installed/{name}",
        )
    )


def _judge(entry: Current, reference: Path) -> Verdict:
    stem = entry.file.rpartition(".")[0]
    stored_name = next((f"{stem}{s}" for s in (".py", *SUFFIXES.values()) if (reference / f"{stem}{s}").is_file()), None)
    stored = (reference / stored_name).read_text() if stored_name else None
    if entry.text is None:
        diff = _diff(stored, "", reference, stored_name, entry.file) if stored is not None else ""
        return Verdict(entry.rule, ABSENT, entry.file, entry.absent or "", diff)
    if stored == entry.text:  # a drift or refusal recorded for the reference keeps its verdict, with no diff
        return Verdict(entry.rule, entry.kind or UNCHANGED, entry.file, entry.text.strip() if entry.kind else "")
    diff = _diff(stored or "", entry.text, reference, stored_name or entry.file, entry.file)
    if entry.kind:
        return Verdict(entry.rule, entry.kind, entry.file, entry.text.strip(), diff)
    return Verdict(entry.rule, CHANGED if stored is not None else NEW, entry.file, "", diff)


def check(root: Path = DEFAULT_ROOT, rules: tuple[Rule, ...] | None = None) -> Report:
    """Compare every rule's rewritten forward with the reference snapshot folder (see the module docstring)."""
    rules = all_rules() if rules is None else rules
    name = folder_name(rules)
    reference = reference_folder(root, name)
    if reference is None:
        return Report(name, None, ())
    entries = current(rules)
    verdicts = tuple(_judge(entry, reference) for entry in entries)
    written = {entry.file.rpartition(".")[0] for entry in entries}
    stale = tuple(
        sorted(p.name for p in reference.iterdir() if p.is_file() and p.name.rpartition(".")[0] not in written)
    )
    return Report(name, reference, verdicts, stale)


def update(root: Path = DEFAULT_ROOT, rules: tuple[Rule, ...] | None = None) -> Path:
    """Rewrite the installed release's folder from the installed library; returns the folder."""
    rules = all_rules() if rules is None else rules
    entries = [entry for entry in current(rules) if entry.text is not None]  # built before the folder is touched
    folder = root / folder_name(rules)
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.iterdir():
        stale.unlink()
    for entry in entries:
        (folder / entry.file).write_text(entry.text)
    return folder


def table(report: Report) -> str:
    """One line per rule: its verdict, its name, and the first line of the drift or absence."""
    width = max((len(v.rule) for v in report.verdicts), default=0)
    lines = [f"{v.verdict:<13}  {v.rule:<{width}}  {v.detail.splitlines()[0] if v.detail else ''}".rstrip() for v in report.verdicts]
    lines += [f"{'stale':<13}  {name}" for name in report.stale]
    return "\n".join(lines) + "\n"


def summary(report: Report) -> str:
    """``transformers-5.0.0 against transformers-5.10.4: 20 unchanged, 8 changed, ...``."""
    counts = ", ".join(f"{n} {verdict}" for verdict, n in report.counts().items() if n)
    return f"{report.installed} against {report.reference.name if report.reference else 'nothing'}: {counts or 'no rules'}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m instrument.snapshot", description=__doc__.splitlines()[0])
    parser.add_argument("--update", action="store_true", help="write the installed release's folder")
    parser.add_argument("--root", type=Path, default=DEFAULT_ROOT, help="the snapshots folder")
    parser.add_argument("--quiet", action="store_true", help="print the verdicts without the diffs")
    parser.add_argument("--json", type=Path, help="also write the verdicts (no diffs) to this file")
    args = parser.parse_args(argv)
    if args.update:
        print(f"wrote {update(args.root)}")
    report = check(args.root)
    if report.reference is None:
        print(
            f"no snapshot folder under {args.root} to compare {report.installed} with; "
            "write one with `python -m instrument.snapshot --update`",
            file=sys.stderr,
        )
        return 2
    if args.json is not None:
        rows = [{k: v for k, v in asdict(verdict).items() if k != "diff"} for verdict in report.verdicts]
        payload = {"installed": report.installed, "reference": report.reference.name, "counts": report.counts(), "rules": rows}
        args.json.write_text(json.dumps(payload, indent=1) + "\n")
    sys.stdout.write(table(report))
    if not args.quiet:
        for text in report.diffs:
            sys.stdout.write(text)
    print(summary(report))
    return 1 if report.diffs else 0


if __name__ == "__main__":
    run(main)
