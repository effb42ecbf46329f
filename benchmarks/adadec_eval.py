"""AdaDec vs greedy (and beam search) on HumanEval+ and MBPP: pass@1, pause rate, latency.

For each problem and mode the model writes one program with ``constrained_generate`` (greedy, or
``uncertainty=AdaDec()``; either with ``speculative="auto"`` as mode ``greedy+spec`` / ``adadec+spec``,
whose programs are those of the mode without it) or with ``model.generate(num_beams=3)`` (beam
search); the program runs in a subprocess with a time limit, no network (``unshare -n`` where
available) and a fresh temporary directory. HumanEval+: the function is completed from its prompt
(code completion, stopped at the next top-level statement); it passes when the task's base tests
pass and it returns what the canonical solution returns on every ``plus_input`` (``atol`` for
floats). MBPP (test split 11–510): the task statement and its tests in the chat template; the
first fenced code block of the answer runs with the tests.

τ is the model's calibrated threshold (``codemask calibrate-adadec``); ``--calibrate-tasks N``
learns it here from the first N MBPP *train* tasks (601–974) first, and ``--threshold`` overrides it.

Usage: .venv/bin/python benchmarks/adadec_eval.py --model qwen-coder --benchmark humaneval --limit 20
       --max-new-tokens 160 --modes greedy,adadec [--calibrate-tasks 60]
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
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from codemask import constrained_generate
from codemask.adadec import AdaDec, load_threshold, model_identity
from codemask.adadec.calibrate import calibrate, chat_prompt, mbpp_examples, mbpp_prompt
from codemask.assets import load_model, load_tokenizer
from publish import publish

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: tests.data_paths
from tests.data_paths import corpora_root

RESULTS = Path(__file__).resolve().parent / "results"
DATA = corpora_root()  # HumanEval+ and MBPP: $CODEMASK_DATA
HUMANEVAL_STOPS = ["\ndef ", "\nclass ", "\nif __name__", "\nprint(", "\n#", "\nassert ", "\n```"]
# MBPP answers are chat replies; only their first fenced block runs, so the reply may stop where a
# block closes (a fence on its own line; an opening one carries the language)
MBPP_STOPS = ["\n```\n"]

PLUS_CHECK = r'''
import math as _m
def _same(a, b, atol):
    if isinstance(a, float) or isinstance(b, float):
        try:
            return _m.isclose(a, b, rel_tol=1e-6, abs_tol=max(atol, 1e-9)) or (a != a and b != b)
        except TypeError:
            return False
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y, atol) for x, y in zip(a, b))
    return a == b
import copy as _copy
_ns = {}
exec(_REFERENCE, _ns)
for _args in _PLUS:
    _want = _ns[_ENTRY](*_copy.deepcopy(_args))
    _got = globals()[_ENTRY](*_copy.deepcopy(_args))
    assert _same(_got, _want, _ATOL), (_args, _got, _want)
'''


def humaneval_problems(limit: int) -> list[dict[str, Any]]:
    with gzip.open(DATA / "humanevalplus" / "HumanEvalPlus.jsonl.gz", "rt", encoding="utf-8") as f:
        problems = [json.loads(line) for line in f]
    return problems[:limit] if limit else problems


def mbpp_problems(limit: int) -> list[dict[str, Any]]:
    tasks = [json.loads(line) for line in (DATA / "mbpp" / "mbpp.jsonl").read_text(encoding="utf-8").splitlines()]
    tasks = [t for t in tasks if 11 <= t["task_id"] <= 510]
    return tasks[:limit] if limit else tasks


def prompt_of(benchmark: str, problem: dict[str, Any], tokenizer: Any) -> tuple[str, list[str]]:
    if benchmark == "humaneval":
        return problem["prompt"], HUMANEVAL_STOPS
    return chat_prompt(tokenizer, mbpp_prompt(problem["text"], problem["test_list"])), MBPP_STOPS


def program_of(benchmark: str, problem: dict[str, Any], completion: str) -> str:
    if benchmark == "humaneval":
        reference = problem["prompt"] + problem["canonical_solution"]
        plus = problem["plus_input"][:200]
        return (problem["prompt"] + completion + "\n\n" + problem["test"] + f"\ncheck({problem['entry_point']})\n"
                + f"_REFERENCE = {reference!r}\n_ENTRY = {problem['entry_point']!r}\n"
                + f"_ATOL = {float(problem.get('atol') or 0)!r}\n_PLUS = {plus!r}\n" + PLUS_CHECK)
    blocks = re.findall(r"```(?:python)?\n(.*?)(?:```|$)", completion, re.DOTALL)  # the stop cut the closing fence
    code = blocks[0] if blocks else completion
    return code + "\n\n" + "\n".join(problem.get("test_setup_code", "").splitlines()) + "\n" + \
        "\n".join(problem["test_list"]) + "\n"


COUNTED = ("steps", "pauses", "lookahead_tokens", "forward_passes", "time_s")  # summed per mode


def passes(program: str, timeout: float) -> bool:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "program.py"
        path.write_text(program, encoding="utf-8")
        command = [sys.executable, "-I", str(path)]
        if shutil.which("unshare") and subprocess.run(["unshare", "-rn", "true"], capture_output=True).returncode == 0:
            command = ["unshare", "-rn", *command]
        try:
            return subprocess.run(command, cwd=folder, capture_output=True, timeout=timeout).returncode == 0
        except subprocess.TimeoutExpired:
            return False


def cut_at_stops(text: str, stops: list[str]) -> str:
    """``text`` up to the first of ``stops`` (all of it if none occurs)."""
    return text[: min([text.find(s) for s in stops if s in text], default=len(text))]


def generate(mode: str, model: Any, tokenizer: Any, prompt: str, stops: list[str], max_new_tokens: int,
             threshold: float) -> tuple[str, dict[str, Any]]:
    started = time.perf_counter()
    if mode == "beam":
        ids = tokenizer(prompt, return_tensors="pt")
        with torch.inference_mode():
            out = model.generate(**ids, num_beams=3, do_sample=False, max_new_tokens=max_new_tokens,
                                 pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id,
                                 stop_strings=stops or None, tokenizer=tokenizer)
        text = tokenizer.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)
        steps = int(out.shape[1] - ids["input_ids"].shape[1])
        return cut_at_stops(text, stops), {"steps": steps, "pauses": 0, "lookahead_tokens": 0,
                                           "time_s": time.perf_counter() - started}
    decoding, _, speculation = mode.partition("+")  # "adadec+spec": AdaDec with speculative verification
    uncertainty = AdaDec(threshold=threshold) if decoding == "adadec" else None
    result = constrained_generate(model, tokenizer, prompt, max_new_tokens=max_new_tokens, stop=stops or None,
                                  uncertainty=uncertainty, speculative="auto" if speculation == "spec" else None)
    return result.text, {"steps": result.stats.steps, "pauses": result.stats.adadec.pauses,
                         "lookahead_tokens": result.stats.adadec.lookahead_tokens,
                         "lookahead_time_s": result.stats.adadec.lookahead_time_s,
                         "forward_passes": result.stats.forward_passes, "time_s": time.perf_counter() - started}


def markdown(report: dict[str, Any]) -> str:
    lines = ["### AdaDec vs greedy (`benchmarks/adadec_eval.py`)\n",
             f"{report['machine']}, {report['date']}; model {report['model']} (`{report['identity']}`), "
             f"τ = {report['threshold']:.3f} nats ({report['threshold_source']}); {report['subset']}; "
             f"max_new_tokens {report['max_new_tokens']}; command `{report['command']}`. "
             "Pause rate = pauses / decoding steps; latency = wall time per problem relative to greedy; "
             "passes / step = the generation's forward passes (rollouts not counted) per decoding step. "
             "Differences of one or two problems are noise.\n",
             "| benchmark | mode | pass@1 | solved | pause rate | lookahead tokens / step | passes / step "
             "| latency × greedy |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for bench, modes in report["results"].items():
        base = modes.get("greedy", {}).get("time_s")
        for mode, r in modes.items():
            ratio = f"{r['time_s'] / base:.2f}×" if base else "n/a"
            passes = f"{r['forward_passes'] / max(1, r['steps']):.2f}" if r.get("forward_passes") else "—"
            lines.append(f"| {bench} | {mode} | {r['pass@1']:.1%} | {r['solved']}/{r['problems']} | "
                         f"{r['pause_rate']:.1%} | {r['lookahead_per_step']:.2f} | {passes} | {ratio} |")
    return "\n".join(lines)


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.2))
    labels, scores, times = [], [], []
    for bench, modes in report["results"].items():
        base = modes.get("greedy", {}).get("time_s") or 1.0
        for mode, r in modes.items():
            labels.append(f"{bench}\n{mode}")
            scores.append(100 * r["pass@1"])
            times.append(r["time_s"] / base)
    left.bar(labels, scores, color="#4c72b0")
    left.set_ylabel("pass@1 (%)")
    right.bar(labels, times, color="#dd8452")
    right.set_ylabel("latency × greedy")
    fig.suptitle(f"AdaDec: {report['model']}, {report['subset']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def earlier_results(path: Path, setting: dict[str, Any]) -> dict[tuple[str, str, str], dict[str, Any]]:
    """Results an interrupted run with the same setting logged (``--resume``), by (benchmark, task, mode)."""
    if not path.exists():
        return {}
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {(r["benchmark"], r["task_id"], r["mode"]): r for r in records
            if all(r.get(k) == v for k, v in setting.items())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="qwen-coder")
    parser.add_argument("--benchmark", default="humaneval", help="humaneval, mbpp or both (comma-separated)")
    parser.add_argument("--limit", type=int, default=20, help="first N problems of each benchmark (0: all)")
    parser.add_argument("--max-new-tokens", type=int, default=160)
    parser.add_argument("--modes", default="greedy,adadec",
                        help="greedy, adadec, beam, greedy+spec, adadec+spec (+spec: speculative='auto')")
    parser.add_argument("--name", default="adadec_eval",
                        help="results file name under benchmarks/results")
    parser.add_argument("--threshold", type=float, help="τ in nats (default: the model's calibrated τ)")
    parser.add_argument("--calibrate-tasks", type=int, default=0, help="learn τ first on N MBPP train tasks")
    parser.add_argument("--timeout", type=float, default=20.0)
    parser.add_argument("--log", type=Path, help="append each problem's result to this JSONL file as it finishes")
    parser.add_argument("--resume", action="store_true",
                        help="take the results already in --log (same model, benchmark, mode, τ, token limit)")
    args = parser.parse_args()

    model, tokenizer = load_model(args.model), load_tokenizer(args.model)
    source = "given"
    threshold = args.threshold
    if threshold is None and args.calibrate_tasks:
        calibration = calibrate(model, tokenizer, mbpp_examples(DATA / "mbpp" / "mbpp.jsonl")[: args.calibrate_tasks])
        threshold = calibration.threshold
        source = (f"learned here on MBPP train tasks 601–{600 + args.calibrate_tasks}: held-out accuracy "
                  f"{calibration.heldout_accuracy:.3f}, teacher-forced pause rate {calibration.pause_rate:.1%}")
    if threshold is None:
        threshold = load_threshold(model)
        source = "calibrated, stored"
    if threshold is None:
        raise SystemExit("no threshold: pass --threshold or --calibrate-tasks")
    constrained_generate(model, tokenizer, "def f():", max_new_tokens=2)  # first-call costs
    setting = {"model": args.model, "threshold": threshold, "max_new_tokens": args.max_new_tokens}
    done = earlier_results(args.log, setting) if args.resume and args.log else {}
    modes = args.modes.split(",")
    results: dict[str, dict[str, Any]] = {}
    per_problem: list[dict[str, Any]] = []
    for bench in args.benchmark.split(","):
        problems = humaneval_problems(args.limit) if bench == "humaneval" else mbpp_problems(args.limit)
        totals = {m: {"solved": 0, "steps": 0, "pauses": 0, "lookahead_tokens": 0, "forward_passes": 0, "time_s": 0.0}
                  for m in modes}
        for problem in problems:
            prompt, stops = prompt_of(bench, problem, tokenizer)
            for mode in modes:
                record = done.get((bench, problem["task_id"], mode))
                if record is None:
                    text, stats = generate(mode, model, tokenizer, prompt, stops, args.max_new_tokens, threshold)
                    ok = passes(program_of(bench, problem, text), args.timeout)
                    if args.log:
                        with args.log.open("a") as handle:
                            handle.write(json.dumps({**setting, "benchmark": bench, "task_id": problem["task_id"],
                                                     "mode": mode, "passed": ok, "completion": text, **stats}) + "\n")
                else:
                    text, ok = record["completion"], record["passed"]
                    stats = {key: record.get(key, 0) for key in COUNTED}
                t = totals[mode]
                t["solved"] += ok
                for key in COUNTED:
                    t[key] += stats.get(key, 0)
                per_problem.append({"benchmark": bench, "task_id": problem["task_id"], "mode": mode, "passed": ok,
                                    **stats, "completion": text})
                print(f"{bench} {problem['task_id']} {mode}: {'pass' if ok else 'fail'} "
                      f"steps {stats['steps']} pauses {stats['pauses']} {stats['time_s']:.1f} s", flush=True)
        results[bench] = {m: {**t, "problems": len(problems), "pass@1": t["solved"] / max(1, len(problems)),
                              "pause_rate": t["pauses"] / max(1, t["steps"]),
                              "lookahead_per_step": t["lookahead_tokens"] / max(1, t["steps"])}
                          for m, t in totals.items()}
    subset = ", ".join(f"{b}: first {args.limit or 'all'} problems" for b in args.benchmark.split(","))
    report = {
        "model": args.model, "identity": model_identity(model),
        "machine": f"{platform.machine()} CPU, {torch.get_num_threads()} threads" if not torch.cuda.is_available()
        else torch.cuda.get_device_name(),
        "date": time.strftime("%Y-%m-%d"), "threshold": threshold, "threshold_source": source,
        "subset": subset, "max_new_tokens": args.max_new_tokens,
        "command": ".venv/bin/python benchmarks/adadec_eval.py " + " ".join(sys.argv[1:]),
        "results": results, "problems": per_problem,
    }
    publish(args.name, report, markdown(report), plot)


if __name__ == "__main__":
    main()
