"""Snapshots: every rewritten forward as text, checked against what each library release gave, and what changed.

Each rule's *entry* for a release is one file's name and text: the rewritten
forward (``<module>.<Class>.<method>.py``, `listing.snapshot`), or, where the
release does not have the rule's sites, why (``....drift``), or the reason the
rule's variant gives for not serving the release (``....unavailable``); a rule
whose target the release lacks has none. The text names no release and no file
line, so releases whose forwards read the same have the same entries. The
entries are kept in ``snapshots/`` once per distinct text (`maintain.store`:
a head file per forward with the newest text, the earlier ones under
``older/<first release with it>/``, and ``manifest.toml`` saying what every
release recorded resolves to).

`check` rebuilds every rule against the installed library and compares it
with the installed release's entries, or, when it is not recorded, with the
nearest recorded release's (older or newer). It gives one `Verdict` per rule:
``unchanged``, ``changed`` (with the unified diff), ``site moved`` (the drift
error, and the diff), ``unavailable`` (the variant's reason), ``target
absent`` or ``new`` (no entry in the reference). ``python -m
maintain.snapshot`` prints the verdicts, the diffs and a summary counting
every outcome, stale and unreferenced entries included (exit 1 when anything
differs, a site moved, the reference has an entry no rule writes, or the store
holds a file no release resolves to); ``--update`` records the installed release in the
store: its entries into the manifest, a changed forward's head file rewritten,
texts no release resolves to any more removed.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from envoys.catalog import catalog
from instrument.commands import run
from instrument.compiler import DriftError, TargetMissing, compile_rule
from instrument.listing import snapshot, snapshot_file_name
from instrument.rule import Rule
from instrument.sources import digest
from instrument.versions import for_installed, library_version

from .store import MANIFEST, REPOSITORY_STORE, Store, Stored, StoreError, Written

#: The repository's snapshot store (the tools run from a checkout).
DEFAULT_ROOT = REPOSITORY_STORE

UNCHANGED, CHANGED, MOVED, ABSENT, NEW = "unchanged", "changed", "site moved", "target absent", "new"
#: A reference entry no rule writes (the rule vanished); a store file no release resolves to.
STALE, UNREFERENCED = "stale", "unreferenced"
#: The rule's variant for this release says it cannot be served (`Variant.unavailable`).
UNAVAILABLE = "unavailable"
#: The file of a rule that is not built on a release, by why: its text is the reason.
SUFFIXES = {MOVED: ".drift", UNAVAILABLE: ".unavailable"}


def release_name(rules: tuple[Rule, ...]) -> str:
    """``transformers-5.24.0``: the library the rules target, at its installed version (as the store names it)."""
    library, version = library_version(rules[0].module_name).split(" ", 1)
    return f"{library}-{version}"


def _portable(message: str, rule: Rule) -> str:
    """A drift error without what names this machine or release: the install directory, the version, file lines."""
    top = sys.modules[rule.module_name.partition(".")[0]]
    base = str(Path(top.__file__).resolve().parent.parent) + "/"
    message = message.replace(base, "").replace(f" ({library_version(rule.module_name)})", "")
    return re.sub(r"(\.py):\d+", r"\1", message)


@dataclass(frozen=True)
class Current:
    """One rule against the installed library: its entry's file name and text, or why there is none."""

    rule: str
    file: str  #: the entry's file name (``.py``; ``.drift`` when the sites moved, ``.unavailable`` when the variant says why not)
    text: str | None  #: the entry's text; None when the target is absent
    absent: str | None = None  #: why the target is absent
    kind: str = ""  #: MOVED or UNAVAILABLE when the rule is not built, else empty
    original: str | None = None  #: the digest of the original source rewritten (`instrument.sources.digest`), if built

    @property
    def stem(self) -> str:
        return self.file.rpartition(".")[0]


def current(rules: tuple[Rule, ...]) -> list[Current]:
    """Each rule's entry as the installed library gives it."""
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
            found.append(Current(rule.name, name, snapshot(instrumented), original=digest(instrumented.original_source)))
    return found


@dataclass(frozen=True)
class Verdict:
    """What happened to one rule's forward since the reference release."""

    rule: str
    verdict: str  #: unchanged, changed, site moved, unavailable, target absent or new
    file: str  #: the entry compared (the installed form's file name)
    detail: str = ""  #: the drift error (site moved) or why the target is absent
    diff: str = ""  #: the unified diff against the reference, empty when the same
    stored: str = ""  #: the stored file the reference resolves the forward to, relative to the store; empty when none


@dataclass(frozen=True)
class Report:
    """What `check` compared, and how it differed."""

    installed: str  #: ``transformers-5.24.0``
    reference: str | None  #: the recorded release compared against (``transformers-5.24.0``), None when none is
    verdicts: tuple[Verdict, ...]  #: one per rule, in rule order
    stale: tuple[str, ...] = ()  #: the reference's entries (file names) no rule writes
    unreferenced: tuple[str, ...] = ()  #: files in the store no release resolves to

    @property
    def diffs(self) -> tuple[str, ...]:
        """One unified diff per differing entry, and a line per stale entry or unreferenced file; empty when
        everything matches."""
        return (
            tuple(v.diff for v in self.verdicts if v.diff)
            + tuple(f"stale file {name}\n" for name in self.stale)
            + tuple(f"unreferenced file {path}: no release resolves to it (--update removes it)\n" for path in self.unreferenced)
        )

    def counts(self) -> dict[str, int]:
        """How many rules got each verdict, and how many of the reference's entries no rule writes any more (stale:
        a rule that vanished) and store files no release resolves to (unreferenced)."""
        counts = dict.fromkeys((UNCHANGED, CHANGED, MOVED, UNAVAILABLE, ABSENT, NEW), 0)
        for verdict in self.verdicts:
            counts[verdict.verdict] += 1
        counts[STALE] = len(self.stale)
        counts[UNREFERENCED] = len(self.unreferenced)
        return counts

    @property
    def regressions(self) -> tuple[str, ...]:
        """What the reference served and the installed release does not: rules whose sites moved, then the stale
        entries (a rule the finders no longer give, such as an attention class they stopped recognising)."""
        return tuple(v.rule for v in self.verdicts if v.verdict == MOVED) + self.stale


