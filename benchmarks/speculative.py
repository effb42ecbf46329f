"""Speculative verification: forward passes per token and wall tokens/s, plain vs speculative decoding.

Same model, same prompts, greedy (or sampled with ``--temperature`` and a seed), one process; per
task all modes run back to back (so that load from other processes hits them alike). Modes:

- ``unconstrained``: ``constrained_generate(grammar=None)``;
- ``unconstrained+spec``: the same with ``speculative="auto"`` (drafts from the context only);
- ``constrained``: with the task's grammar (jump-forward on, the default);
- ``constrained+spec``: the same with ``speculative="auto"``.

Task kinds:

- ``json-schema``: Glaiveai2K function-argument schemas from ``$CODEMASK_DATA/jsonschemabench``
  (spread evenly over the file names, those that compile), the schema in the prompt, the schema as the grammar;
- ``code-edit``: a HumanEval+ file (prompt + canonical solution, every 20th task) with an edit
  request whose answer is the whole file again — most of the output copies the context; the
  builtin ``python`` grammar.

Reported per kind and mode: tokens/s (generated tokens over wall time, summed over tasks), forward
passes per generated token, drafted and accepted tokens, and whether the speculative outputs are
token for token those of the plain mode (sampled too: each position's draw is keyed by the seed,
the row and the position). Targets: identical greedy output; code-edit
>= 2x fewer forward passes and >= 1.5x tokens/s than ``constrained``; json-schema
``constrained+spec`` >= 1.3x the tokens/s of ``unconstrained``.

Usage: benchmarks/.venv/bin/python benchmarks/speculative.py [--models smollm2 qwen-coder] [--merge]
       [--temperature 0.7 --seed 0]
(``--merge`` keeps the other models' results of the last run: one model per process. Sampled runs
are written as ``speculative_sampled``, beside the greedy ``speculative``.)
Time it on an otherwise idle machine; forward passes per token do not depend on load.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse
import gzip
import json
import platform
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from codemask import GenerationResult, Sampling, constrained_generate
from codemask.adadec.calibrate import chat_prompt
from codemask.assets import load_model, load_tokenizer
from codemask.compilers import compiler_for, model_stop_token_ids, model_vocab_size
from codemask.errors import CodemaskError
from codemask.grammar.resolve import as_grammar

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: tests.data_paths
from tests.data_paths import corpora_root

RESULTS = Path(__file__).resolve().parent / "results"
DATA = corpora_root()  # jsonschemabench: $CODEMASK_DATA
MODES = ("unconstrained", "unconstrained+spec", "constrained", "constrained+spec")
EDITS = (
    "Rename the function {name} to {name}_impl everywhere and return the whole updated file.",
    "Add a short comment above the return statement and return the whole updated file.",
    "Append a function main() that prints {name} applied to one example; return the whole updated file.",
)


@dataclass
class Task:
    kind: str
    name: str
    request: str
    grammar: Any
    max_new_tokens: int


def json_schema_tasks(count: int, compiler: Any) -> list[Task]:
    """Glaiveai2K schemas spread evenly over the file names, the first ``count`` the compiler accepts."""
    files = sorted((DATA / "jsonschemabench").glob("Glaiveai2K---*.json"))
    files = files[:: max(1, len(files) // (2 * count))]
    tasks: list[Task] = []
    for path in files:
        schema = json.loads(path.read_text())["schema"]
        try:
            compiler.compile(as_grammar(schema))
        except Exception:  # a schema the compiler refuses is not a task
            continue
        request = ("Fill in realistic arguments. Reply with one JSON object that matches this JSON Schema:\n"
                   + json.dumps(schema))
        tasks.append(Task("json-schema", path.stem.split("---")[1], request, schema, 128))
        if len(tasks) == count:
            break
    return tasks


def code_edit_tasks(count: int) -> list[Task]:
    """HumanEval+ files (every 20th task) with an edit whose answer repeats the file."""
    with gzip.open(DATA / "humanevalplus" / "HumanEvalPlus.jsonl.gz", "rt") as handle:
        rows = [json.loads(line) for line in handle][::20][:count]
    tasks = []
    for i, row in enumerate(rows):
        source = row["prompt"] + row["canonical_solution"]
        edit = EDITS[i % len(EDITS)].format(name=row["entry_point"])
        tasks.append(Task("code-edit", row["entry_point"], f"{edit}\n\n```python\n{source}```", "python", 256))
    return tasks


def run_task(model: Any, tokenizer: Any, task: Task, sampling: dict[str, Any]) -> dict[str, GenerationResult]:
    prompt = chat_prompt(tokenizer, task.request)
    out: dict[str, GenerationResult] = {}
    for mode in MODES:
        grammar = task.grammar if mode.startswith("constrained") else None
        result = constrained_generate(model, tokenizer, prompt, grammar=grammar, max_new_tokens=task.max_new_tokens,
                                      speculative="auto" if mode.endswith("+spec") else None, **sampling)
        assert isinstance(result, GenerationResult)
        out[mode] = result
    return out


def summarise(kind: str, runs: list[dict[str, GenerationResult]]) -> list[dict[str, Any]]:
    """Per mode, totals over the tasks of this kind (none when every task was skipped)."""
    rows: list[dict[str, Any]] = []
    if not runs:
        return rows
    for mode in MODES:
        results = [r[mode] for r in runs]
        tokens = sum(r.stats.generated_tokens for r in results)
        wall = sum(r.stats.wall_time_s for r in results)
        forwards = sum(r.stats.forward_passes for r in results)
        drafted = sum(r.stats.speculative.drafted_tokens for r in results)
        plain = mode.removesuffix("+spec")
        rows.append({
            "kind": kind,
            "mode": mode,
            "tasks": len(results),
            "tokens": tokens,
            "wall_s": wall,
            "tokens_per_s": tokens / wall,
            "forward_passes": forwards,
            "forward_passes_per_token": forwards / tokens,
            "forced_tokens": sum(r.stats.grammar.forced_tokens for r in results),
            "drafted_tokens": drafted,
            "accepted_tokens": sum(r.stats.speculative.accepted_tokens for r in results),
            "identical_to_plain": (sum(r[mode].token_ids == r[plain].token_ids for r in runs)
                                   if mode != plain else None),
            "finish_reasons": [r.finish_reason for r in results],
        })
    return rows


def bench_model(name: str, json_count: int, code_count: int, sampling: dict[str, Any]) -> dict[str, Any]:
    model, tokenizer = load_model(name), load_tokenizer(name)
    compiler = compiler_for(tokenizer, model_vocab_size(model), model_stop_token_ids(model))
    tasks = json_schema_tasks(json_count, compiler) + code_edit_tasks(code_count)
    compiler.compile(as_grammar("python"))  # compile outside the timed runs
    constrained_generate(model, tokenizer, chat_prompt(tokenizer, "warm up"), max_new_tokens=4)
    runs: dict[str, list[dict[str, GenerationResult]]] = {"json-schema": [], "code-edit": []}
    skipped: list[dict[str, str]] = []
    for task in tasks:
        try:
            runs[task.kind].append(run_task(model, tokenizer, task, sampling))
        except CodemaskError as exc:  # an engine error in any mode drops the task from every mode
            skipped.append({"kind": task.kind, "name": task.name, "error": str(exc)})
            print(f"{name} {task.kind} {task.name}: skipped ({exc})", flush=True)
            continue
        done = runs[task.kind][-1]
        print(f"{name} {task.kind} {task.name}: " + ", ".join(
            f"{m} {r.stats.forward_passes}fp/{r.stats.generated_tokens}t {r.stats.wall_time_s:.1f}s"
            for m, r in done.items()), flush=True)
    summary = [row for kind, kind_runs in runs.items() for row in summarise(kind, kind_runs)]
    return {
        "model": name,
        "tasks": [{"kind": t.kind, "name": t.name} for t in tasks],
        "skipped": skipped,
        "summary": summary,
        "outputs": {kind: [{m: r.text for m, r in run.items()} for run in kind_runs]
                    for kind, kind_runs in runs.items()},
    }


def ratio(rows: list[dict[str, Any]], kind: str, mode: str, base: str, key: str, invert: bool = False) -> str:
    """``mode`` over ``base`` for ``key`` (or its inverse), formatted; "n/a" when the kind has no results."""
    by_mode = {r["mode"]: r for r in rows if r["kind"] == kind}
    if not by_mode:
        return "n/a (all tasks skipped)"
    value = float(by_mode[mode][key] / by_mode[base][key])
    return f"{1 / value if invert else value:.2f}×"


def markdown(report: dict[str, Any]) -> str:
    lines = [
        f"Speculative verification on {report['machine']} ({report['threads']} threads), "
        f"{report.get('decoding', 'greedy')}, "
        f"`{report['command']}` (wall times move with the load on the machine and with its CPU: "
        "forward passes are the robust figure):",
        "",
        "| model | task | mode | tokens/s | forward passes per token | drafted / accepted | identical to plain |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for run in report["models"]:
        for r in run["summary"]:
            same = "" if r["identical_to_plain"] is None else f"{r['identical_to_plain']}/{r['tasks']}"
            spec = f"{r['drafted_tokens']} / {r['accepted_tokens']}" if r["mode"].endswith("+spec") else ""
            lines.append(f"| {run['model']} | {r['kind']} ({r['tasks']}) | {r['mode']} | {r['tokens_per_s']:.1f} "
                         f"| {r['forward_passes_per_token']:.2f} | {spec} | {same} |")
    lines += ["", "| model | code-edit: forward passes, constrained / +spec | code-edit: tokens/s, +spec / constrained "
              "| json-schema: tokens/s, constrained+spec / unconstrained |", "|---|---:|---:|---:|"]
    for run in report["models"]:
        rows = run["summary"]
        fewer = ratio(rows, "code-edit", "constrained+spec", "constrained", "forward_passes_per_token", invert=True)
        faster = ratio(rows, "code-edit", "constrained+spec", "constrained", "tokens_per_s")
        beats = ratio(rows, "json-schema", "constrained+spec", "unconstrained", "tokens_per_s")
        lines.append(f"| {run['model']} | {fewer} (target ≥ 2) | {faster} (target ≥ 1.5) | {beats} (target ≥ 1.3) |")
    skipped = [f"{run['model']} {s['kind']} {s['name']}" for run in report["models"] for s in run.get("skipped", [])]
    if skipped:
        lines += ["", "Skipped (plain constrained decoding itself failed with an engine error): " + ", ".join(skipped)]
    return "\n".join(lines)


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = report["models"]
    fig, axes = plt.subplots(len(runs), 2, figsize=(11, 3.4 * len(runs)), squeeze=False)
    for (left, right), run in zip(axes, runs, strict=True):
        for ax, key, label in ((left, "tokens_per_s", "tokens/s"),
                               (right, "forward_passes_per_token", "forward passes per token")):
            kinds = ["json-schema", "code-edit"]
            width = 0.2
            for m, mode in enumerate(MODES):
                values = [next((r[key] for r in run["summary"] if r["kind"] == k and r["mode"] == mode), 0.0)
                          for k in kinds]
                ax.bar([k + (m - 1.5) * width for k in range(len(kinds))], values, width, label=mode)
            ax.set_xticks(range(len(kinds)), kinds)
            ax.set_ylabel(label)
            ax.set_title(f"{run['model']}: {label}")
        left.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["smollm2", "qwen-coder"])
    parser.add_argument("--json-tasks", type=int, default=4)
    parser.add_argument("--code-tasks", type=int, default=3)
    parser.add_argument("--merge", action="store_true", help="keep other models' results from the last run")
    parser.add_argument("--temperature", type=float, default=0.0, help="0: greedy")
    parser.add_argument("--seed", type=int, default=0, help="the sampling seed (with --temperature)")
    args = parser.parse_args()
    sampled = args.temperature > 0
    sampling = {"sampling": Sampling(temperature=args.temperature, seed=args.seed)} if sampled else {}
    name = "speculative_sampled" if sampled else "speculative"

    report = {
        "decoding": f"sampled at temperature {args.temperature} (seed {args.seed})" if sampled else "greedy",
        "machine": f"{platform.machine()} CPU" if not torch.cuda.is_available() else torch.cuda.get_device_name(),
        "threads": torch.get_num_threads(),
        "command": " ".join(["benchmarks/.venv/bin/python benchmarks/speculative.py", *sys.argv[1:]]),
        "models": [bench_model(model, args.json_tasks, args.code_tasks, sampling) for model in args.models],
    }
    RESULTS.mkdir(exist_ok=True)
    if args.merge and (RESULTS / f"{name}.json").exists():
        earlier = json.loads((RESULTS / f"{name}.json").read_text())
        report["command"] = "; ".join([*earlier["command"].split("; "), str(report["command"])])
        report["models"] = [m for m in earlier["models"] if m["model"] not in args.models] + report["models"]
    (RESULTS / f"{name}.json").write_text(json.dumps(report, indent=2) + "\n")
    table = markdown(report)
    (RESULTS / f"{name}.md").write_text(table + "\n")
    plot(report, RESULTS / f"{name}.png")
    print(table)


if __name__ == "__main__":
    main()
