"""Per-token mask time and compile time: codemask against XGrammar, llguidance and outlines-core.

Run in the benchmarks' own environment (``bash benchmarks/setup.sh`` creates it)::

    benchmarks/.venv/bin/python benchmarks/mask_speed.py                  # full run, ~10 minutes
    benchmarks/.venv/bin/python benchmarks/mask_speed.py --quick --engines xgrammar,llguidance

Workloads, the same token ids for every engine:

- ``json``: each engine's builtin JSON grammar (top-level object or array), fed the ``valid`` test
  instances of ``$CODEMASK_DATA/jsonschemabench`` that are objects or arrays, serialised compactly
  (``json.dumps(separators=(",", ":"), ensure_ascii=False)``), a seeded sample of ``--max-docs``.
- ``c``: llama.cpp's C GBNF (a small C subset) fed the functions in ``benchmarks/data/c_subset``,
  written within that subset and accepted by XGrammar and llguidance.

Per document: a fresh matcher, then per token: ``fill_mask`` (timed with ``perf_counter_ns``: the
per-token mask time), a check that the mask allows the token, ``accept``; after the last token one
more timed mask, which must allow EOS, and ``accept(EOS)``. Documents are interleaved across engines
(engine order rotated per document) so that machine noise hits all engines alike; ``--warmup-docs``
documents run first, untimed. Compile time: cold (fresh compiler, empty caches, in this process after
the engine's vocabulary set-up, which is reported separately) and cached (in-memory and on-disk, each
where the engine offers it). Time to first mask: a cold compile, a new matcher and its first mask,
``--compile-repeats`` times (p50 and p99 of those). Engines run single-threaded where they allow it
(``--threads``).

Correctness cross-check: a token refused by an engine, a token the mask forbids but ``accept`` takes,
and EOS refused at the end are reported per engine; documents one engine accepts and another refuses,
and steps where two context-free engines (same language) produce different masks, are reported as
disagreements, with examples. Results: ``--out``/mask_speed.json, mask_speed.png, mask_speed.md.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import platform
import random
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import one_thread  # noqa: F401  (before numpy, torch and the engines: one thread each, offline)

# isort: split

import numpy as np

from crosscheck import TokenTable, acceptance_disagreements, mask_disagreements
from engines import ENGINES, EngineAdapter, Unsupported, byte_level_token_bytes

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: tests.data_paths
from tests.data_paths import TEST_DATA, corpora_root

ROOT = Path(__file__).resolve().parents[1]
JSONSCHEMABENCH = corpora_root() / "jsonschemabench"
C_GRAMMAR = TEST_DATA / "grammars" / "gbnf" / "llama.cpp" / "c.gbnf"
C_CORPUS = ROOT / "benchmarks" / "data" / "c_subset"
CFG_ENGINES = ("codemask", "xgrammar", "llguidance")  # same language per workload: masks comparable
MAX_EXAMPLES = 8


@dataclass
class Workload:
    """A grammar and the documents fed through it."""

    name: str
    kind: str  # "json" (builtin JSON grammar) or "gbnf"
    grammar_text: str | None
    docs: list[str]
    warmup: list[str]


@dataclass
class DocRun:
    """One engine on one document."""

    times_ns: list[int]
    cpu_ns: list[int]  # the same steps in thread CPU time: immune to preemption by other processes
    new_matcher_ns: int
    accepted: bool  # every token accepted, EOS allowed by the last mask and accepted
    failure: str | None = None
    mask_forbade: list[int] = field(default_factory=list)  # steps whose token the mask forbade but accept took
    masks: np.ndarray | None = None


# -- documents -------------------------------------------------------------------------------------


def json_documents(max_docs: int, warmup: int, seed: int) -> tuple[list[str], list[str]]:
    """A seeded sample of the distinct object/array ``valid`` instances, and warm-up ones after it."""
    seen: set[str] = set()
    docs: list[str] = []
    for path in sorted(JSONSCHEMABENCH.glob("*.json")):
        for test in json.loads(path.read_text(encoding="utf-8")).get("tests", []):
            if test.get("valid") and isinstance(test.get("data"), dict | list):
                text = json.dumps(test["data"], separators=(",", ":"), ensure_ascii=False)
                if text not in seen:
                    seen.add(text)
                    docs.append(text)
    random.Random(seed).shuffle(docs)
    return docs[:max_docs], docs[max_docs:max_docs + warmup]


def c_documents(max_docs: int, warmup: int) -> tuple[list[str], list[str]]:
    """The C corpus: the last (at most two) files warm up, the others are measured.

    The grammar allows nothing after a function's closing brace, so trailing newlines go.
    """
    docs = [p.read_text(encoding="utf-8").rstrip("\n") for p in sorted(C_CORPUS.glob("*.c"))]
    held_out = min(warmup, 2)
    measured = docs[: len(docs) - held_out]
    return measured[:max_docs], docs[len(docs) - held_out:]


def load_workloads(names: list[str], max_docs: int, warmup: int, seed: int) -> list[Workload]:
    workloads = []
    for name in names:
        if name == "json":
            docs, warm = json_documents(max_docs, warmup, seed)
            workloads.append(Workload("json", "json", None, docs, warm))
        elif name == "c":
            docs, warm = c_documents(max_docs, warmup)
            workloads.append(Workload("c", "gbnf", C_GRAMMAR.read_text(encoding="utf-8"), docs, warm))
        else:
            raise SystemExit(f"unknown workload {name!r} (json, c)")
    return workloads


def load_tokenizer(name: str) -> Any:
    """A packaged tokenizer (installed by the project's ``scripts/setup.sh``), loaded offline."""
    from codemask.assets import load_tokenizer as load

    return load(name)


# -- measuring -------------------------------------------------------------------------------------


def run_document(adapter: EngineAdapter, compiled: Any, tokens: list[int], eos: int, keep_masks: bool) -> DocRun:
    """Feed one document token by token, timing every mask (the final one, which must allow EOS, too)."""
    import torch

    clock, cpu_clock = time.perf_counter_ns, time.thread_time_ns
    bitmask = torch.full((1, (adapter.vocab_size + 31) // 32), -1, dtype=torch.int32)
    row = bitmask.numpy()[0]
    masks = np.empty((len(tokens) + 1, row.shape[0]), dtype=np.int32) if keep_masks else None
    start = clock()
    matcher = adapter.new_matcher(compiled)
    run = DocRun([], [], clock() - start, False, masks=masks)
    fill, accept, times, cpu_times = adapter.fill_mask, adapter.accept, run.times_ns, run.cpu_ns
    for step, token in enumerate([*tokens, eos]):
        cpu_start = cpu_clock()
        start = clock()
        fill(matcher, bitmask)
        end = clock()
        cpu_times.append(cpu_clock() - cpu_start)
        times.append(end - start)
        if masks is not None:
            masks[step] = row
        allowed = (int(row[token >> 5]) >> (token & 31)) & 1
        if not accept(matcher, token):
            what = "EOS" if step == len(tokens) else f"token {step} ({token_repr(adapter.tokenizer, token)})"
            run.failure = f"refused {what}" + ("" if allowed else " (mask agrees)")
            run.masks = masks[: step + 1] if masks is not None else None
            return run
        if not allowed:
            run.mask_forbade.append(step)
    run.accepted = not run.mask_forbade
    if run.mask_forbade:
        first = run.mask_forbade[0]
        token = [*tokens, eos][first]
        run.failure = f"mask forbade {len(run.mask_forbade)} accepted token(s), first {first} " \
                      f"({token_repr(adapter.tokenizer, token)})"
    return run


def token_repr(tokenizer: Any, token: int) -> str:
    piece = tokenizer.convert_ids_to_tokens(token)
    if piece is None:
        return f"<unused id {token}>"
    try:
        return repr(byte_level_token_bytes(piece))[1:]
    except KeyError:
        return repr(piece)


def percentiles(times_ns: list[int]) -> dict[str, float] | None:
    if not times_ns:
        return None
    us = np.asarray(times_ns, dtype=np.float64) / 1e3
    return {"median": float(np.median(us)), "p99": float(np.percentile(us, 99)), "max": float(us.max()),
            "mean": float(us.mean())}


@dataclass
class EngineWorkload:
    """What one engine did on one workload with one tokenizer."""

    engine: str
    status: str = "ok"  # ok | n/a | error
    reason: str | None = None
    compiled: Any = None
    compile_cold_s: float | None = None
    compiles_s: list[float] = field(default_factory=list)  # every cold compile of the repeats
    first_masks_s: list[float] = field(default_factory=list)  # the new matcher and first mask after each
    cached: dict[str, float | None] = field(default_factory=dict)
    runs: dict[int, DocRun] = field(default_factory=dict)


def first_mask(adapter: EngineAdapter, compiled: Any) -> float:
    """Seconds for a new matcher and its first mask (after a compile: the rest of the time to first mask)."""
    import torch

    bitmask = torch.full((1, (adapter.vocab_size + 31) // 32), -1, dtype=torch.int32)
    start = time.perf_counter_ns()
    adapter.fill_mask(adapter.new_matcher(compiled), bitmask)
    return (time.perf_counter_ns() - start) / 1e9


def cold_compiles(adapter: EngineAdapter, workload: Workload, repeats: int, result: EngineWorkload) -> None:
    """``repeats`` cold compiles, each followed by a new matcher's first mask; the first one's
    compiled grammar is the one measured."""
    for _ in range(repeats):
        compiled, seconds = adapter.compile(workload.kind, workload.grammar_text)
        result.compiles_s.append(seconds)
        result.first_masks_s.append(first_mask(adapter, compiled))
        if result.compiled is None:
            result.compiled, result.compile_cold_s = compiled, seconds


def measure_workload(adapters: dict[str, EngineAdapter], workload: Workload, tokenized: list[list[int]],
                     warmup: list[list[int]], eos: int, compare: bool, log: Any,
                     repeats: int = 1) -> dict[str, EngineWorkload]:
    results: dict[str, EngineWorkload] = {}
    for name, adapter in adapters.items():
        result = results[name] = EngineWorkload(name)
        try:
            cold_compiles(adapter, workload, repeats, result)
            result.cached = {k: v for k, v in adapter.compile_cached(workload.kind, workload.grammar_text).items()}
            for tokens in warmup:
                run_document(adapter, result.compiled, tokens, eos, keep_masks=False)
        except Unsupported as exc:
            result.status, result.reason = "n/a", str(exc)
        except Exception as exc:  # an engine under construction: report, keep measuring the others
            result.status, result.reason = "error", f"{type(exc).__name__}: {exc}"
            log(traceback.format_exc())
        log(f"  {name}: compile " + (f"{result.compile_cold_s:.3f} s cold, cached {fmt_cached(result.cached)}"
                                     if result.status == "ok" else f"{result.status}: {result.reason}"))
    active = [name for name, r in results.items() if r.status == "ok"]
    gc.collect()
    gc.freeze()  # what exists now is never garbage: keep collections during the timed loop short
    for index, tokens in enumerate(tokenized):
        order = active[index % len(active):] + active[: index % len(active)] if active else []
        for name in order:
            result = results[name]
            try:
                result.runs[index] = run_document(adapters[name], result.compiled, tokens, eos,
                                                  keep_masks=compare and name in CFG_ENGINES)
            except Exception as exc:
                result.status, result.reason = "error", f"doc {index}: {type(exc).__name__}: {exc}"
                log(traceback.format_exc())
                active.remove(name)
    gc.unfreeze()
    return results


def quantiles_ms(seconds: list[float]) -> dict[str, float] | None:
    """p50 and p99 in milliseconds (None without values)."""
    if not seconds:
        return None
    ms = np.asarray(seconds, dtype=np.float64) * 1e3
    return {"p50": float(np.percentile(ms, 50)), "p99": float(np.percentile(ms, 99))}


def fmt_cached(cached: dict[str, float | None]) -> str:
    parts = [f"{k} {v * 1e3:.2f} ms" for k, v in cached.items() if v is not None]
    return ", ".join(parts) if parts else "n/a"


# -- reporting -----------------------------------------------------------------------------------


def slowest_steps(runs: dict[int, DocRun], tokenized: list[list[int]], tokenizer: Any, n: int = 5,
                  ) -> list[dict[str, Any]]:
    """The slowest masks of an engine, with the text before them: where its p99 and max come from."""
    steps = [(t, doc, step) for doc, run in runs.items() for step, t in enumerate(run.times_ns)]
    steps.sort(reverse=True)
    return [{"us": round(t / 1e3, 1), "doc": doc, "step": step,
             "prefix_tail": tokenizer.decode(tokenized[doc][:step])[-50:]} for t, doc, step in steps[:n]]


# -- summarising -----------------------------------------------------------------------------------


def summarise(tokenizer_name: str, tokenizer: Any, workload: Workload, tokenized: list[list[int]],
              results: dict[str, EngineWorkload], adapters: dict[str, EngineAdapter]) -> list[dict[str, Any]]:
    """One row per engine; timing statistics over the common documents (see `common_documents`)."""
    common = common_documents(results, len(workload.docs))
    rows = []
    for name, result in results.items():
        row: dict[str, Any] = {"tokenizer": tokenizer_name, "vocab_size": len(tokenizer), "workload": workload.name,
                               "engine": name, "status": result.status, "reason": result.reason,
                               "vocab_setup_s": adapters[name].setup_seconds if name in adapters else None}
        if result.status == "ok":
            runs = result.runs
            all_times = [t for run in runs.values() for t in run.times_ns]
            mine = [i for i in common if i in runs and runs[i].accepted]
            common_times = [t for i in mine for t in runs[i].times_ns]
            failures = [{"doc": i, "failure": run.failure} for i, run in runs.items() if not run.accepted]
            ttfm = [c + f for c, f in zip(result.compiles_s, result.first_masks_s, strict=True)]
            row.update({
                "compile_cold_s": result.compile_cold_s,
                "compile_cold_ms": quantiles_ms(result.compiles_s),
                "ttfm_ms": quantiles_ms(ttfm),
                "compile_cached_memory_s": result.cached.get("memory"),
                "compile_cached_disk_s": result.cached.get("disk"),
                "new_matcher_us_median": float(np.median([r.new_matcher_ns for r in runs.values()]) / 1e3),
                "mask_us": percentiles(common_times),
                "mask_us_all_docs": percentiles(all_times),
                "mask_cpu_us": percentiles([t for i in mine for t in runs[i].cpu_ns]),
                "tokens": len(common_times),
                "tokens_all_docs": len(all_times),
                "docs": len(runs),
                "docs_common": len(mine),
                "docs_accepted": sum(run.accepted for run in runs.values()),
                "accept_rate": sum(run.accepted for run in runs.values()) / max(len(runs), 1),
                "failures": failures[:MAX_EXAMPLES],
                "failures_total": len(failures),
                "slowest_steps": slowest_steps(runs, tokenized, tokenizer),
            })
        rows.append(row)
    add_ratios(rows)
    return rows


def common_documents(results: dict[str, EngineWorkload], n_docs: int) -> list[int]:
    """The documents every measured context-free engine accepted, so all are timed on the same tokens.

    Those engines implement the same language, so a document one of them refuses is a bug in one of
    them, reported as a disagreement. outlines-core's bounded regex refuses deep documents by design:
    it is timed over the common documents it accepts (its row's ``docs_common``).
    """
    measured = [r for r in results.values() if r.status == "ok"]
    judges = [r for r in measured if r.engine in CFG_ENGINES] or measured
    return [i for i in range(n_docs) if judges and all(i in r.runs and r.runs[i].accepted for r in judges)]


def add_ratios(rows: list[dict[str, Any]]) -> None:
    """Each engine's median and p99 over the fastest peer's.

    The peers are every engine but codemask that was timed on all the common documents (not
    outlines-core where its bounded regex refused some: its times come from shallower documents).
    """
    timed = [r for r in rows if r["status"] == "ok" and r.get("mask_us")]
    full = max((r["docs_common"] for r in timed), default=0)
    peers = [r for r in timed if r["engine"] != "codemask" and r["docs_common"] == full]
    if not peers:
        return
    by_median = min(peers, key=lambda r: r["mask_us"]["median"])
    by_p99 = min(peers, key=lambda r: r["mask_us"]["p99"])
    for row in rows:
        if row["status"] == "ok" and row.get("mask_us"):
            row["fastest_peer_median"] = by_median["engine"]
            row["fastest_peer_p99"] = by_p99["engine"]
            row["median_vs_fastest_peer"] = row["mask_us"]["median"] / by_median["mask_us"]["median"]
            row["p99_vs_fastest_peer"] = row["mask_us"]["p99"] / by_p99["mask_us"]["p99"]


def markdown_table(rows: list[dict[str, Any]]) -> str:
    head = ("| tokenizer | workload | engine | compile cold p50 / p99 | first mask p50 / p99 | cached mem / disk "
            "| mask median µs | p99 µs | max µs | tokens | docs accepted | median / fastest peer "
            "| p99 / fastest peer |")
    lines = [head, "|" + "---|" * 13]
    for r in rows:
        if r["status"] != "ok":
            lines.append(f"| {r['tokenizer']} | {r['workload']} | {r['engine']} | {r['status']}: "
                         f"{(r['reason'] or '').splitlines()[0][:90]} |  |  |  |  |  |  |  |  |  |")
            continue
        m = r["mask_us"] or {"median": float("nan"), "p99": float("nan"), "max": float("nan")}
        cached = " / ".join(fmt_seconds(r[k]) for k in ("compile_cached_memory_s", "compile_cached_disk_s"))
        compiles, ttfm = (" / ".join(fmt_seconds(q[k] / 1e3) if q else "n/a" for k in ("p50", "p99"))
                          for q in (r.get("compile_cold_ms"), r.get("ttfm_ms")))
        lines.append(
            f"| {r['tokenizer']} | {r['workload']} | {r['engine']} | {compiles} | {ttfm} | {cached} "
            f"| {m['median']:.1f} | {m['p99']:.1f} | {m['max']:.0f} | {r['tokens']} "
            f"| {r['docs_accepted']}/{r['docs']} | {fmt_ratio(r.get('median_vs_fastest_peer'))} "
            f"| {fmt_ratio(r.get('p99_vs_fastest_peer'))} |")
    return "\n".join(lines)


def fmt_seconds(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.2f} s" if value >= 1 else f"{value * 1e3:.1f} ms" if value >= 1e-3 else f"{value * 1e6:.0f} µs"


def fmt_ratio(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}×"


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """Median and p99 mask time per engine, one panel per (tokenizer, workload), log scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = list(dict.fromkeys((r["tokenizer"], r["workload"]) for r in rows))
    engines = list(dict.fromkeys(r["engine"] for r in rows))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 4.2), squeeze=False)
    for ax, (tokenizer, workload) in zip(axes[0], panels, strict=True):
        x = np.arange(len(engines))
        stats = {r["engine"]: r.get("mask_us") for r in rows
                 if (r["tokenizer"], r["workload"]) == (tokenizer, workload)}
        measured = [v for s in stats.values() if s for v in (s["median"], s["p99"])]
        low, high = (min(measured) / 3, max(measured) * 3) if measured else (0.1, 10.0)
        for offset, key, color in ((-0.2, "median", "tab:blue"), (0.2, "p99", "tab:orange")):
            values = [stats[e][key] if stats.get(e) else np.nan for e in engines]
            ax.bar(x + offset, values, width=0.4, label=key, color=color)
        for i, engine in enumerate(engines):
            if not stats.get(engine):
                ax.text(i, low * 1.5, "n/a", ha="center", va="bottom", fontsize=8, color="gray")
        ax.set_yscale("log")
        ax.set_ylim(low, high)
        ax.set_xticks(x, engines, rotation=30, ha="right", fontsize=8)
        ax.set_title(f"{workload} · {tokenizer}", fontsize=10)
        ax.set_ylabel("mask time per token (µs)")
        ax.grid(axis="y", which="both", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle("Per-token mask time (lower is better)", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# -- driver ----------------------------------------------------------------------------------------


def machine_info() -> dict[str, Any]:
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()}


def versions() -> dict[str, str]:
    """Package versions, and the codemask commit measured (``-dirty``: with uncommitted changes)."""
    import subprocess
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    try:
        out["codemask_git"] = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"],
                                             capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        out["codemask_git"] = "unknown"
    for package in ("codemask", "xgrammar", "llguidance", "outlines-core", "torch", "transformers", "tokenizers"):
        try:
            out[package] = version(package)
        except PackageNotFoundError:
            out[package] = "not installed"
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokenizers", default=None, help="comma-separated packaged tokenizers (default llama3,qwen3)")
    p.add_argument("--engines", default=",".join(ENGINES), help="comma-separated: " + ", ".join(ENGINES))
    p.add_argument("--workloads", default="json,c", help="comma-separated: json, c")
    p.add_argument("--max-docs", type=int, default=None, help="JSON documents measured (default 300)")
    p.add_argument("--warmup-docs", type=int, default=None, help="untimed documents first (default 5)")
    p.add_argument("--seed", type=int, default=0, help="seed of the JSON document sample")
    p.add_argument("--threads", type=int, default=1, help="threads an engine may use to compile (default 1)")
    p.add_argument("--compile-repeats", type=int, default=5,
                   help="cold compiles (each with a first mask) per engine and workload (default 5)")
    p.add_argument("--no-compare-masks", action="store_true", help="skip the mask comparison between engines")
    p.add_argument("--quick", action="store_true", help="smoke test: llama3 only, 20 JSON docs, 5 C files")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results", help="results folder")
    args = p.parse_args(argv)
    args.tokenizers = (args.tokenizers or ("llama3" if args.quick else "llama3,qwen3")).split(",")
    args.max_docs = args.max_docs if args.max_docs is not None else 20 if args.quick else 300
    args.warmup_docs = args.warmup_docs if args.warmup_docs is not None else 2 if args.quick else 5
    args.engines = args.engines.split(",")
    unknown = [e for e in args.engines if e not in ENGINES]
    if unknown:
        p.error(f"unknown engines {unknown}; known: {', '.join(ENGINES)}")
    args.workloads = args.workloads.split(",")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    torch.set_num_threads(1)

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    started = time.time()
    load_before = os.getloadavg()
    workloads = load_workloads(args.workloads, args.max_docs, args.warmup_docs, args.seed)
    if args.quick:
        for w in workloads:
            if w.name == "c":
                w.docs = w.docs[:5]
    rows: list[dict[str, Any]] = []
    disagreements: list[dict[str, Any]] = []
    for tokenizer_name in args.tokenizers:
        tokenizer = load_tokenizer(tokenizer_name)
        vocab_size, eos = len(tokenizer), int(tokenizer.eos_token_id)
        log(f"[{tokenizer_name}] vocabulary {vocab_size}, EOS {eos}")
        adapters: dict[str, EngineAdapter] = {}
        unavailable: dict[str, str] = {}
        table: TokenTable | None = None
        for name in args.engines:
            try:
                adapters[name] = ENGINES[name](tokenizer, vocab_size, eos, threads=args.threads)
                log(f"  {name}: vocabulary set-up {adapters[name].setup_seconds:.2f} s")
            except Exception as exc:
                unavailable[name] = f"{type(exc).__name__}: {exc}"
                log(f"  {name}: unavailable: {unavailable[name]}")
        for workload in workloads:
            log(f"[{tokenizer_name}] {workload.name}: {len(workload.docs)} documents")
            tokenized = [tokenizer.encode(d, add_special_tokens=False) for d in workload.docs]
            warmup = [tokenizer.encode(d, add_special_tokens=False) for d in workload.warmup]
            results = measure_workload(adapters, workload, tokenized, warmup, eos, not args.no_compare_masks, log,
                                       args.compile_repeats)
            for name, reason in unavailable.items():
                results[name] = EngineWorkload(name, status="error", reason=f"unavailable: {reason}")
            ordered = {n: results[n] for n in args.engines if n in results}
            rows.extend(summarise(tokenizer_name, tokenizer, workload, tokenized, ordered, adapters))
            measured = {n: r.runs for n, r in ordered.items() if r.status == "ok"}
            for item in acceptance_disagreements(measured, workload.docs):
                disagreements.append({"tokenizer": tokenizer_name, "workload": workload.name, "kind": "acceptance",
                                      **item})
            if not args.no_compare_masks:
                table = table or TokenTable(tokenizer, vocab_size)
                comparable = {n: runs for n, runs in measured.items() if n in CFG_ENGINES}
                for item in mask_disagreements(comparable, tokenized, table, workload.name):
                    disagreements.append({"tokenizer": tokenizer_name, "workload": workload.name, "kind": "mask",
                                          **item})
            for row in rows[-len(ordered):]:
                log("  " + summary_line(row))
        for adapter in adapters.values():
            adapter.close()

    table = markdown_table(rows)
    report = {**report_header("mask_speed", args, started, load_before, versions()), "notes": NOTES,
              "results": rows, "disagreements": disagreements}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "mask_speed.json").write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    (args.out / "mask_speed.md").write_text(summary_section(report, table))
    plot(rows, args.out / "mask_speed.png")
    print(table)
    print_disagreements(disagreements)
    log(f"wrote {args.out}/mask_speed.json, .png, .md in {time.time() - started:.0f} s")
    return 0


NOTES = [
    "mask_cpu_us: the same steps in thread CPU time (time.thread_time_ns around the wall-clock window, so it "
    "includes ~0.2 µs of clock reads): a view of the tail without preemption by other processes.",
    "mask_us: per-token fill_mask time (perf_counter_ns) over the common documents, those every context-free "
    "engine (codemask, xgrammar, llguidance) accepted; outlines-core over the common documents it accepts "
    "(docs_common). mask_us_all_docs: over every timed step. The mask after the last token (which must "
    "allow EOS) is a step.",
    "ratios: over the fastest peer by median, and by p99; peers = engines other than codemask timed on all "
    "common documents.",
    "disagreements: documents accepted by some engines and refused by others; steps where two context-free "
    "engines' masks differ, raw and beyond the known language differences (crosscheck.py: added tokens; JSON "
    "'\\/' and DEL; the JSON top level).",
    "compile_cold_s: fresh compiler and empty caches in a process that already built the engine's vocabulary "
    "(vocab_setup_s); the first of --compile-repeats (compile_cold_ms: p50/p99 of all, codemask's process-wide "
    "rule automata and shared positions forgotten before each).",
    "ttfm_ms (time to first mask): a cold compile plus a new matcher and its first mask, p50/p99 over the repeats: "
    "what the user of a server waits for before the first token of a new grammar.",
    "cached: memory = the same compiler again; disk = a new compiler on the disk cache (codemask), "
    "deserialize_json of serialize_json (xgrammar), unpickling the Index (outlines-core).",
    "llguidance: no compiled-grammar object (compile = first LLMatcher construction, masks computed lazily), "
    "so no cache; its JSON grammar is the JSON Schema {\"type\": [\"object\", \"array\"]}.",
    "outlines-core: a regex/DFA index, JSON by its JSON-Schema regex (nesting unrolled to depth 3, whitespace "
    "[ ]?); no CFG, so the C workload is n/a.",
    "Single-threaded: OMP/RAYON threads 1, torch 1 thread, xgrammar max_threads = --threads.",
]


def report_header(name: str, args: argparse.Namespace, started: float, load_before: tuple[float, float, float],
                  engine_versions: dict[str, str]) -> dict[str, Any]:
    """What every results JSON of these benchmarks starts with: when, how long, where, what, how."""
    return {
        "benchmark": name,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "wall_s": round(time.time() - started, 1),
        "machine": {**machine_info(), "loadavg_before": load_before, "loadavg_after": os.getloadavg()},
        "versions": engine_versions,
        "settings": {k: (relative(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
    }


def relative(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def summary_line(row: dict[str, Any]) -> str:
    if row["status"] != "ok":
        return f"{row['engine']}: {row['status']} ({(row['reason'] or '').splitlines()[0][:120]})"
    m = row["mask_us"] or {}
    return (f"{row['engine']}: median {m.get('median', float('nan')):.1f} µs, p99 {m.get('p99', float('nan')):.1f}, "
            f"max {m.get('max', float('nan')):.0f} over {row['tokens']} tokens; accepted "
            f"{row['docs_accepted']}/{row['docs']}")


def summary_section(report: dict[str, Any], table: str) -> str:
    machine = report["machine"]
    v = report["versions"]
    return (
        f"### Per-token mask time and compile time (`benchmarks/mask_speed.py`)\n\n"
        f"{machine['cpu']}, {machine['cores']} cores, {report['created']}; codemask {v['codemask_git']}, "
        f"xgrammar {v['xgrammar']}, llguidance {v['llguidance']}, outlines-core {v['outlines-core']}. "
        f"JSON: builtin JSON grammar over {report['settings']['max_docs']} jsonschemabench instances; C: llama.cpp's "
        f"C GBNF over `benchmarks/data/c_subset`. Single-threaded; mask times are wall-clock per token over the "
        f"documents every context-free engine accepted (CPU-time percentiles, the slowest steps and the "
        f"cross-engine disagreements are in `benchmarks/results/mask_speed.json`; plot "
        f"`benchmarks/results/mask_speed.png`; method in `benchmarks/README.md`).\n\n{table}\n"
    )


def print_disagreements(disagreements: list[dict[str, Any]]) -> None:
    for d in disagreements:
        if d["kind"] == "acceptance":
            print(f"\n[{d['tokenizer']}/{d['workload']}] doc {d['doc']}: accepted by {d['accepted_by']}, "
                  f"refused by {d['refused_by']}")
        elif d["steps_differing_raw"]:
            print(f"\n[{d['tokenizer']}/{d['workload']}] masks {d['engines'][0]} vs {d['engines'][1]}: "
                  f"{d['steps_differing_raw']}/{d['steps_compared']} steps differ, {d['steps_differing']} beyond "
                  f"the known language differences" + (": e.g. " + json.dumps(d["examples"][:2], ensure_ascii=False)
                                                       if d["examples"] else ""))


if __name__ == "__main__":
    sys.exit(main())
