"""mkdocs hooks: the site's pages that are generated, so that nothing on it is written twice.

- ``index.md`` is the README, ``contributing.md`` is CONTRIBUTING.md and
  ``performance-results.md`` is benchmarks/RESULTS.md, each read from its own
  file at build time, links into ``docs/`` made relative to the site.
- ``families.md`` gets each family module's docstring (`envoys.families`) and
  the census's verdicts (`envoys.census`) where its comments mark them.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[2]

#: Site page -> the repository file it is read from.
COPIED = {
    "index.md": "README.md",
    "contributing.md": "CONTRIBUTING.md",
    "performance-results.md": "benchmarks/RESULTS.md",
}

FAMILIES_MARK = "<!-- family docstrings -->"
CENSUS_MARK = "<!-- census -->"


def on_files(files, config):
    for page, source in COPIED.items():
        text = (ROOT / source).read_text()
        files.append(File.generated(config, page, content=site_links(text)))
    return files


def site_links(text: str) -> str:
    """A repository page's Markdown with its links into ``docs/`` made relative to the site's root."""
    return re.sub(r"\]\(docs/", "](", text).replace("](CONTRIBUTING.md)", "](contributing.md)")


def on_page_markdown(markdown, page, config, files):
    if page.file.src_uri == "families.md":
        markdown = markdown.replace(FAMILIES_MARK, family_sections()).replace(CENSUS_MARK, census_table())
    return markdown


def family_sections() -> str:
    """One section per family module: its model_type as the title, its docstring as the text."""
    import envoys.families as package

    sections = []
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda info: info.name):
        try:
            module = importlib.import_module(f"{package.__name__}.{info.name}")
        except ImportError as error:  # a family whose model the installed transformers lacks: its reason instead
            reason = package.absent_from_release(info.name, error)
            if reason is None:
                raise
            sections.append(f"### `{info.name}`\n\nNot on the transformers this site was built with: {reason}.\n")
            continue
        family = getattr(module, "FAMILY", None)
        if family is None:
            continue
        summary, _, body = (module.__doc__ or "").strip().partition("\n")
        sections.append(f"### `{family.model_type}`\n\n**{summary.strip()}**\n{body}\n")
    return "\n".join(sections)


def census_table() -> str:
    """The census of the installed transformers as a table: each image-text-to-text model_type and its verdict."""
    from envoys.census import census, counts_line

    entries = census()
    rows = ["| model_type | verdict | why |", "|---|---|---|"]
    for entry in entries:
        why = entry.reason.replace("|", "\\|").replace("\n", " ")
        rows.append(f"| `{entry.model_type}` | {entry.status} | {why} |")
    return "\n".join(rows) + "\n\n" + counts_line(entries) + "\n"
