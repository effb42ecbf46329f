"""Writing a benchmark's results: one current JSON, Markdown table and plot per benchmark.

Each benchmark writes ``benchmarks/results/NAME.{json,md,png}``, replacing the previous run's; the
documentation's benchmarks page (``docs/benchmarks.md``) shows every table and plot found there, and
git keeps the earlier runs.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def publish(name: str, report: dict[str, Any], table: str, plot: Callable[[dict[str, Any], Path], None], *,
            write_json: bool = True) -> None:
    """Write ``NAME.json`` (unless already written), ``NAME.md`` and ``NAME.png``, and print the table."""
    RESULTS.mkdir(exist_ok=True)
    if write_json:
        (RESULTS / f"{name}.json").write_text(json.dumps(report, indent=2) + "\n")
    (RESULTS / f"{name}.md").write_text(table + "\n")
    plot(report, RESULTS / f"{name}.png")
    print(table)


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
