"""Repetition: CodeRepetEval metrics and pass@1 for greedy, HF repetition_penalty, sampling and RPG.

Same model, same prompts, one process. Configurations:

- ``greedy``: ``constrained_generate`` with no grammar, temperature 0;
- ``hf-rep1.2``: ``model.generate(do_sample=False, repetition_penalty=1.2)`` (CTRL's penalty);
- ``t0.8``: ``constrained_generate(sampling=Sampling(temperature=0.8, seed=0))``;
- ``rpg``: ``constrained_generate(repetition=codemask.RPG())`` (λ = 0.9), greedy;
- ``rpg@λ`` (e.g. ``rpg@0.5``): the same with ``RPG(penalty=λ)``, for a sweep of the decay.

On CodeRepetEval's code-generation prompts (``$CODEMASK_DATA/coderepeteval``: prompts on which greedy
decoding repeats itself; every ``--stride``-th distinct prompt, ``--prompts`` of them) it reports the
paper's metrics from :mod:`codemask.metrics` on the completion's code — the completion up to a
Markdown fence line, where a chat-tuned model leaves its code for prose (:func:`codemask.metrics.code_part`;
TR-S and CCP of the whole completion too, ``tr_s_raw`` and ``ccp_raw``): EGP (ended by end-of-sequence),
TR-4 over the code's grammar tokens and over its statement units, TR-S (repeated lines), CCP (prompt +
code compiles), tokens generated and seconds per sample. On HumanEval+ it reports
pass@1 (greedy configurations; the base tests of each task, in a subprocess with a time limit, on the
completion cut at the first of HumanEval's stop sequences, as the HumanEval protocol and
``adadec_eval`` do: a model that writes on after the function is judged on the function). The
RPG row also gives the stage's CPU time per decoding step (its analysis runs beside the forward pass).

Targets (RPG vs greedy, same model): EGP +50 points, TR-S -30% relative, CCP up, pass@1 not
below greedy, time per sample down, stage overhead <= 1 ms per step.

Usage: benchmarks/.venv/bin/python benchmarks/repetition_eval.py [--models smollm2,qwen-coder]
       [--prompts 24] [--max-new-tokens 128] [--humaneval 10] [--threads N] [--merge]
       [--configs greedy,hf-rep1.2,t0.8,rpg,rpg@0.5] [--name repetition_eval]
(``--merge`` keeps what this run does not redo from the last results file: the other models' entries,
and for a model run again with the same prompts and limits the configurations not in ``--configs`` —
each row records the date and command that produced it; ``--rescore`` generates nothing and
recomputes the text metrics of the stored outputs.)
Time it on an otherwise idle machine.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse
import gzip
import json
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from adadec_eval import HUMANEVAL_STOPS, cut_at_stops
from codemask import RPG, Sampling, constrained_generate, metrics
from codemask.assets import load_model, load_tokenizer
from publish import plot_model_panels, publish

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: tests.data_paths
from tests.data_paths import corpora_root

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DATA = corpora_root()  # CodeRepetEval and HumanEval+: $CODEMASK_DATA
CONFIGS = ("greedy", "hf-rep1.2", "t0.8", "rpg")


@dataclass
class Sample:
    prompt: str
    text: str
    tokens: int
    ended: bool
    seconds: float
    rpg_cpu_s: float = 0.0


def generate(model: Any, tokenizer: Any, config: str, prompt: str, max_new_tokens: int) -> Sample:
    """One completion of ``prompt`` under ``config``."""
    started = time.perf_counter()
    if config == "hf-rep1.2":
        ids = tokenizer(prompt, return_tensors="pt")
        with torch.inference_mode():
            out = model.generate(**ids, max_new_tokens=max_new_tokens, do_sample=False, repetition_penalty=1.2,
                                 pad_token_id=tokenizer.eos_token_id)
        new = out[0, ids["input_ids"].shape[1]:].tolist()
        stops = set(model.generation_config.eos_token_id if isinstance(model.generation_config.eos_token_id, list)
                    else [model.generation_config.eos_token_id])
        ended = bool(new) and new[-1] in stops
        new = new[:-1] if ended else new
        return Sample(prompt, tokenizer.decode(new), len(new), ended, time.perf_counter() - started)
    kwargs: dict[str, Any] = {"sampling": Sampling(temperature=0.8, seed=0)} if config == "t0.8" else {}
    if config == "rpg":
        kwargs["repetition"] = RPG()
    elif config.startswith("rpg@"):
        kwargs["repetition"] = RPG(penalty=float(config.removeprefix("rpg@")))
    result = constrained_generate(model, tokenizer, prompt, max_new_tokens=max_new_tokens, **kwargs)
    return Sample(prompt, result.text, len(result.token_ids), result.finish_reason == "stop",
                  time.perf_counter() - started, result.stats.repetition.analysis_time_s)


def coderepeteval_prompts(count: int, stride: int, offset: int = 0) -> list[str]:
    distinct: list[str] = []
    for line in (DATA / "coderepeteval" / "CodeGenerationBenchmarks.jsonl").read_text().splitlines():
        prompt = json.loads(line)["prompt"]
        if prompt not in distinct:
            distinct.append(prompt)
    return distinct[offset::stride][:count]


def humaneval_tasks(count: int) -> list[dict[str, Any]]:
    with gzip.open(DATA / "humanevalplus" / "HumanEvalPlus.jsonl.gz", "rt") as f:
        tasks = [json.loads(line) for line in f]
    return tasks[:: max(1, len(tasks) // count)][:count] if count else []


def passes(task: dict[str, Any], completion: str, timeout_s: float = 10.0) -> bool:
    """Whether ``completion``, cut at the first HumanEval stop sequence, passes the task's base tests."""
    function = cut_at_stops(completion, HUMANEVAL_STOPS)
    program = f"{task['prompt']}{function}\n\n{task['test']}\n\ncheck({task['entry_point']})\n"
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(program)
    try:
        done = subprocess.run([sys.executable, f.name], capture_output=True, timeout=timeout_s)
        return done.returncode == 0
    except subprocess.TimeoutExpired:
        return False
    finally:
        os.unlink(f.name)


