"""Where a new JSON Schema's time to first mask goes: codemask's compile split into phases, llguidance beside it.

Run in the benchmarks' own environment (``bash benchmarks/setup.sh``)::

    benchmarks/.venv/bin/python benchmarks/compile_phases.py                              # 4 per subset, seconds
    benchmarks/.venv/bin/python benchmarks/compile_phases.py --max-schemas-per-subset 1   # smoke test

The schemas, order, tokenizer (Llama-3) and engine adapters of ``jsonschema_coverage.py`` (same
``--max-schemas-per-subset`` and ``--seed``: the same sample). One process, single-threaded, after each
engine's warm-up compile and first mask of a trivial schema and ``gc.freeze()``; the two engines take
turns per schema (order rotated). Per schema, codemask (``mode="validate"``, positions classified as
matchers reach them) is compiled cold through the adapter's ``compile_schema``, with its compile time
split by wrapped timers (outermost calls only) into:

- ``front-end``: the schema to a grammar (`codemask.grammar.grammar.Grammar.from_json_schema`);
- ``optimize``: the grammar's rules rewritten (`optimize` as `codemask.engine.compiler` calls it);
- ``automata``: the rule automata and their network (`codemask.engine.compiler.build_rtn`);
- ``set-up``: the compiled grammar's parser core and mask computer (`CompiledGrammar.__post_init__`);
- ``gc``: the garbage collector's pauses during the compile (``gc.callbacks``);
- ``other``: the rest of the compile (the compiler's own set-up, keys, the adapter);

then ``first mask``: a new matcher and its first mask (``first_mask_seconds``, not instrumented).
llguidance (``grammar_from_json_schema`` + the first ``LLMatcher``) gives the reference time to first
mask (compile + first mask). A schema an engine fails to compile is recorded with its error class and
left out of that engine's figures.

Reports each phase's mean and median over every schema codemask compiled, over the *middle half*
(the middle 50% of those schemas ranked by codemask's time to first mask) and for the 5 schemas
codemask compiles slowest; and both engines' median time to first mask over the schemas both
compiled. Writes ``--out``/compile_phases.{json,md,png}.

``--pause-s`` idles before each timed compile: the longer wait between an engine's turns in a run
with more engines (``jsonschema_coverage.py`` with six engines), whose colder processor caches add
about a millisecond to every engine's compile on a shared 2-core machine.

Caveats: the wrappers add about a microsecond per call; everything runs in one process, so
process-wide caches (codemask's rule automata, interned strings) persist from schema to schema, as
they would in a server — a schema's figures depend a little on the schemas before it.
"""

from __future__ import annotations

import os

import one_thread  # noqa: F401  (before numpy, torch and the engines: one thread each, offline)

# isort: split

import argparse
import datetime
import gc
import inspect
import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from jsonschema_coverage import (
    TOKENIZER,
    WARMUP_SCHEMA,
    SchemaCase,
    SchemaEngine,
    build_adapters,
    first_mask_seconds,
    interleave,
    load_cases,
    load_tokenizer,
    sample_files,
    short_error,
)
from mask_speed import machine_info, relative, versions

ROOT = Path(__file__).resolve().parents[1]
ENGINE, PEER = "codemask", "llguidance"
TIMED = ("front-end", "optimize", "automata", "set-up", "gc")  # the wrapped parts of the compile
PHASES = (*TIMED, "other", "first mask")
SLOWEST = 5


