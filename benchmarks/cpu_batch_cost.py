"""What one cached decoding step costs on this CPU for 1..8 rows (batch) and for 1..8 tokens of one row.

AdaDec's rollouts decode a few rows at once, and speculative verification feeds a few tokens of one
row at once; on a GPU both are nearly free, on a CPU their cost depends on the BLAS kernel that the
matrix products hit. This measures it for a packaged model: the median wall time of one forward pass
over a ``--context``-token KV cache, relative to one row of one token. The curve differs between
CPUs, which is why ``codemask/adadec/row_padding.py`` measures at run time whether padding pays and
the speculative runner learns its pass cost per width.

Usage: .venv/bin/python benchmarks/cpu_batch_cost.py [--model qwen-coder] [--threads 1] [--repeat 7]
       [--name cpu_batch_cost]
Writes ``benchmarks/results/NAME.{json,md,png}``.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse
import copy
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from codemask.assets import load_model
from publish import publish

SHAPES = [(rows, 1) for rows in range(1, 9)] + [(1, tokens) for tokens in range(2, 9)]


def step_seconds(model: Any, cache: Any, context: int, rows: int, tokens: int, repeat: int) -> float:
    """Median wall time of one forward pass of ``rows`` × ``tokens`` new tokens over a copy of ``cache``."""
    times = []
    for _ in range(repeat + 1):  # the first pass of a shape warms the kernels up
        branch = copy.deepcopy(cache)
        if rows > 1:
            branch.batch_repeat_interleave(rows)
        ids = torch.randint(100, 20000, (rows, tokens))
        attention = torch.ones(rows, context + tokens, dtype=torch.long)
        started = time.perf_counter()
        with torch.inference_mode():
            model(input_ids=ids, attention_mask=attention, past_key_values=branch, use_cache=True, logits_to_keep=1)
        times.append(time.perf_counter() - started)
    return statistics.median(times[1:])


def markdown(report: dict[str, Any]) -> str:
    lines = ["### One decoding step on a CPU (`benchmarks/cpu_batch_cost.py`)", "",
             f"{report['machine']}, {report['threads']} thread(s), {report['date']}; {report['model']}, "
             f"{report['context']}-token KV cache, median of {report['repeat']} passes; "
             f"`{report['command']}`.", "",
             "| rows × tokens | ms | × one token |", "|---|---:|---:|"]
    for shape in report["shapes"]:
        lines.append(f"| {shape['rows']} × {shape['tokens']} | {1000 * shape['seconds']:.1f} | {shape['ratio']:.2f} |")
    return "\n".join(lines)


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.2))
    for key, label in (("rows", "rows of 1 token"), ("tokens", "tokens of 1 row")):
        points = [(s[key], s["ratio"]) for s in report["shapes"] if s["rows" if key == "tokens" else "tokens"] == 1]
        ax.plot(*zip(*sorted(points), strict=True), marker="o", label=label)
    ax.set_xlabel("rows or tokens per pass")
    ax.set_ylabel("cost × one token")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="qwen-coder")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--context", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--name", default="cpu_batch_cost", help="results file name (one per thread count kept)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = load_model(args.model)
    with torch.inference_mode():
        cache = model(input_ids=torch.randint(100, 20000, (1, args.context)), use_cache=True,
                      logits_to_keep=1).past_key_values
    shapes = [{"rows": r, "tokens": t, "seconds": step_seconds(model, cache, args.context, r, t, args.repeat)}
              for r, t in SHAPES]
    one = shapes[0]["seconds"]
    for shape in shapes:
        shape["ratio"] = shape["seconds"] / one
    report = {"model": args.model, "machine": f"{platform.machine()} CPU", "threads": args.threads,
              "context": args.context, "repeat": args.repeat, "date": time.strftime("%Y-%m-%d"),
              "command": ".venv/bin/python benchmarks/cpu_batch_cost.py " + " ".join(sys.argv[1:]),
              "shapes": shapes}
    publish(args.name, report, markdown(report), plot)


if __name__ == "__main__":
    main()