def code_metrics(prompts: list[str], completions: list[str]) -> dict[str, float]:
    """The paper's text metrics of each completion's code (up to a Markdown fence line, where a chat-tuned
    model starts explaining the code in prose: :func:`codemask.metrics.code_part`); TR-S and CCP of the
    whole completion as well (``*_raw``), since prose after the fence is text the model generated."""
    code = [metrics.code_part(c) for c in completions]
    return {
        "tr4_tokens": metrics.mean(metrics.tr_n(metrics.grammar_tokens(c), 4) for c in code),
        "tr4_units": metrics.mean(metrics.tr_n(metrics.unit_labels(c), 4) for c in code),
        "tr_s": metrics.mean(metrics.tr_s(c) for c in code),
        "tr_s_raw": metrics.mean(metrics.tr_s(c) for c in completions),
        "ccp": metrics.ccp(p + c for p, c in zip(prompts, code, strict=True)),
        "ccp_raw": metrics.ccp(p + c for p, c in zip(prompts, completions, strict=True)),
    }


def summarise(samples: list[Sample]) -> dict[str, Any]:
    tokens = sum(s.tokens for s in samples)
    return {
        "egp": sum(s.ended for s in samples) / len(samples),
        **code_metrics([s.prompt for s in samples], [s.text for s in samples]),
        "length": tokens / len(samples),
        "seconds": sum(s.seconds for s in samples) / len(samples),
        "rpg_us_per_step": 1e6 * sum(s.rpg_cpu_s for s in samples) / max(tokens, 1),
    }


def rescore(report: dict[str, Any]) -> None:
    """Recompute the text metrics of every stored output (after a metric changes), keeping the timings."""
    for entry in report["models"]:
        prompts = coderepeteval_prompts(entry["prompts"], entry["stride"], entry.get("offset", 0))
        for row in entry["configs"].values():
            row.update(code_metrics(prompts, [o["text"] for o in row["outputs"]]))


