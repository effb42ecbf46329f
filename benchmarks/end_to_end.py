"""End-to-end decoding speed: constrained vs unconstrained, with and without jump-forward.

Same model, same prompts, greedy, one process. For each mode it reports tokens/s (generated tokens
over wall time, aggregated over the prompts), time per decoding step (median and p99 over the
steps of all prompts), forward passes per generated token, and how many outputs parse as JSON.
Modes:

- ``unconstrained``: ``constrained_generate(grammar=None)``, the same loop without a grammar;
- ``json``: the builtin JSON grammar (free-form JSON: little is forced);
- ``records`` / ``records+jf``: JSON objects with fixed keys (the shape a JSON Schema gives), without
  and with jump-forward, which appends the keys and punctuation without a forward pass per token.

Targets: constrained >= 0.95x unconstrained tokens/s without jump-forward, >= 1.2x with it
on the JSON tasks; 100% of constrained outputs parse.

Usage: benchmarks/.venv/bin/python benchmarks/end_to_end.py [--model smollm2]
Time it on an otherwise idle machine.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse
import json
import platform
import re
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from codemask import GenerationResult, constrained_generate
from codemask.adadec.calibrate import chat_prompt
from codemask.assets import load_model, load_tokenizer
from publish import publish

RESULTS = Path(__file__).resolve().parent / "results"

# (request, the fixed keys of the record and the kind of each value)
RECORD_TASKS: list[tuple[str, list[tuple[str, str]]]] = [
    ("Describe a cat as a JSON object with name, age and color.", [("name", "string"), ("age", "integer"),
                                                                  ("color", "string")]),
    ("Describe the book Dune as JSON with title, author and year.", [("title", "string"), ("author", "string"),
                                                                    ("year", "integer")]),
    ("Give Paris as JSON: city, country, population.", [("city", "string"), ("country", "string"),
                                                       ("population", "integer")]),
    ("Make up a person as JSON: first_name, last_name, age, email.", [("first_name", "string"),
                                                                     ("last_name", "string"), ("age", "integer"),
                                                                     ("email", "string")]),
    ("Describe a laptop for sale as JSON: brand, model, price_usd, in_stock.",
     [("brand", "string"), ("model", "string"), ("price_usd", "integer"), ("in_stock", "boolean")]),
    ("Give a JSON object for the planet Mars: name, moons, has_rings.", [("name", "string"), ("moons", "integer"),
                                                                        ("has_rings", "boolean")]),
]
VALUES = {
    "string": r'"\"" [A-Za-z0-9 .,@_-]{1,40} "\""',
    "integer": '"-"? ("0" | [1-9] [0-9]{0,11})',
    "boolean": '("true" | "false")',
}


def record_grammar(keys: list[tuple[str, str]]) -> str:
    """EBNF for ``{"k1": v1, "k2": v2, ...}`` with these keys in this order (pretty-printed)."""
    members = ' ",\\n" '.join(f'"  \\"{key}\\": " {VALUES[kind]}' for key, kind in keys)
    return f'root ::= "{{\\n" {members} "\\n}}"'


def chat(tokenizer: Any, request: str) -> str:
    return chat_prompt(tokenizer, request + " Reply with the JSON only.")


def parses(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def parses_leniently(text: str) -> bool:
    """Whether the text, or the first fenced block in it (```json ... ```), parses: the usual rescue."""
    fenced = re.search(r"```(?:json)?\s*\n(.*?)```", text, re.DOTALL)
    return parses(text) or (fenced is not None and parses(fenced.group(1)))


def run_mode(model: Any, tokenizer: Any, mode: str, max_new_tokens: int) -> dict[str, Any]:
    results: list[GenerationResult] = []
    step_times: list[float] = []
    for request, keys in RECORD_TASKS:
        grammar = {"unconstrained": None, "json": "json"}.get(mode, record_grammar(keys))
        stamps: list[float] = []

        def stamp(*_: object, stamps: list[float] = stamps) -> None:
            stamps.append(time.perf_counter())

        started = time.perf_counter()
        result = constrained_generate(model, tokenizer, chat(tokenizer, request), grammar=grammar,
                                      max_new_tokens=max_new_tokens, jump_forward=mode.endswith("+jf"),
                                      on_token=stamp)
        assert isinstance(result, GenerationResult)
        results.append(result)
        step_times += [b - a for a, b in zip([started, *stamps], stamps, strict=False)][1:]  # skip prefill
    tokens = sum(r.stats.generated_tokens for r in results)
    wall = sum(r.stats.wall_time_s for r in results)
    forwards = sum(r.stats.forward_passes for r in results)
    ordered = sorted(step_times)
    return {
        "mode": mode,
        "tokens": tokens,
        "wall_s": wall,
        "tokens_per_s": tokens / wall,
        "step_ms_median": statistics.median(ordered) * 1000,
        "step_ms_p99": ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1000,
        "forward_passes": forwards,
        "forward_passes_per_token": forwards / tokens,
        "forced_tokens": sum(r.stats.grammar.forced_tokens for r in results),
        "mask_ms_per_token": 1000 * sum(r.stats.grammar.mask_time_s for r in results) / tokens,
        "parse_rate": sum(parses(r.text) for r in results) / len(results),
        "lenient_parse_rate": sum(parses_leniently(r.text) for r in results) / len(results),
        "cut_by_length": sum(r.finish_reason == "length" for r in results),
        "finish_reasons": [r.finish_reason for r in results],
        "outputs": [r.text for r in results],
    }


def markdown(report: dict[str, Any]) -> str:
    base = next(m for m in report["modes"] if m["mode"] == "unconstrained")
    lines = [
        f"End to end, {report['model']} on {report['machine']} ({report['threads']} threads), greedy, "
        f"{len(RECORD_TASKS)} JSON prompts, `{report['command']}`:",
        "",
        "| mode | tokens/s | × unconstrained | step median / p99 (ms) | forward passes per token | forced tokens "
        "| mask ms/token | outputs that parse (after unfencing) | cut at max tokens |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for m in report["modes"]:
        lines.append(
            f"| {m['mode']} | {m['tokens_per_s']:.1f} | {m['tokens_per_s'] / base['tokens_per_s']:.2f}× "
            f"| {m['step_ms_median']:.1f} / {m['step_ms_p99']:.1f} | {m['forward_passes_per_token']:.2f} "
            f"| {m['forced_tokens']} | {m['mask_ms_per_token']:.2f} | {m['parse_rate']:.0%} "
            f"({m['lenient_parse_rate']:.0%}) | {m['cut_by_length']} |")
    return "\n".join(lines)


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = report["modes"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.5))
    names = [m["mode"] for m in modes]
    left.bar(names, [m["tokens_per_s"] for m in modes], color="#4c72b0")
    left.set_ylabel("tokens/s")
    left.set_title("throughput")
    right.bar(names, [m["forward_passes_per_token"] for m in modes], color="#55a868")
    right.set_ylabel("forward passes per token")
    right.set_title("model calls")
    for ax in (left, right):
        ax.tick_params(axis="x", rotation=20)
    fig.suptitle(f"end to end: {report['model']}, greedy, {len(RECORD_TASKS)} JSON prompts")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    args = parser.parse_args()

    model, tokenizer = load_model(args.model), load_tokenizer(args.model)
    constrained_generate(model, tokenizer, chat(tokenizer, "warm up"), max_new_tokens=4)  # first-call costs
    for _, keys in RECORD_TASKS:  # compile outside the timed runs (compile time is mask_speed's business)
        constrained_generate(model, tokenizer, "x", grammar=record_grammar(keys), max_new_tokens=1)
    constrained_generate(model, tokenizer, "x", grammar="json", max_new_tokens=1)

    modes = [run_mode(model, tokenizer, mode, args.max_new_tokens)
             for mode in ("unconstrained", "json", "records", "records+jf")]
    report = {
        "model": args.model,
        "machine": f"{platform.machine()} CPU" if not torch.cuda.is_available() else torch.cuda.get_device_name(),
        "threads": torch.get_num_threads(),
        "command": "benchmarks/.venv/bin/python benchmarks/end_to_end.py" + (
            f" --model {args.model}" if args.model != "smollm2" else ""),
        "max_new_tokens": args.max_new_tokens,
        "modes": modes,
    }
    publish("end_to_end", report, markdown(report), plot)


if __name__ == "__main__":
    main()
