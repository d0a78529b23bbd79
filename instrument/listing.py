"""Text renderings of a compiled rule: the marked listing, the diff, the snapshot.

Every rendering names files relative to the directory holding the library's
top package (``transformers/models/llava/modeling_llava.py``), so the text is
the same on every machine.
"""

from __future__ import annotations

import difflib
import sys
from pathlib import Path

from .compiler import Instrumented
from .rule import Rule
from .store import forward_stem
from .stored import NUMBERED, SITES_LINE
from .versions import library_version


def relative_path(instrumented: Instrumented) -> str:
    """The target's file, relative to its library's install directory."""
    top = sys.modules[instrumented.rule.module_name.partition(".")[0]]
    base = Path(top.__file__).resolve().parent.parent
    path = Path(instrumented.filename).resolve()
    return path.relative_to(base).as_posix() if path.is_relative_to(base) else path.as_posix()


def header(instrumented: Instrumented) -> str:
    """Comment lines naming the rule, the target, its file, first line and library version, the variant chosen,
    and its sites with their file lines."""
    return _header(instrumented, located=True)


def _header(instrumented: Instrumented, located: bool) -> str:
    """The rule's purpose, its target and file, the variant chosen and what differs there, and its sites, each
    with nnsight's label where the variant serves it under another; ``located`` adds file lines and the version."""
    rule = instrumented.rule
    sites = ", ".join(
        site.served_as
        + (f"{NUMBERED}{site.label})" if site.label != site.served_as else "")
        + (f" (line {instrumented.first_line + site.line - 1})" if located else "")
        for site in instrumented.rewritten.sites
    )
    where = relative_path(instrumented)
    if located:
        where += f":{instrumented.first_line} ({library_version(rule.module_name)})"
    variant = f"# variant: transformers{rule.variant}: {rule.variant_note}\n" if rule.variant else ""
    return f"# rule {rule.name}: {rule.purpose}\n# {rule.target}\n# {where}\n{variant}{SITES_LINE}{sites}\n"


def listing(instrumented: Instrumented) -> str:
    """The rewritten forward, each line with its number in the original file, sites marked in a gutter."""
    by_line: dict[int, list[str]] = {}
    for site in instrumented.rewritten.sites:
        by_line.setdefault(site.line, []).append(site.served_as)
    width = max((len(s.served_as) for s in instrumented.rewritten.sites), default=0)
    lines = []
    for number, text in enumerate(instrumented.rewritten.source.splitlines(), start=1):
        names = by_line.get(number, [])
        marks = [f"{name:<{width}} ->" for name in names] or [" " * (width + 3)]
        for extra in marks[:-1]:
            lines.append(f"{extra} {'+':>5}")
        lines.append(f"{marks[-1]} {instrumented.first_line + number - 1:>5}  {text}".rstrip())
    return header(instrumented) + "\n" + "\n".join(lines) + "\n"


def diff(instrumented: Instrumented, context: int = 3) -> str:
    """A unified diff of the original forward against the rewritten one, in file line numbers."""
    before = instrumented.original_source.splitlines(keepends=True)
    after = instrumented.rewritten.source.splitlines(keepends=True)
    path = relative_path(instrumented)
    offset = instrumented.first_line - 1
    out = [f"--- a/{path}\n", f"+++ b/{path}\n"]
    matcher = difflib.SequenceMatcher(a=before, b=after, autojunk=False)
    for group in matcher.get_grouped_opcodes(context):
        a_start, a_end, b_start, b_end = group[0][1], group[-1][2], group[0][3], group[-1][4]
        out.append(f"@@ -{a_start + 1 + offset},{a_end - a_start} +{b_start + 1 + offset},{b_end - b_start} @@\n")
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                out.extend(" " + line for line in before[i1:i2])
                continue
            out.extend("-" + line for line in before[i1:i2])
            out.extend("+" + line for line in after[j1:j2])
    return "".join(out)


def snapshot_header(instrumented: Instrumented) -> str:
    """`header` without what varies between releases that leave the forward alone: no version, no file line."""
    return _header(instrumented, located=False)


def snapshot(instrumented: Instrumented) -> str:
    """What a snapshot file holds: the same text on every release whose forward reads the same."""
    return snapshot_header(instrumented) + "\n" + instrumented.rewritten.source


def snapshot_file_name(rule: Rule) -> str:
    """One file per rewritten forward: ``modeling_llava.LlavaModel.forward.py``."""
    return f"{forward_stem(rule.module_name, rule.qualname)}.py"
