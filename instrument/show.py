"""``python -m instrument.show [TARGET] [--diff]``: print rewritten forwards, sites marked.

TARGET is a class name (``Qwen3VLModel``), a dotted path, a model_type
(``qwen3_vl``: every rewritten forward of that family) or a rule name. With no
TARGET, lists every rule. Offline; needs no weights. ``--nnsight`` prints each
standard value of a checkpoint (a model_type's tiny one, a folder, a hub id)
as plain nnsight spells it, for a server that runs without this package.

This command is the library's own, the one its mission names, so it lives in
`instrument` beside the compiler rather than with the maintainer's tools
(`maintain`): it imports neither the rules (``rewrites``) nor the user layer
(``envoys``), and reaches the rules through the catalogue the rules package
registers as an entry point (``instrument.rules:catalog``, `instrument.targets`).
"""

from __future__ import annotations

import argparse
import sys

from .commands import run
from .compiler import DriftError, compile_rule
from .listing import diff, listing
from .targets import all_rules, nearest, provider, select


def rule_table() -> str:
    """One line per rule: its name, its target and its site names."""
    rules = all_rules()
    width = max(len(rule.name) for rule in rules)
    lines = []
    for rule in rules:
        labels = ", ".join(label for labels in rule.sites.values() for label in labels)
        lines.append(f"{rule.name:<{width}}  {rule.target}\n{'':<{width}}  sites: {labels}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m instrument.show", description=__doc__.splitlines()[0])
    parser.add_argument("target", nargs="?", help="class name, dotted path, model_type or rule name")
    parser.add_argument("--diff", action="store_true", help="print a unified diff against the original")
    parser.add_argument("--nnsight", action="store_true",
                        help="print each standard value of TARGET (a model_type, a checkpoint folder or hub id) as "
                             "plain nnsight reads it: what a server without this package runs")
    args = parser.parse_args(argv)
    if args.nnsight:
        if args.target is None:
            parser.error("--nnsight needs a TARGET: a model_type (qwen3_vl), a checkpoint folder or a hub id")
        sys.stdout.write(provider("spellings")(args.target))
        return 0
    if args.target is None:
        sys.stdout.write(rule_table())
        return 0
    rules = select(args.target)
    if not rules:
        every = all_rules()
        close = nearest(args.target, every)
        names = ", ".join(sorted({t for r in every for t in r.model_types}))
        print(
            f"no rewritten forward matches {args.target!r}"
            + (f"; did you mean {', '.join(close)}?" if close else "")
            + f"\ntry a class name (Qwen3VLModel), a rule name (qwen3_vl.deepstack), a model_type ({names}), or run "
            f"with no target to list every rule",
            file=sys.stderr,
        )
        return 2
    status = 0
    for index, rule in enumerate(rules):
        try:
            instrumented = compile_rule(rule)
        except DriftError as error:
            print(f"error: {error}", file=sys.stderr)
            status = 1
            continue
        if index:
            sys.stdout.write("\n")
        sys.stdout.write(diff(instrumented) if args.diff else listing(instrumented))
    return status


if __name__ == "__main__":
    run(main)
