"""MkDocs hook: the benchmarks page is generated from ``benchmarks/results/``.

A line ``<!-- results NAME -->`` in a page becomes the table ``benchmarks/results/NAME.md`` followed by
its plot ``NAME.png`` (copied into the site). Every table in ``benchmarks/results/`` must appear on
some page, and every name a page asks for must exist: either mistake is a warning, which fails
``mkdocs build --strict``, so the page cannot fall behind the results.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

LOG = logging.getLogger("mkdocs.hooks.benchmarks")
RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
SITE_FOLDER = "benchmarks/results"
MARKER = re.compile(r"^<!-- results (?P<name>[\w.-]+) -->$", re.MULTILINE)
_shown: set[str] = set()


def on_files(files: Files, config: Any) -> Files:
    """Copy every plot of ``benchmarks/results/`` into the site, beside the pages that show them."""
    for plot in sorted(RESULTS.glob("*.png")):
        files.append(File.generated(config, f"{SITE_FOLDER}/{plot.name}", abs_src_path=str(plot)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    """Replace each results marker by the table and the plot it names."""
    depth = page.file.src_uri.count("/")
    prefix = "../" * depth + SITE_FOLDER

    def include(match: re.Match[str]) -> str:
        name = match["name"]
        table = RESULTS / f"{name}.md"
        if not table.is_file():
            LOG.warning("%s asks for benchmarks/results/%s.md, which does not exist", page.file.src_uri, name)
            return ""
        _shown.add(name)
        text = table.read_text(encoding="utf-8").strip()
        text = text.replace(f"]({SITE_FOLDER}/", f"]({prefix}/")  # a table that embeds its own plot
        if (RESULTS / f"{name}.png").is_file() and f"/{name}.png)" not in text:
            text += f"\n\n![{name}]({prefix}/{name}.png)"
        return text

    return MARKER.sub(include, markdown)


def on_post_build(config: Any) -> None:
    """Warn about results no page shows."""
    missing = sorted(path.stem for path in RESULTS.glob("*.md") if path.stem not in _shown)
    if missing:
        LOG.warning("benchmarks/results tables shown on no page: %s", ", ".join(missing))
    _shown.clear()
