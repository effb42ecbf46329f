"""What choosing one sampled token costs: codemask's keyed exponential race against Hugging Face's sampler.

Hugging Face's ``generate`` samples with its logits warpers (``TemperatureLogitsWarper``,
``TopPLogitsWarper``, which sorts the whole row) and ``torch.multinomial`` over the softmax — as
codemask did until its draws were keyed by position (``codemask/decoding/sampling.py``). The race makes
a vector of Exp(1) noise per row from a generator reseeded for that row's (seed, sequence,
position), so its cost grows with rows and vocabulary like the multinomial's. This times both on
the same real logits — each packaged model's next-token logits at every position of a standard
library file (``textwrap.py``), taken in turn — with temperature 0.8 and top-p 0.95, per step of
``rows`` rows: median and p99 over ``--repeat`` steps, and the ratio of the medians. (Top-p is
part of both; it looks for its nucleus among the thousand most likely tokens before sorting a
whole row.)

Usage: .venv/bin/python benchmarks/sampling_cost.py [--repeat 300] [--threads 2] [--device cpu]
Writes ``benchmarks/results/sampling_cost.{json,md,png}``.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import TemperatureLogitsWarper, TopPLogitsWarper

sys.path.insert(0, str(Path(__file__).resolve().parent))
from codemask.assets import load_model, load_tokenizer
from codemask.decoding.pipeline import StepLayout
from codemask.decoding.sampling import SamplingParams, SamplingSelector
from publish import publish

MODELS = {"SmolLM2-135M": "smollm2", "Qwen2.5-Coder-0.5B": "qwen-coder"}
ROWS = (1, 4)
PARAMS = SamplingParams(temperature=0.8, top_p=0.95)


def times(step: Callable[[int], Any], repeat: int, device: torch.device) -> list[float]:
    """Seconds per call of ``step(i)``, after two calls that warm it up."""
    out = []
    for i in range(repeat + 2):
        started = time.perf_counter()
        step(i)
        if device.type == "cuda":
            torch.cuda.synchronize()
        out.append(time.perf_counter() - started)
    return out[2:]


def real_logits(model_name: str, device: torch.device, tokens: int = 512) -> torch.Tensor:
    """``[tokens, vocab]`` next-token logits of a packaged model over the start of ``textwrap.py``."""
    import textwrap

    model, tokenizer = load_model(model_name), load_tokenizer(model_name)
    ids = tokenizer(Path(textwrap.__file__).read_text(encoding="utf-8"))["input_ids"][:tokens]
    with torch.inference_mode():
        return model(input_ids=torch.tensor([ids])).logits[0].float().to(device)


def case(logits: torch.Tensor, rows: int, repeat: int, device: torch.device) -> dict[str, Any]:
    positions = logits.shape[0] - rows
    written = [0]
    race = SamplingSelector(PARAMS, seed=0, positions=lambda _s: written[0])
    layout = StepLayout.one_row_per_sequence(range(rows))

    def race_step(i: int) -> Any:
        written[0] = i
        at = i % positions
        return race.select(logits[at:at + rows], layout).tolist()

    generator = torch.Generator(device=device).manual_seed(0)
    temperature, top_p = TemperatureLogitsWarper(PARAMS.temperature), TopPLogitsWarper(PARAMS.top_p)

    def transformers_step(i: int) -> Any:
        at = i % positions
        scores = top_p(None, temperature(None, logits[at:at + rows]))
        return torch.multinomial(torch.softmax(scores, dim=-1), 1, generator=generator).squeeze(-1).tolist()

    row: dict[str, Any] = {"vocab": logits.shape[1], "rows": rows}
    for name, step in (("race", race_step), ("transformers", transformers_step)):
        seconds = times(step, repeat, device)
        row[name] = {"median_ms": 1000 * float(np.median(seconds)), "p99_ms": 1000 * float(np.percentile(seconds, 99))}
    row["ratio"] = row["race"]["median_ms"] / row["transformers"]["median_ms"]
    return row


def markdown(report: dict[str, Any]) -> str:
    lines = ["### Choosing a sampled token (`benchmarks/sampling_cost.py`)", "",
             f"{report['machine']}, {report['threads']} thread(s), {report['date']}; temperature 0.8, top-p 0.95, "
             f"{report['repeat']} steps per case; `{report['command']}`.", "",
             "| model (vocabulary) | rows | codemask median / p99 ms | transformers median / p99 ms "
             "| codemask ÷ transformers |",
             "|---|---:|---:|---:|---:|"]
    for r in report["cases"]:
        lines.append(f"| {r['name']} ({r['vocab']:,}) | {r['rows']} | {r['race']['median_ms']:.2f} / "
                     f"{r['race']['p99_ms']:.2f} | {r['transformers']['median_ms']:.2f} / "
                     f"{r['transformers']['p99_ms']:.2f} | {r['ratio']:.2f} |")
    return "\n".join(lines)


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    labels = [f"{r['name']}\n{r['rows']} row(s)" for r in report["cases"]]
    x = np.arange(len(labels))
    for offset, name, label in ((-0.2, "race", "codemask (race)"), (0.2, "transformers", "transformers")):
        ax.bar(x + offset, [r[name]["median_ms"] for r in report["cases"]], width=0.4, label=label)
    ax.set_xticks(x, labels)
    ax.set_ylabel("median ms per step")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=300)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    cases = []
    for name, model_name in MODELS.items():
        logits = real_logits(model_name, device)
        cases += [{"name": name, **case(logits, rows, args.repeat, device)} for rows in ROWS]
    report = {"machine": f"{platform.machine()} {args.device.upper()}", "threads": args.threads,
              "repeat": args.repeat, "date": time.strftime("%Y-%m-%d"),
              "command": ".venv/bin/python benchmarks/sampling_cost.py " + " ".join(sys.argv[1:]), "cases": cases}
    publish("sampling_cost", report, markdown(report), plot)


if __name__ == "__main__":
    main()