class Timers:
    """Time spent inside the wrapped functions (outermost calls only, collector pauses taken out) and in
    collector pauses."""

    def __init__(self) -> None:
        self.ns = dict.fromkeys(TIMED, 0)
        self._active: str | None = None  # the outermost wrapped call under way
        self._gc_start = 0

    def wrap(self, part: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            if self._active is not None:  # (a call inside another wrapped one counts for the outer one)
                return function(*args, **kwargs)
            self._active = part
            start = time.perf_counter_ns()
            try:
                return function(*args, **kwargs)
            finally:
                self.ns[part] += time.perf_counter_ns() - start
                self._active = None
        return timed

    def on_gc(self, phase: str, _info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_start = time.perf_counter_ns()
        else:
            pause = time.perf_counter_ns() - self._gc_start
            self.ns["gc"] += pause
            if self._active is not None:  # (a pause is gc's, not the phase it interrupted: no double count)
                self.ns[self._active] -= pause


@contextmanager
def instrumented(timers: Timers) -> Iterator[None]:
    """codemask's compile phases wrapped with ``timers`` inside the block, restored after it."""
    from codemask.engine import compiler
    from codemask.grammar.grammar import Grammar

    targets = [(Grammar, "from_json_schema", "front-end"), (compiler, "optimize", "optimize"),
               (compiler, "build_rtn", "automata"), (compiler.CompiledGrammar, "__post_init__", "set-up")]
    originals = [(owner, name, inspect.getattr_static(owner, name)) for owner, name, _part in targets]
    gc.callbacks.append(timers.on_gc)
    try:
        for (owner, name, part), (_, _, raw) in zip(targets, originals, strict=True):
            if isinstance(raw, classmethod):  # (wrapped inside, so ``cls`` still binds)
                setattr(owner, name, classmethod(timers.wrap(part, raw.__func__)))
            else:
                setattr(owner, name, timers.wrap(part, raw))
        yield
    finally:
        gc.callbacks.remove(timers.on_gc)
        for owner, name, raw in originals:
            setattr(owner, name, raw)


# -- measuring -------------------------------------------------------------------------------------


def measure(adapter: SchemaEngine, schema: Any, phases: bool, pause_s: float) -> dict[str, Any]:
    """One cold compile and first mask of ``schema``, after ``pause_s`` seconds idle: seconds, and
    with ``phases`` codemask's split (µs); or the error that stopped it."""
    timers = Timers()
    time.sleep(pause_s)
    try:
        if phases:
            with instrumented(timers):
                compiled, seconds, _warnings = adapter.compile_schema(schema)
        else:
            compiled, seconds, _warnings = adapter.compile_schema(schema)
    except Exception as exc:
        return {"status": adapter.classify(exc), "error_class": type(exc).__name__, "error": short_error(exc)}
    first_mask_s = first_mask_seconds(adapter, compiled)
    del compiled
    gc.collect()  # (this schema's garbage is not the next one's pause)
    if first_mask_s is None:
        return {"status": "error", "error_class": "FirstMaskFailed", "error": "the first mask raised"}
    row: dict[str, Any] = {"status": "ok", "compile_us": seconds * 1e6, "ttfm_us": (seconds + first_mask_s) * 1e6}
    if phases:
        parts = {part: ns / 1e3 for part, ns in timers.ns.items()}
        parts["other"] = row["compile_us"] - sum(parts.values())
        parts["first mask"] = first_mask_s * 1e6
        row["phases_us"] = parts
    return row


def run_cases(adapters: dict[str, SchemaEngine], cases: list[SchemaCase], pause_s: float) -> list[dict[str, Any]]:
    """Both engines on every schema, taking turns (order rotated per schema, as jsonschema_coverage.py)."""
    names = list(adapters)
    rows = []
    for index, case in enumerate(cases):
        order = names[index % len(names):] + names[: index % len(names)]
        outcomes = {name: measure(adapters[name], case.schema, name == ENGINE, pause_s) for name in order}
        rows.append({"schema": case.name, "subset": case.subset, "engines": {name: outcomes[name] for name in names}})
        log(f"[{index + 1}/{len(cases)}] {case.subset}/{case.name[:60]}: "
            + "  ".join(f"{name} {outcome_line(outcomes[name])}" for name in names))
    return rows


def outcome_line(outcome: dict[str, Any]) -> str:
    if outcome["status"] != "ok":
        return f"{outcome['status']} ({outcome['error_class']})"
    return f"{outcome['ttfm_us'] / 1e3:.1f} ms"


# -- summary ---------------------------------------------------------------------------------------


def ok(row: dict[str, Any], engine: str) -> dict[str, Any] | None:
    outcome = row["engines"].get(engine)
    return outcome if outcome is not None and outcome["status"] == "ok" else None


def phase_stats(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per phase (and compile, time to first mask): mean and median µs over codemask's ``rows``."""
    def stats(values: list[float]) -> dict[str, float]:
        return {"mean": float(np.mean(values)), "median": float(np.median(values))} if values else {}

    outcomes = [row["engines"][ENGINE] for row in rows]
    out = {phase: stats([o["phases_us"][phase] for o in outcomes]) for phase in PHASES}
    out["compile"] = stats([o["compile_us"] for o in outcomes])
    out["time to first mask"] = stats([o["ttfm_us"] for o in outcomes])
    peer = [o["ttfm_us"] for row in rows if (o := ok(row, PEER))]
    out[f"{PEER} time to first mask"] = {**stats(peer), "schemas": len(peer)}
    return {"schemas": len(rows), "phases_us": out}


def middle_half(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The middle 50% of ``rows`` ranked by codemask's time to first mask: the typical schema, neither
    the trivial ones nor the outliers."""
    ranked = sorted(rows, key=lambda row: row["engines"][ENGINE]["ttfm_us"])
    cut = len(ranked) // 4
    return ranked[cut:len(ranked) - cut]


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    compiled = [row for row in rows if ok(row, ENGINE)]
    slowest = sorted(compiled, key=lambda row: -row["engines"][ENGINE]["compile_us"])[:SLOWEST]
    both = [row for row in compiled if ok(row, PEER)]
    engine_p50 = float(np.median([row["engines"][ENGINE]["ttfm_us"] for row in both])) if both else None
    peer_p50 = float(np.median([row["engines"][PEER]["ttfm_us"] for row in both])) if both else None
    return {
        "all": phase_stats(compiled),
        "middle_half": phase_stats(middle_half(compiled)),
        "slowest": [{"schema": row["schema"], "subset": row["subset"], **row["engines"][ENGINE],
                     f"{PEER}_ttfm_us": (ok(row, PEER) or {}).get("ttfm_us")} for row in slowest],
        "ttfm_both_compiled": {"schemas": len(both), f"{ENGINE}_p50_us": engine_p50, f"{PEER}_p50_us": peer_p50,
                               "ratio": engine_p50 / peer_p50 if engine_p50 and peer_p50 else None},
        "failures": {name: {row["schema"]: row["engines"].get(name, {}).get("error_class", "unavailable")
                            for row in rows if not ok(row, name)} for name in (ENGINE, PEER)},
    }


# -- report ----------------------------------------------------------------------------------------


def us(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f}"


def stats_table(summary: dict[str, Any]) -> str:
    """One row per phase: mean · median µs over all compiled schemas and over the middle half."""
    groups = {"all compiled": summary["all"], "middle half": summary["middle_half"]}
    lines = ["| phase | " + " | ".join(f"{g} ({s['schemas']}): mean · median µs" for g, s in groups.items()) + " |",
             "|---|" + "---:|" * len(groups)]
    for phase in summary["all"]["phases_us"]:
        cells = [f"{us(s['phases_us'][phase].get('mean'))} · {us(s['phases_us'][phase].get('median'))}"
                 for s in groups.values()]
        lines.append(f"| {phase} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def slowest_table(summary: dict[str, Any]) -> str:
    lines = [f"| slowest compiles | {' | '.join(PHASES)} | compile | time to first mask | {PEER} |",
             "|---|" + "---:|" * (len(PHASES) + 3)]
    for s in summary["slowest"]:
        lines.append(f"| {s['schema']} | " + " | ".join(us(s["phases_us"][p]) for p in PHASES)
                     + f" | {us(s['compile_us'])} | {us(s['ttfm_us'])} | {us(s[f'{PEER}_ttfm_us'])} |")
    return "\n".join(lines)


def failures_line(summary: dict[str, Any]) -> str:
    parts = []
    for name, failed in summary["failures"].items():
        counts: dict[str, int] = {}
        for error_class in failed.values():
            counts[error_class] = counts.get(error_class, 0) + 1
        parts.append(f"{name} {len(failed)}" + (f" ({', '.join(f'{c} {n}' for c, n in counts.items())})"
                                                 if counts else ""))
    return "Not compiled, left out of that engine's figures: " + "; ".join(parts) + "."


def markdown(report: dict[str, Any]) -> str:
    machine, v, settings, summary = report["machine"], report["versions"], report["settings"], report["summary"]
    ttfm = summary["ttfm_both_compiled"]
    ratio = f"{ttfm['ratio']:.2f}×" if ttfm["ratio"] else "n/a"
    return (
        f"### Where a new schema's compile goes (`{report['command']}`)\n\n"
        f"{machine['cpu']}, {machine['cores']} cores, {report['created']}, {report['wall_s']:.0f} s; codemask "
        f"{v['codemask_git']}, llguidance {v['llguidance']}; Llama-3 tokenizer. Up to "
        f"{settings['max_schemas_per_subset']} schemas per jsonschemabench subset (seed {settings['seed']}, "
        f"the sample of `jsonschema_coverage.py`), {report['schemas']} in all; one process, one thread, "
        f"{settings['pause_s']:g} s idle before each timed compile, "
        "caches kept from schema to schema as in a server. codemask `mode=\"validate\"`, positions classified "
        "as matchers reach them; its compile split by timers around the front-end "
        "(`Grammar.from_json_schema`), `optimize`, the automata (`build_rtn`), the set-up "
        "(`CompiledGrammar.__post_init__`) and collector pauses; *first mask*: a new matcher and its first "
        "mask. *Middle half*: the middle 50% of the schemas by codemask's time to first mask.\n\n"
        f"{stats_table(summary)}\n\n"
        f"Time to first mask over the {ttfm['schemas']} schemas both compiled, median: codemask "
        f"{us(ttfm[f'{ENGINE}_p50_us'])} µs, llguidance {us(ttfm[f'{PEER}_p50_us'])} µs ({ratio}).\n\n"
        f"The {SLOWEST} slowest codemask compiles, µs:\n\n{slowest_table(summary)}\n\n"
        f"{failures_line(summary)}\n"
    )


def plot(summary: dict[str, Any], path: Path) -> None:
    """Stacked phase bars: the middle half's means (µs) above, the slowest schemas (ms) below, each
    with llguidance's time to first mask marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    middle = summary["middle_half"]["phases_us"]
    panels = [
        ("middle half, mean (µs)", 1.0, [("middle half", {p: middle[p].get("mean", 0.0) for p in PHASES},
                                          middle[f"{PEER} time to first mask"].get("mean"))]),
        (f"{SLOWEST} slowest compiles (ms)", 1e3,
         [(s["schema"][:40], s["phases_us"], s[f"{PEER}_ttfm_us"]) for s in summary["slowest"]]),
    ]
    fig, axes = plt.subplots(2, 1, figsize=(10, 6), height_ratios=(1, max(len(summary["slowest"]), 1)))
    colours = plt.get_cmap("tab10").colors
    for ax, (title, scale, bars) in zip(axes, panels, strict=True):
        for y, (_label, parts, peer) in enumerate(bars):
            left = 0.0
            for phase, colour in zip(PHASES, colours, strict=False):
                width = max(parts[phase], 0.0) / scale  # ("other" can dip below 0 by timer noise)
                ax.barh(y, width, left=left, color=colour, label=phase if y == 0 else None)
                left += width
            if peer is not None:
                ax.plot(peer / scale, y, marker="D", color="black", linestyle="none", zorder=3,
                        label=f"{PEER} time to first mask" if y == 0 else None)
        ax.set_yticks(range(len(bars)), [b[0] for b in bars], fontsize=8)
        ax.invert_yaxis()
        ax.set_title(title, fontsize=10)
        ax.grid(axis="x", alpha=0.3)
    legend = {label: handle for ax in axes for handle, label in zip(*ax.get_legend_handles_labels(), strict=True)}
    fig.legend(legend.values(), legend.keys(), loc="lower center", ncol=len(legend), fontsize=8)
    fig.suptitle("codemask: where a new JSON Schema's time to first mask goes", fontsize=11)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


# -- driver ----------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--max-schemas-per-subset", type=int, default=4, help="seeded sample per subset (default 4)")
    p.add_argument("--seed", type=int, default=0, help="seed of the schema sample")
    p.add_argument("--pause-s", type=float, default=0.0,
                   help="seconds idle before each timed compile: a longer wait between an engine's turns, as "
                        "in a run with more engines, leaves the processor's caches colder (default 0)")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results", help="results folder")
    return p.parse_args(argv)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    torch.set_num_threads(1)
    started = time.time()
    tokenizer = load_tokenizer(TOKENIZER)
    cases = interleave(load_cases(sample_files(None, args.max_schemas_per_subset, args.seed), tokenizer))
    log(f"{len(cases)} schemas; warm-up schema {json.dumps(WARMUP_SCHEMA)}")
    adapters, setup = build_adapters([ENGINE, PEER], tokenizer, log)  # (each warmed: compile + first mask)
    if ENGINE not in adapters:
        raise SystemExit(f"{ENGINE} unavailable: {setup[ENGINE]}")
    gc.collect()
    gc.freeze()  # the vocabularies and warm-up state are never garbage: no collector walks over them
    try:
        rows = run_cases(adapters, cases, args.pause_s)
    finally:
        for adapter in adapters.values():
            adapter.close()
    shown = argv if argv is not None else sys.argv[1:]
    report = {
        "benchmark": "compile_phases",
        "command": " ".join(["benchmarks/.venv/bin/python benchmarks/compile_phases.py", *shown]),
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "wall_s": round(time.time() - started, 1),
        "machine": {**machine_info(), "loadavg": os.getloadavg()},
        "versions": versions(),
        "settings": {k: (relative(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "engine_setup": setup,
        "schemas": len(cases),
        "summary": summarise(rows),
        "per_schema": rows,
    }
    write_outputs(report, args.out)
    return 0


def write_outputs(report: dict[str, Any], out: Path) -> None:
    """JSON, markdown and plot under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    text = markdown(report)
    (out / "compile_phases.json").write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")
    (out / "compile_phases.md").write_text(text)
    plot(report["summary"], out / "compile_phases.png")
    print(text)
    log(f"wrote {relative(out)}/compile_phases.json, .md, .png in {report['wall_s']:.0f} s")


if __name__ == "__main__":
    sys.exit(main())
