"""Language servers for the monitors: start-up to ready and warm request round trips, per server.

Writes the small project of ``tests/monitors`` to a temporary folder, starts each server through
codemask's client (``codemask.monitors.for_workspace``) and times ``textDocument/completion`` after
``inv.`` (a class from another module) and ``textDocument/signatureHelp`` in a call, each repeated
on a document that changes between requests, as during decoding. Prints a table and writes
``benchmarks/results/monitors_latency.json``. These are the figures behind the "Servers" section of the
monitors guide (docs/guides/monitors.md); ``benchmarks/monitors_eval.py`` measures the same in generation.

Usage: .venv/bin/python benchmarks/monitors_latency.py [--servers pyrefly,ty,jedi] [--repeat 20]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from codemask.monitors import completion_names, for_workspace, language_spec, shutdown_all

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def measure(project: Path, server: str, repeat: int) -> dict[str, Any]:
    """Start-up and round trips of one server on ``project``."""
    started = time.perf_counter()
    monitors = for_workspace(project, "main.py", server=server, timeout_s=30.0)
    ready_s = time.perf_counter() - started
    file = monitors[0].file
    prefix = (project / "main.py").read_text(encoding="utf-8")
    completion, signature = [], []
    for i in range(repeat):
        edited = prefix + f"step_{i} = {i}\n"  # a new document each time, synced incrementally
        t = time.perf_counter()
        answer = completion_names(file.request("textDocument/completion", edited + "inv."))
        completion.append(1000 * (time.perf_counter() - t))
        t = time.perf_counter()
        file.request("textDocument/signatureHelp", edited + "inv.restock_shelf(")
        signature.append(1000 * (time.perf_counter() - t))
    return {
        "server": server, "ready_s": ready_s, "first_completion_ms": completion[0],
        "completion_ms_p50": statistics.median(completion[1:]), "completion_ms_max": max(completion[1:]),
        "signature_ms_p50": statistics.median(signature[1:]),
        "members_found": sorted(n for n in (answer.names if answer else ()) if not n.startswith("__")),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--servers", default="pyrefly,ty,jedi")
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "tests" / "monitors"))
    from conftest import write_project

    spec = language_spec("python")
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for server in args.servers.split(","):
            if not spec.server(server).available():
                print(f"{server}: not installed ({spec.server(server).install})")
                continue
            rows.append(measure(write_project(Path(folder) / server), server, args.repeat))
        shutdown_all()
    print("| server | ready s | first completion ms | completion ms p50 / max | signatureHelp ms p50 |")
    print("|---|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['server']} | {r['ready_s']:.2f} | {r['first_completion_ms']:.1f} | "
              f"{r['completion_ms_p50']:.1f} / {r['completion_ms_max']:.1f} | {r['signature_ms_p50']:.1f} |")
    RESULTS.mkdir(exist_ok=True)
    report = {"date": time.strftime("%Y-%m-%d"), "load_average": os.getloadavg(), "repeat": args.repeat,
              "servers": rows}
    (RESULTS / "monitors_latency.json").write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