def _diff(stored: str, now: str, stored_path: str, name: str) -> str:
    return "".join(
        difflib.unified_diff(
            stored.splitlines(keepends=True), now.splitlines(keepends=True), fromfile=stored_path, tofile=f"installed/{name}"
        )
    )


def _judge(entry: Current, stored: Stored | None, path: str) -> Verdict:
    """``entry`` against what the reference resolves its forward to (``stored``, kept at ``path``)."""
    before = stored.text if stored is not None else None
    if entry.text is None:
        diff = _diff(before, "", path, entry.file) if before is not None else ""
        return Verdict(entry.rule, ABSENT, entry.file, entry.absent or "", diff, path)
    if before == entry.text and stored.name == entry.file:  # a drift or refusal recorded for the reference: no diff
        return Verdict(entry.rule, entry.kind or UNCHANGED, entry.file, entry.text.strip() if entry.kind else "", stored=path)
    diff = _diff(before or "", entry.text, path or entry.file, entry.file)
    if entry.kind:
        return Verdict(entry.rule, entry.kind, entry.file, entry.text.strip(), diff, path)
    return Verdict(entry.rule, CHANGED if before is not None else NEW, entry.file, "", diff, path)


def check(root: Path = DEFAULT_ROOT, rules: tuple[Rule, ...] | None = None) -> Report:
    """Compare every rule's entry with the reference release's in the store (see the module docstring)."""
    rules = catalog() if rules is None else rules
    name = release_name(rules)
    store = Store.load(root)
    reference = store.nearest(name)
    if reference is None:
        return Report(name, None, ())
    entries = current(rules)
    recorded = store.entries(reference)
    paths = store.paths()
    verdicts = []
    for entry in entries:
        stored = recorded.get(entry.stem)
        verdicts.append(_judge(entry, stored, paths[entry.stem][stored] if stored is not None else ""))
    written = {entry.stem for entry in entries}
    stale = tuple(sorted(stored.name for stem, stored in recorded.items() if stem not in written))
    return Report(name, reference, tuple(verdicts), stale, store.unreferenced(root))


def update(root: Path = DEFAULT_ROOT, rules: tuple[Rule, ...] | None = None) -> Written:
    """Record the installed release in the store from the installed library; returns the files changed."""
    rules = catalog() if rules is None else rules
    entries = [entry for entry in current(rules) if entry.text is not None]  # built before the store is touched
    store = Store.load(root).put(release_name(rules), {entry.stem: Stored(entry.file, entry.text) for entry in entries},
                                 {entry.stem: entry.original for entry in entries if entry.original is not None})
    return store.write(root)


def table(report: Report) -> str:
    """One line per rule: its verdict, its name, and the first line of the drift or absence."""
    width = max((len(v.rule) for v in report.verdicts), default=0)
    lines = [f"{v.verdict:<13}  {v.rule:<{width}}  {v.detail.splitlines()[0] if v.detail else ''}".rstrip() for v in report.verdicts]
    lines += [f"{'stale':<13}  {name}" for name in report.stale]
    lines += [f"{'unreferenced':<13}  {path}" for path in report.unreferenced]
    return "\n".join(lines) + "\n"


def summary(report: Report) -> str:
    """``transformers-5.0.0 against transformers-5.10.4: 20 unchanged, 8 changed, ...``."""
    counts = ", ".join(f"{n} {verdict}" for verdict, n in report.counts().items() if n)
    return f"{report.installed} against {report.reference or 'nothing'}: {counts or 'no rules'}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m maintain.snapshot", description=__doc__.splitlines()[0])
    parser.add_argument("--update", action="store_true", help="record the installed release in the store")
    parser.add_argument("--root", type=Path, default=DEFAULT_ROOT, help="the snapshot store (a folder)")
    parser.add_argument("--quiet", action="store_true", help="print the verdicts without the diffs")
    parser.add_argument("--json", type=Path, help="also write the verdicts (no diffs) to this file")
    args = parser.parse_args(argv)
    try:
        if args.update:
            written = update(args.root)
            for path in written.written:
                print(f"wrote {args.root / path}")
            for path in written.removed:
                print(f"removed {args.root / path} (no release resolves to it)")
            if not written.written and not written.removed:
                print(f"{args.root} already records the installed release as it is")
        report = check(args.root)
    except StoreError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if report.reference is None:
        print(
            f"no release recorded in {args.root / MANIFEST} to compare {report.installed} with; "
            "record the installed one with `python -m maintain.snapshot --update`",
            file=sys.stderr,
        )
        return 2
    if args.json is not None:
        rows = [{k: v for k, v in asdict(verdict).items() if k != "diff"} for verdict in report.verdicts]
        payload = {"installed": report.installed, "reference": report.reference, "counts": report.counts(), "rules": rows,
                   "stale": list(report.stale), "regressions": list(report.regressions)}
        args.json.write_text(json.dumps(payload, indent=1) + "\n")
    sys.stdout.write(table(report))
    if not args.quiet:
        for text in report.diffs:
            sys.stdout.write(text)
    print(summary(report))
    return 1 if report.diffs or report.regressions else 0


if __name__ == "__main__":
    run(main)
