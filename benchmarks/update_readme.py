"""Put a benchmark's latest table into README.md, between ``<!-- bench:NAME -->`` markers.

Shared by the benchmarks: each owns one section, replaced whole on every run; a missing section is
appended at the end of the README. Usage: ``python benchmarks/update_readme.py NAME FILE.md``.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

README = Path(__file__).resolve().parents[1] / "README.md"
RESULTS = README.parent / "benchmarks" / "results"


def update_section(readme: Path, name: str, content: str) -> None:
    """Replace the text between the ``name`` markers of ``readme`` by ``content`` (add the markers if absent)."""
    begin, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    block = f"{begin}\n{content.strip()}\n{end}"
    text = readme.read_text(encoding="utf-8") if readme.exists() else ""
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.DOTALL)
    if pattern.search(text):
        text = pattern.sub(lambda _: block, text, count=1)
    else:
        text = text.rstrip("\n") + ("\n\n" if text.strip() else "") + block
    readme.write_text(text.rstrip("\n") + "\n", encoding="utf-8")


def publish(name: str, report: dict[str, Any], table: str, plot: Callable[[dict[str, Any], Path], None], *,
            alt: str, update_readme: bool, write_json: bool = True) -> None:
    """Write a benchmark's results: ``NAME.json`` (unless already written), ``NAME.md``, ``NAME.png``,
    the table on stdout, and with ``update_readme`` the README section (table, then the plot)."""
    RESULTS.mkdir(exist_ok=True)
    if write_json:
        (RESULTS / f"{name}.json").write_text(json.dumps(report, indent=2) + "\n")
    (RESULTS / f"{name}.md").write_text(table + "\n")
    plot(report, RESULTS / f"{name}.png")
    print(table)
    if update_readme:
        update_section(README, name, f"{table}\n\n![{alt}](benchmarks/results/{name}.png)")


def plot_model_panels(path: Path, models: list[dict[str, Any]], configs: list[str], panels: list[tuple[str, str]],
                      value: Callable[[dict[str, Any], str, str], float], title: str, rotation: int = 0) -> None:
    """One panel per metric, one group of bars per configuration, one bar per model in each group.

    ``value(model_entry, config, key)`` reads a bar's height from a model's results.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(3.4 * len(panels) + 0.5, 3.5))
    width = 0.8 / max(len(models), 1)
    centres = [i + width * (len(models) - 1) / 2 for i in range(len(configs))]
    for m, entry in enumerate(models):
        for ax, (key, panel_title) in zip(axes, panels, strict=True):
            heights = [value(entry, config, key) for config in configs]
            ax.bar([i + m * width for i in range(len(configs))], heights, width, label=entry["model"])
            ax.set_title(panel_title)
            ax.set_xticks(centres, configs, rotation=rotation)
    axes[0].legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("name", help="the benchmark's section name, e.g. mask_speed")
    parser.add_argument("content", type=Path, help="a markdown file with the section's new content")
    parser.add_argument("--readme", type=Path, default=README)
    args = parser.parse_args(argv)
    update_section(args.readme, args.name, args.content.read_text(encoding="utf-8"))


if __name__ == "__main__":
    main()