def run_model(name: str, args: argparse.Namespace) -> dict[str, Any]:
    prompts = coderepeteval_prompts(args.prompts, args.stride, args.offset)
    if not prompts:
        raise SystemExit(f"no CodeRepetEval prompt from index {args.offset} (there are fewer distinct prompts)")
    model, tokenizer = load_model(name), load_tokenizer(name)
    constrained_generate(model, tokenizer, "def f():", max_new_tokens=2, repetition=RPG())  # first-call costs
    tasks = humaneval_tasks(args.humaneval)
    report: dict[str, Any] = {"model": name, "prompts": len(prompts), "stride": args.stride, "offset": args.offset,
                              "humaneval": len(tasks), "max_new_tokens": args.max_new_tokens, "configs": {}}
    for config in args.configs:
        samples = [generate(model, tokenizer, config, p, args.max_new_tokens) for p in prompts]
        row = summarise(samples)
        row["outputs"] = [{"text": s.text, "ended": s.ended, "tokens": s.tokens} for s in samples]
        if tasks and config != "t0.8":
            done = [generate(model, tokenizer, config, t["prompt"], args.max_new_tokens) for t in tasks]
            row["pass@1"] = sum(passes(t, s.text) for t, s in zip(tasks, done, strict=True)) / len(tasks)
            row["humaneval_egp"] = sum(s.ended for s in done) / len(done)
        row["run"] = {"date": time.strftime("%Y-%m-%d"), "command": command_line()}
        report["configs"][config] = row
        print(name, config, {k: v for k, v in row.items() if k != "outputs"}, flush=True)
    return report


def command_line() -> str:
    return "benchmarks/.venv/bin/python " + " ".join(["benchmarks/repetition_eval.py", *sys.argv[1:]])


