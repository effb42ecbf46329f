"""Serving throughput: the same 8 completions one after another, then from 4 and 8 concurrent clients.

``codemask serve`` decodes concurrent requests together (continuous batching: one forward pass per
step for every running request). This measures what that buys on this machine, over HTTP on
loopback, against ``transformers serve`` (the Hugging Face server, transformers 5.x) on the same model
folder and the same requests, with and without its own continuous batching:

- **Requests**: 8 completions whose prompts are the first lines of 8 standard library modules (the
  held-out files of ``serving_latency.py``), in two workloads: *short* prompts (up to 200 bytes, about
  50 tokens), where decoding dominates, and *file* prompts (up to 1,000 bytes, about 270 tokens), where
  the prompts' forward passes take a large share of a CPU's time; temperature 0 and a fixed
  ``max_tokens`` (64) that every request writes in full: vLLM's ``ignore_eos`` for codemask,
  ``generation_config: {"eos_token_id": []}`` for ``transformers serve`` (it refuses ``ignore_eos``).
  Every answer's ``usage.completion_tokens`` is checked to be ``max_tokens``.
- **Runs**: with 1 client (the 8 one after another), 4 and 8 clients (each sends its next request
  when its last one is answered); the wall time from the first request to the last answer gives
  tokens/s, and the 1-client time over the N-client time is the speed-up. The three runs are repeated
  ``--repeats`` times in turn (1, 4, 8, 1, 4, 8, ...) so that load from other work on the machine
  falls on all of them; the table gives the median and the range.
- **Servers**, one at a time, each warmed up by one untimed request: ``codemask`` (``--max-batch 8``),
  ``codemask`` with ``language: "python"`` on every request (a grammar mask per row and step),
  ``transformers serve`` (``--no-continuous-batching``: one ``generate`` per request) and
  ``transformers serve --continuous-batching`` (paged attention).

Usage: .venv/bin/python benchmarks/serving_throughput.py [--models smollm2,qwen-coder] [--repeats 2]
       [--workloads short,file] [--max-tokens 64] [--servers codemask,codemask-python,transformers,transformers-cb]
Writes ``benchmarks/results/serving_throughput.{json,md,png}``.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from publish import publish
from servers import Server, codemask_command, complete, free_port, machine, running, transformers_command

MODELS = {"smollm2": "SmolLM2-135M", "qwen-coder": "Qwen2.5-Coder-0.5B"}
CLIENTS = (1, 4, 8)
WORKLOADS = {"short": 200, "file": 1000}  # the prompts' size in bytes, at most
LOGS = Path(tempfile.gettempdir()) / "codemask-serving-logs"


def prompts(count: int, size: int = 1000) -> list[str]:
    """The first lines, up to about ``size`` bytes, of ``count`` held-out standard library modules."""
    import random
    import sysconfig

    from serving_latency import held_out_files

    files = held_out_files(Path(sysconfig.get_paths()["stdlib"]))
    random.Random(0).shuffle(files)
    out = []
    for path in files[:count]:
        text, cut = path.read_text(encoding="utf-8"), 0
        for line in text.splitlines(keepends=True):
            if cut + len(line) > size:
                break
            cut += len(line)
        out.append(text[:cut])
    return out


# -- the servers ----------------------------------------------------------------------------------

SERVERS: dict[str, tuple[str, Callable[[str, int], list[str]], dict[str, Any]]] = {
    # name: (label, command, what every request adds)
    "codemask": ("codemask serve", codemask_command, {"ignore_eos": True}),
    "codemask-python": ("codemask serve, language=python", codemask_command,
                        {"ignore_eos": True, "language": "python"}),
    "transformers": ("transformers serve", lambda m, p: transformers_command(m, p, continuous_batching=False),
                     {"generation_config": '{"eos_token_id": []}'}),
    "transformers-cb": ("transformers serve --continuous-batching",
                        lambda m, p: transformers_command(m, p, continuous_batching=True),
                        {"generation_config": '{"eos_token_id": []}'}),
}


def served_model(server: str, model: str) -> str:
    """The ``model`` field the server expects: codemask names it, transformers serve wants its folder."""
    from codemask.assets import model_dir

    return model if server.startswith("codemask") else str(model_dir(model))


def run_workload(model: str, workload: str, args: argparse.Namespace) -> dict[str, Any]:
    """Every server on one model and one workload's prompts."""
    from codemask.assets import load_tokenizer

    texts = prompts(args.requests, WORKLOADS[workload])
    tokenizer = load_tokenizer(model)
    lengths = sorted(len(tokenizer.encode(text)) for text in texts)
    return {"model": MODELS[model], "workload": workload, "prompt_tokens": lengths[len(lengths) // 2],
            "prompt_token_counts": lengths,
            "servers": [run_server(server, model, texts, args.max_tokens, args.repeats)
                        for server in args.servers.split(",")]}


def run_server(server: str, model: str, texts: list[str], max_tokens: int, repeats: int) -> dict[str, Any]:
    label, command, extra = SERVERS[server]
    port = free_port()
    bodies = [{"prompt": text, "max_tokens": max_tokens, "temperature": 0, **extra} for text in texts]
    try:
        with running(command(model, port), port, served_model(server, model),
                     LOGS / f"serving_throughput_{server}_{model}.log") as live:
            check(live, bodies[0], max_tokens)  # warm-up, untimed
            runs: dict[int, list[dict[str, float]]] = {clients: [] for clients in CLIENTS}
            for repeat in range(repeats):
                for clients in CLIENTS:
                    runs[clients].append(timed(live, bodies, clients, max_tokens))
                    print(f"  {server} {model} repeat {repeat + 1} clients {clients}: "
                          f"{runs[clients][-1]['wall_s']:.1f} s", file=sys.stderr, flush=True)
    except RuntimeError as error:
        return {"server": server, "label": label, "error": str(error)}
    return {"server": server, "label": label, "runs": {str(c): r for c, r in runs.items()},
            "summary": summarise(runs)}


def check(server: Server, body: dict[str, Any], max_tokens: int) -> None:
    with httpx.Client(timeout=900) as client:
        answer = complete(client, server, body)
    written = answer["usage"]["completion_tokens"]
    if written != max_tokens:
        raise RuntimeError(f"a request wrote {written} tokens, not max_tokens={max_tokens}: {answer}")


def timed(server: Server, bodies: list[dict[str, Any]], clients: int, max_tokens: int) -> dict[str, float]:
    """Every body answered, ``clients`` requests at a time; the wall time and the tokens written."""

    def send(body: dict[str, Any]) -> int:
        with httpx.Client(timeout=900) as client:
            return int(complete(client, server, body)["usage"]["completion_tokens"])

    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        written = list(pool.map(send, bodies))
    wall = time.perf_counter() - started
    if any(w != max_tokens for w in written):
        raise RuntimeError(f"the requests wrote {written} tokens, not {max_tokens} each")
    return {"wall_s": wall, "tokens": sum(written), "tokens_per_s": sum(written) / wall,
            "load_average": os.getloadavg()[0]}


def summarise(runs: dict[int, list[dict[str, float]]]) -> dict[str, Any]:
    """Per client count: the median tokens/s and its range, and the speed-up over 1 client (the
    ratio of wall times within each repeat, so that both come from the same stretch of load)."""
    out: dict[str, Any] = {}
    for clients, rows in runs.items():
        speedups = [one["wall_s"] / row["wall_s"] for one, row in zip(runs[1], rows, strict=True)]
        rates = [row["tokens_per_s"] for row in rows]
        out[str(clients)] = {"tokens_per_s": statistics.median(rates), "tokens_per_s_range": [min(rates), max(rates)],
                             "speedup": statistics.median(speedups), "speedup_range": [min(speedups), max(speedups)]}
    return out


# -- the report -----------------------------------------------------------------------------------


def markdown(report: dict[str, Any]) -> str:
    lines = ["### Serving throughput (`benchmarks/serving_throughput.py`)", "",
             f"{report['machine']}, load average {report['load_average_at_start'][0]} at the start, "
             f"{report['date']}; {report['requests']} requests of {report['max_tokens']} tokens each (temperature 0, "
             f"no early end), {report['repeats']} repeats; tokens/s: median (range) over the repeats; × 1 client: "
             f"the median speed-up (range); `{report['command']}`.", "",
             "| model | prompts | server | 1 client tok/s | 4 clients tok/s (× 1 client) "
             "| 8 clients tok/s (× 1 client) |",
             "|---|---|---|---:|---:|---:|"]
    for entry in report["models"]:
        head = f"| {entry['model']} | {entry['workload']} (~{entry['prompt_tokens']} tokens)"
        for result in entry["servers"]:
            if "error" in result:
                lines.append(f"{head} | {result['label']} | did not run: {result['error'][:300]} | | |")
                continue
            s = result["summary"]
            cells = [f"{s['1']['tokens_per_s']:.1f} ({s['1']['tokens_per_s_range'][0]:.1f}-"
                     f"{s['1']['tokens_per_s_range'][1]:.1f})"]
            for clients in ("4", "8"):
                c = s[clients]
                cells.append(f"{c['tokens_per_s']:.1f} (× {c['speedup']:.2f}, {c['speedup_range'][0]:.2f}-"
                             f"{c['speedup_range'][1]:.2f})")
            lines.append(f"{head} | {result['label']} | {' | '.join(cells)} |")
    return "\n".join(lines)


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(report["models"]), figsize=(4.5 * len(report["models"]), 3.8), squeeze=False)
    for ax, entry in zip(axes[0], report["models"], strict=True):
        for result in entry["servers"]:
            if "error" in result:
                continue
            s = result["summary"]
            ax.plot(CLIENTS, [s[str(c)]["tokens_per_s"] for c in CLIENTS], marker="o", label=result["label"])
        ax.set_title(f"{entry['model']}, {entry['workload']} prompts", fontsize=9)
        ax.set_xlabel("concurrent clients")
        ax.set_ylabel("tokens/s (median)")
        ax.set_xticks(CLIENTS)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="smollm2,qwen-coder")
    parser.add_argument("--servers", default=",".join(SERVERS))
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--requests", type=int, default=8)
    args = parser.parse_args()
    report: dict[str, Any] = {**machine(), "requests": args.requests, "max_tokens": args.max_tokens,
                              "repeats": args.repeats,
                              "command": ".venv/bin/python benchmarks/serving_throughput.py " + " ".join(sys.argv[1:])}
    report["models"] = []
    for model in args.models.split(","):
        for workload in args.workloads.split(","):
            report["models"].append(run_workload(model, workload, args))
            publish("serving_throughput", report, markdown(report), plot)  # what is done so far


if __name__ == "__main__":
    main()