def merged(previous: dict[str, Any], fresh: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The models of ``fresh``, each with the configurations of its entry in the ``previous`` report that it did
    not run again (only where prompts and limits are the same), after the other models of ``previous``."""
    settings = ("prompts", "stride", "offset", "humaneval", "max_new_tokens")
    for entry in previous["models"]:
        for row in entry["configs"].values():
            row.setdefault("run", {"date": previous["date"], "command": previous["command"]})
    by_name = {entry["model"]: entry for entry in previous["models"]}
    for entry in fresh:
        old = by_name.get(entry["model"])
        if old is not None and all(old.get(k, 0) == entry[k] for k in settings):
            entry["configs"] = {c: entry["configs"].get(c, row) for c, row in old["configs"].items()} \
                | entry["configs"]
    names = {entry["model"] for entry in fresh}
    return [e for e in previous["models"] if e["model"] not in names] + fresh


def _which_prompts(entry: dict[str, Any]) -> str:
    start = f", from index {entry['offset']}" if entry.get("offset") else ""
    return f"every {entry['stride']}th distinct one{start}"


def markdown(report: dict[str, Any], name: str = "repetition_eval") -> str:
    runs = "; ".join(f"{e['model']}: {e['prompts']} CodeRepetEval prompts ({_which_prompts(e)}), "
                     f"{e['humaneval']} HumanEval+ tasks, at most {e['max_new_tokens']} new tokens"
                     for e in report["models"])
    lines = [
        f"### Repetition (`benchmarks/repetition_eval.py`)\n\n{report['machine']}, {report['date']}; {runs}; "
        f"`{report['command']}`{_earlier_rows(report)}. {_prompts_tr_s(report)} EGP: ended by end-of-sequence; "
        "TR-4, TR-S and CCP are "
        "measured on the completion's code, up to a Markdown fence line where a chat-tuned model starts explaining it "
        "in prose (TR-S whole and CCP whole: on the whole completion); TR-4: repeated 4-grams of the code's grammar "
        "tokens / statement units; TR-S: repeated lines; CCP: prompt + code compiles; pass@1 on the "
        f"HumanEval+ base tests (metrics in `codemask.metrics`; outputs in `benchmarks/results/{name}.json`).",
        "",
        "| model | decoding | EGP | TR-4 tokens | TR-4 units | TR-S | TR-S whole | CCP | CCP whole | pass@1 | tokens "
        "| s/sample | RPG µs/step |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for entry in report["models"]:
        for config, r in entry["configs"].items():
            pass_at_1 = f"{r['pass@1']:.0%}" if "pass@1" in r else "—"
            step = f"{r['rpg_us_per_step']:.0f}" if config.startswith("rpg") else "—"
            lines.append(f"| {entry['model']} | {config} | {r['egp']:.0%} | {r['tr4_tokens']:.1%} | "
                         f"{r['tr4_units']:.1%} | {r['tr_s']:.1%} | {r['tr_s_raw']:.1%} | {r['ccp']:.0%} | "
                         f"{r['ccp_raw']:.0%} | {pass_at_1} | "
                         f"{r['length']:.0f} | {r['seconds']:.1f} | {step} |")
    return "\n".join(lines)


def _prompts_tr_s(report: dict[str, Any]) -> str:
    """TR-S of the prompts themselves: CodeRepetEval's prompts repeat, which is why TR-S is measured on the
    completion alone (the paper's script measured prompt + sample)."""
    sets = dict.fromkeys((e["prompts"], e["stride"], e.get("offset", 0)) for e in report["models"])
    shares = [metrics.mean(metrics.tr_s(p) for p in coderepeteval_prompts(*key)) for key in sets]
    return "The prompts themselves: TR-S " + ", ".join(f"{share:.1%}" for share in shares) + "."


def _earlier_rows(report: dict[str, Any]) -> str:
    """Which rows were kept from earlier runs (``--merge``), grouped by the run that produced them."""
    runs: dict[tuple[str, str], list[str]] = {}
    for entry in report["models"]:
        for config, row in entry["configs"].items():
            run = row.get("run", {"date": report["date"], "command": report["command"]})
            if run["command"] != report["command"]:
                runs.setdefault((run["date"], run["command"]), []).append(f"{entry['model']} {config}")
    kept = "; ".join(f"{', '.join(rows)} from `{command}` ({date})" for (date, command), rows in runs.items())
    return f" (rows kept from earlier runs: {kept})" if kept else ""


def plot(report: dict[str, Any], path: Path) -> None:
    panels = [("egp", "EGP"), ("tr_s", "TR-S"), ("ccp", "CCP"), ("seconds", "seconds per sample")]
    configs = list(dict.fromkeys(c for entry in report["models"] for c in entry["configs"]))
    plot_model_panels(path, report["models"], configs, panels,
                      lambda entry, c, key: entry["configs"][c][key] if c in entry["configs"] else 0.0,
                      "CodeRepetEval subset (sizes in the table)", rotation=20)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="smollm2,qwen-coder")
    parser.add_argument("--prompts", type=int, default=24)
    parser.add_argument("--stride", type=int, default=20)
    parser.add_argument("--offset", type=int, default=0,
                        help="first distinct prompt taken (another offset: prompts held out from the default run)")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--humaneval", type=int, default=10)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--merge", action="store_true", help="keep other models' results from the last run")
    parser.add_argument("--configs", default=",".join(CONFIGS),
                        help="decodings to compare: greedy, hf-rep1.2, t0.8, rpg, rpg@λ (RPG with penalty λ)")
    parser.add_argument("--name", default="repetition_eval", help="results file name under benchmarks/results")
    parser.add_argument("--rescore", action="store_true",
                        help="generate nothing: recompute the text metrics of the outputs stored in --name's JSON")
    args = parser.parse_args()
    if args.offset < 0 or args.stride < 1 or args.prompts < 1:
        parser.error("--offset must be >= 0, --stride and --prompts >= 1")
    args.configs = args.configs.split(",")
    for config in args.configs:
        if config not in CONFIGS and not config.startswith("rpg@"):
            parser.error(f"unknown configuration {config!r}")
    if args.threads:
        torch.set_num_threads(args.threads)

    started = time.time()
    path = RESULTS / f"{args.name}.json"
    report: dict[str, Any]
    if args.rescore:
        if not path.exists():
            parser.error(f"--rescore: no results file {path}")
        report = json.loads(path.read_text())
        rescore(report)
        publish(args.name, report, markdown(report, args.name), plot)
        return
    fresh = [run_model(name, args) for name in args.models.split(",")]
    previous = json.loads(path.read_text()) if args.merge and path.exists() else {"models": []}
    report = {
        "machine": f"{platform.machine()} CPU, {torch.get_num_threads()} threads per process",
        "date": time.strftime("%Y-%m-%d"),
        "command": command_line(),
        "models": merged(previous, fresh),
        "wall_s": time.time() - started,
    }
    publish(args.name, report, markdown(report, args.name), plot)


if __name__ == "__main__":
    main()
