"""JSON Schema coverage, correctness and speed per jsonschemabench subset: codemask against its peers.

Run in the benchmarks' own environment (``bash benchmarks/setup.sh`` creates it)::

    benchmarks/.venv/bin/python benchmarks/jsonschema_coverage.py                 # 4 per subset, ~14 min
    benchmarks/.venv/bin/python benchmarks/jsonschema_coverage.py --quick         # 1 schema per subset
    benchmarks/.venv/bin/python benchmarks/jsonschema_coverage.py --subsets 'Github_*,Kubernetes' \\
        --engines codemask,llguidance --max-schemas-per-subset 50

Data: ``$CODEMASK_DATA/jsonschemabench``, one file per schema with its ``tests`` (instances marked
``valid`` or not); the subset is the file name before ``---`` (``Github_easy``, ``Kubernetes``, …) or,
for files without one, the name without its trailing ``_<number>`` (``BFCL_simple``, ``JME``). Each
subset contributes a seeded sample of ``--max-schemas-per-subset`` schemas. Every engine gets the same
schemas and the same token ids (the Llama-3 tokenizer; instances serialised compactly with
``json.dumps(separators=(",", ":"), ensure_ascii=False)``).

Per engine and schema:

- **compile**: the schema to the engine's compiled form for the vocabulary, cold (codemask:
  ``Grammar.from_json_schema(mode="validate")`` + a fresh ``GrammarCompiler`` without disk cache, with
  its default policy: token masks classified position by position as matchers need them;
  codemask_precompute: ``precompute=True``, every position at compile time; codemask_generate:
  ``mode="generate"``, the grammar a server compiles per request (keys once, in schema order, objects
  closed), timed only: its language is not the schema's, so its instances are not run; XGrammar: a
  fresh ``GrammarCompiler`` without cache, ``compile_json_schema``; llguidance:
  ``grammar_from_json_schema`` + the first ``LLMatcher``, whose masks are then computed lazily;
  outlines-core: ``build_regex_from_schema`` + ``Index``). A schema counts as compiled when this
  finishes without an error within ``--compile-timeout`` seconds (wall clock, killed beyond) and
  within ``--max-rss-gib``.
- **time to first mask**: the compile plus a new matcher and its first mask, what a server's user
  waits for before the first token of a new schema (what MaskBench reports).
- **correctness**, over compiled schemas: each test instance is fed token by token through a fresh
  matcher, then EOS. *Accepted*: every token and EOS accepted; *rejected*: some token or EOS refused.
  The rates are valid instances accepted and invalid instances rejected.
- **mask time**: ``fill_mask`` per token (and the final mask, which must allow EOS), timed with
  ``perf_counter_ns`` on the valid instances the engine accepts, as ``mask_speed.py`` does it (same
  ``run_document``), after the first mask above; a mask that forbids a token the engine then
  accepts is reported.

Each engine runs in its own worker process, forked from this one after the engine's vocabulary is
built and warmed with a trivial schema, so one pathological schema (a hang, a crash, a memory blow-up)
costs that schema only: the worker is killed and forked again. Engines take turns per schema, the
order rotated, so machine noise hits all alike. codemask exceptions other than ``CodemaskError`` count
as compile failures and are listed under ``crashes`` in the JSON. Results: ``--out``/
jsonschema_coverage.json (per subset, per schema, errors), .md (tables) and .png (plot).
"""

from __future__ import annotations

import os

import one_thread  # noqa: F401  (before numpy, torch and the engines: one thread each, offline)

# isort: split

import argparse
import contextlib
import datetime
import fnmatch
import gc
import json
import multiprocessing
import random
import re
import sys
import time
import traceback
import warnings
from collections import Counter
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np

from engines import (
    LLGUIDANCE_JSON_OPTIONS,
    CodemaskAdapter,
    EngineAdapter,
    LLGuidanceAdapter,
    OutlinesCoreAdapter,
    XGrammarAdapter,
)
from mask_speed import fmt_seconds, load_tokenizer, machine_info, relative, run_document, versions

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: tests.data_paths
from tests.data_paths import corpora_root

ROOT = Path(__file__).resolve().parents[1]
JSONSCHEMABENCH = corpora_root() / "jsonschemabench"
TOKENIZER = "llama3"
WARMUP_SCHEMA: dict[str, Any] = {"type": "object", "properties": {"a": {"type": "string"}}}
MAX_ERROR_CHARS = 300
COMPILED = "ok"


# -- data ------------------------------------------------------------------------------------------


@dataclass
class Instance:
    """One test instance of a schema, as the token ids every engine is fed."""

    valid: bool
    tokens: list[int]


@dataclass
class SchemaCase:
    """One benchmark file: its schema and its tokenised test instances."""

    name: str
    subset: str
    schema: Any
    instances: list[Instance]


def subset_of(path: Path) -> str:
    """``Github_easy---o1.json`` -> ``Github_easy``; ``BFCL_simple_12.json`` -> ``BFCL_simple``."""
    if "---" in path.name:
        return path.name.split("---", 1)[0]
    return re.sub(r"_\d+$", "", path.stem)


def sample_files(subsets: list[str] | None, per_subset: int, seed: int) -> dict[str, list[Path]]:
    """A seeded sample of each selected subset's files (subsets in name order).

    The sample of one subset depends only on the seed and the subset, so adding subsets or engines
    to a run does not change which schemas the others get.
    """
    groups: dict[str, list[Path]] = {}
    for path in sorted(JSONSCHEMABENCH.glob("*.json")):
        groups.setdefault(subset_of(path), []).append(path)
    if subsets:
        groups = {s: files for s, files in groups.items() if any(fnmatch.fnmatchcase(s, p) for p in subsets)}
    return {subset: sorted(random.Random(f"{seed}/{subset}").sample(files, min(per_subset, len(files))))
            for subset, files in sorted(groups.items())}


def compact(value: Any) -> str:
    """The instance as generated text: compact JSON, non-ASCII characters kept."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def load_cases(files: dict[str, list[Path]], tokenizer: Any) -> list[SchemaCase]:
    """Read and tokenise the sampled files once, in this process, for every engine."""
    cases = []
    for subset, paths in files.items():
        for path in paths:
            doc = json.loads(path.read_text(encoding="utf-8"))
            instances = [Instance(bool(t["valid"]), tokenizer.encode(compact(t["data"]), add_special_tokens=False))
                         for t in doc.get("tests", [])]
            cases.append(SchemaCase(path.name, subset, doc["schema"], instances))
    return cases


def interleave(cases: list[SchemaCase]) -> list[SchemaCase]:
    """Round-robin over subsets: a run cut short (or slowed by load) still covers every subset evenly."""
    by_subset: dict[str, list[SchemaCase]] = {}
    for case in cases:
        by_subset.setdefault(case.subset, []).append(case)
    queues = list(by_subset.values())
    return [queue[i] for i in range(max(map(len, queues), default=0)) for queue in queues if i < len(queue)]


# -- engines: JSON Schema compile paths on top of engines.py's adapters ------------------------------


class SchemaEngine(EngineAdapter):
    """An engine adapter that can also compile a JSON Schema (the mask and accept calls are reused)."""

    runs_instances = True  # False: compile and first mask timed, the schema's instances not run

    def compile_schema(self, schema: Any) -> tuple[Any, float, list[str]]:
        """A cold compile of ``schema``: the compiled grammar, its seconds and the warnings it emitted."""
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            start = time.perf_counter_ns()
            compiled = self._compile_schema(schema)
            seconds = (time.perf_counter_ns() - start) / 1e9
        return compiled, seconds, [str(w.message)[:MAX_ERROR_CHARS] for w in caught]

    def _compile_schema(self, schema: Any) -> Any:
        raise NotImplementedError

    def classify(self, exc: BaseException) -> str:
        """``unsupported`` (a construct the engine declines), ``error`` (a reported failure) or ``crash``."""
        return "error"


class CodemaskSchema(SchemaEngine, CodemaskAdapter):
    """codemask, strict (the default): a construct it cannot compile exactly is refused, not widened."""

    precompute: bool | str = "auto"
    mode = "validate"

    def _compile_schema(self, schema: Any) -> Any:
        grammar = self._api.Grammar.from_json_schema(schema, mode=self.mode)
        compiler = self._api.GrammarCompiler(self.vocab, cache_dir=False, progress=False, precompute=self.precompute)
        return compiler.compile(grammar)

    def classify(self, exc: BaseException) -> str:
        from codemask.errors import CodemaskError, UnsupportedSchemaError

        if isinstance(exc, UnsupportedSchemaError):
            return "unsupported"
        return "error" if isinstance(exc, CodemaskError) else "crash"


class CodemaskGenerateSchema(CodemaskSchema):
    """codemask's generation grammar (``mode="generate"``), compiled and timed only."""

    mode = "generate"
    runs_instances = False


class CodemaskPrecomputeSchema(CodemaskSchema):
    """codemask classifying the vocabulary at every grammar position at compile time."""

    precompute = True


class XGrammarSchema(SchemaEngine, XGrammarAdapter):
    """XGrammar with JSON Schema semantics: ``strict_mode=False`` (undeclared properties and items
    allowed unless the schema forbids them), any whitespace. It keeps the schema's property order.
    """

    def _compile_schema(self, schema: Any) -> Any:
        compiler = self._xgr.GrammarCompiler(self.info, max_threads=self.threads, cache_enabled=False)
        return compiler.compile_json_schema(json.dumps(schema), any_whitespace=True, strict_mode=False)


class LLGuidanceSchema(SchemaEngine, LLGuidanceAdapter):
    """llguidance with its defaults (flexible whitespace, not lenient: unknown keywords are errors),
    plus general ``\\uXXXX`` escapes as in mask_speed.py. Compile = the first ``LLMatcher``.
    """

    def _compile_schema(self, schema: Any) -> Any:
        grammar = self._llg.LLMatcher.grammar_from_json_schema(schema, defaults=LLGUIDANCE_JSON_OPTIONS)
        self._matcher(grammar)  # raises Unsupported (an Exception) with llguidance's error
        return grammar


class OutlinesCoreSchema(SchemaEngine, OutlinesCoreAdapter):
    """outlines-core: the schema's regex (recursion unrolled to depth 3, whitespace ``[ ]?``) indexed
    over the vocabulary; a regular approximation, so deep or recursive instances can be refused.
    """

    def _compile_schema(self, schema: Any) -> Any:
        from outlines_core.json_schema import build_regex_from_schema

        return self._oc.Index(build_regex_from_schema(json.dumps(schema)), self.vocabulary)


SCHEMA_ENGINES: dict[str, type[SchemaEngine]] = {
    "codemask": CodemaskSchema, "codemask_generate": CodemaskGenerateSchema,
    "codemask_precompute": CodemaskPrecomputeSchema, "llguidance": LLGuidanceSchema, "xgrammar": XGrammarSchema,
    "outlines_core": OutlinesCoreSchema,
}


# -- the worker process (one per engine) -----------------------------------------------------------


def short_error(exc: BaseException) -> str:
    """``Type: first line of the message``, bounded: enough to group failures by cause."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:MAX_ERROR_CHARS]


def serve(adapter: SchemaEngine, conn: Connection) -> None:
    """Worker loop: for each schema, send the compile outcome, then (if compiled) the instance outcomes."""
    import torch

    torch.set_num_threads(1)
    gc.freeze()  # the engine and vocabulary inherited from the parent are never garbage
    while True:
        job = conn.recv()
        if job is None:
            return
        schema, instances = job
        try:
            compiled, seconds, caught = adapter.compile_schema(schema)
        except Exception as exc:
            status = adapter.classify(exc)
            conn.send({"status": status, "error": short_error(exc),
                       "traceback": traceback.format_exc()[-2000:] if status == "crash" else None})
            continue
        first_mask_s = first_mask_seconds(adapter, compiled)
        conn.send({"status": COMPILED, "seconds": seconds, "first_mask_s": first_mask_s, "warnings": caught,
                   "runs_instances": adapter.runs_instances})
        runs = [run_instance(adapter, compiled, instance) for instance in instances] if adapter.runs_instances else []
        # (freed before the reply: freed after it, a large grammar's memory went back while the next
        # engine was being timed on the other core)
        del compiled
        gc.collect()
        conn.send(runs)


def first_mask_seconds(adapter: SchemaEngine, compiled: Any) -> float | None:
    """A new matcher and its first mask, right after the compile (None if the engine fails there:
    its instances then report the failure)."""
    import torch

    bitmask = torch.full((1, (adapter.vocab_size + 31) // 32), -1, dtype=torch.int32)
    try:
        start = time.perf_counter_ns()
        adapter.fill_mask(adapter.new_matcher(compiled), bitmask)
        return (time.perf_counter_ns() - start) / 1e9
    except Exception:
        return None


def run_instance(adapter: SchemaEngine, compiled: Any, instance: Instance) -> dict[str, Any]:
    """Feed one instance (mask timed per token); accepted = every token and EOS accepted."""
    try:
        run = run_document(adapter, compiled, instance.tokens, adapter.eos_id, keep_masks=False)
    except Exception as exc:
        return {"valid": instance.valid, "accepted": False, "error": short_error(exc),
                "crash": adapter.classify(exc) == "crash", "traceback": traceback.format_exc()[-2000:]}
    refused = run.failure is not None and run.failure.startswith("refused")
    return {"valid": instance.valid, "accepted": not refused, "failure": run.failure if refused else None,
            "mask_forbade": len(run.mask_forbade),
            "times_ns": run.times_ns if instance.valid and not refused else None,
            "cpu_ns": run.cpu_ns if instance.valid and not refused else None}


class Worker:
    """A forked process serving one engine; killed and forked again when a schema overruns its limits."""

    def __init__(self, adapter: SchemaEngine, max_rss_bytes: int) -> None:
        self.adapter = adapter
        self.max_rss_bytes = max_rss_bytes
        self.restarts = 0
        self._start()

    def _start(self) -> None:
        context = multiprocessing.get_context("fork")
        self.conn, child_conn = context.Pipe()
        self.process = context.Process(target=serve, args=(self.adapter, child_conn), daemon=True,
                                       name=f"{self.adapter.name}-worker")
        self.process.start()
        child_conn.close()

    def restart(self) -> None:
        """Kill the worker (it may be stuck in native code) and fork a fresh one."""
        self.process.kill()
        self.process.join()
        self.conn.close()
        self.restarts += 1
        self._start()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.conn.send(None)
        self.process.join(timeout=5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()

    def _rss(self) -> int:
        try:
            with open(f"/proc/{self.process.pid}/statm") as statm:
                return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            return 0

    def receive(self, timeout: float) -> Any:
        """The worker's next message, or ``("timeout" | "memory" | "died", detail)``; the worker is
        restarted in those cases."""
        deadline = time.monotonic() + timeout
        while True:
            if self.conn.poll(0.02):
                try:
                    return self.conn.recv()
                except (EOFError, OSError):
                    break
            if not self.process.is_alive():
                break
            if self._rss() > self.max_rss_bytes:
                self.restart()
                return ("memory", f"over {self.max_rss_bytes / 2**30:.1f} GiB resident")
            if time.monotonic() > deadline:
                self.restart()
                return ("timeout", f"over {timeout:g} s")
        code = self.process.exitcode
        self.restart()
        return ("died", f"worker died (exit code {code})")

    def run(self, case: SchemaCase, compile_timeout: float, test_timeout: float) -> dict[str, Any]:
        """Compile one schema and run its instances: the outcome of this engine on this schema."""
        self.conn.send((case.schema, case.instances))
        reply = self.receive(compile_timeout)
        if isinstance(reply, tuple):
            return {"status": reply[0], "error": reply[1]}
        if reply["status"] != COMPILED:
            return reply
        tests = self.receive(test_timeout + 0.01 * sum(len(i.tokens) for i in case.instances))
        if isinstance(tests, tuple):
            return {**reply, "tests_failed": f"{tests[0]}: {tests[1]}", "instances": []}
        return {**reply, "instances": tests}


# -- running ---------------------------------------------------------------------------------------


def build_adapters(names: list[str], tokenizer: Any, log: Any) -> tuple[dict[str, SchemaEngine], dict[str, Any]]:
    """Each engine's vocabulary, built and warmed (a trivial schema compiled and its first mask) here, so
    forked workers inherit it."""
    adapters: dict[str, SchemaEngine] = {}
    setup: dict[str, Any] = {}
    vocab_size, eos = len(tokenizer), int(tokenizer.eos_token_id)
    for name in names:
        try:
            adapter = SCHEMA_ENGINES[name](tokenizer, vocab_size, eos, threads=1)
            warm, warm_s, _ = adapter.compile_schema(WARMUP_SCHEMA)
            first_mask_seconds(adapter, warm)  # (what a process does once: imports, lazily built tables)
        except Exception as exc:
            setup[name] = {"error": short_error(exc)}
            log(f"  {name}: unavailable: {setup[name]['error']}")
            continue
        adapters[name] = adapter
        setup[name] = {"vocab_setup_s": adapter.setup_seconds, "warmup_compile_s": warm_s}
        log(f"  {name}: vocabulary {adapter.setup_seconds:.2f} s, warm-up compile {warm_s:.3f} s")
    return adapters, setup


def run_cases(workers: dict[str, Worker], cases: list[SchemaCase], args: argparse.Namespace,
              log: Any) -> list[dict[str, Any]]:
    """Every engine on every schema, engines taking turns (order rotated per schema)."""
    records = []
    names = list(workers)
    started = time.monotonic()
    for index, case in enumerate(cases):
        order = names[index % len(names):] + names[: index % len(names)]
        outcomes = {name: workers[name].run(case, args.compile_timeout, args.test_timeout) for name in order}
        records.append({"schema": case.name, "subset": case.subset,
                        "valid": sum(i.valid for i in case.instances),
                        "invalid": sum(not i.valid for i in case.instances),
                        "engines": {name: outcomes[name] for name in names}})
        log(f"[{index + 1}/{len(cases)} {time.monotonic() - started:.0f}s] {case.subset}/{case.name[:60]}: "
            + "  ".join(f"{name} {outcome_line(outcomes[name])}" for name in names))
    return records


def outcome_line(outcome: dict[str, Any]) -> str:
    """``ok 12ms 2/2 1/1`` (compile, valid accepted, invalid rejected) or the failure kind."""
    if outcome["status"] != COMPILED:
        return outcome["status"]
    runs = outcome["instances"]
    if not outcome.get("runs_instances", True):
        return f"ok {outcome['seconds'] * 1e3:.0f}ms"
    valid = [r for r in runs if r["valid"]]
    invalid = [r for r in runs if not r["valid"]]
    return (f"ok {outcome['seconds'] * 1e3:.0f}ms {sum(r['accepted'] for r in valid)}/{len(valid)} "
            f"{sum(not r['accepted'] for r in invalid)}/{len(invalid)}" + ("!" if outcome.get("tests_failed") else ""))


# -- summarising -----------------------------------------------------------------------------------


@dataclass
class Tally:
    """What one engine did on a set of schemas (a subset, or all of them)."""

    schemas: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    compile_s: list[float] = field(default_factory=list)
    valid: int = 0
    valid_accepted: int = 0
    invalid: int = 0
    invalid_rejected: int = 0
    valid_all: int = 0  # valid instances of every schema, compiled or not
    mask_ns: list[int] = field(default_factory=list)
    mask_ns_common: list[int] = field(default_factory=list)
    mask_cpu_ns: list[int] = field(default_factory=list)  # the calling thread's CPU time: robust to load
    compile_s_common: list[float] = field(default_factory=list)
    ttfm_s: list[float] = field(default_factory=list)  # compile + a new matcher's first mask
    ttfm_s_common: list[float] = field(default_factory=list)
    mask_forbade: int = 0
    instance_errors: int = 0
    tests_failed: int = 0
    with_warnings: int = 0

    def add(self, record: dict[str, Any], outcome: dict[str, Any], common_schema: bool,
            common_instances: set[int]) -> None:
        self.schemas += 1
        self.statuses[outcome["status"]] += 1
        self.valid_all += record["valid"]
        if outcome["status"] != COMPILED:
            return
        self.compile_s.append(outcome["seconds"])
        ttfm = None if outcome.get("first_mask_s") is None else outcome["seconds"] + outcome["first_mask_s"]
        if ttfm is not None:
            self.ttfm_s.append(ttfm)
        if common_schema:
            self.compile_s_common.append(outcome["seconds"])
            if ttfm is not None:
                self.ttfm_s_common.append(ttfm)
        self.with_warnings += bool(outcome.get("warnings"))
        self.tests_failed += bool(outcome.get("tests_failed"))
        for i, run in enumerate(outcome["instances"]):
            self.instance_errors += "error" in run
            self.mask_forbade += bool(run.get("mask_forbade"))
            if run["valid"]:
                self.valid += 1
                self.valid_accepted += run["accepted"]
                self.mask_ns += run.get("times_ns") or []
                self.mask_cpu_ns += run.get("cpu_ns") or []
                if i in common_instances:
                    self.mask_ns_common += run["times_ns"]
            else:
                self.invalid += 1
                self.invalid_rejected += not run["accepted"]

    def summary(self) -> dict[str, Any]:
        compiled = self.statuses[COMPILED]
        return {
            "schemas": self.schemas,
            "compiled": compiled,
            "compile_rate": rate(compiled, self.schemas),
            "statuses": dict(self.statuses),
            "valid_instances": self.valid,
            "valid_accepted": self.valid_accepted,
            "valid_accept_rate": rate(self.valid_accepted, self.valid),
            "invalid_instances": self.invalid,
            "invalid_rejected": self.invalid_rejected,
            "invalid_reject_rate": rate(self.invalid_rejected, self.invalid),
            "valid_accepted_of_all_schemas": rate(self.valid_accepted, self.valid_all),
            "compile_ms": quantiles([s * 1e3 for s in self.compile_s], (50, 99)),
            "compile_ms_common": quantiles([s * 1e3 for s in self.compile_s_common], (50, 99)),
            "ttfm_ms": quantiles([s * 1e3 for s in self.ttfm_s], (50, 99)),
            "ttfm_ms_common": quantiles([s * 1e3 for s in self.ttfm_s_common], (50, 99)),
            "mask_us": quantiles([t / 1e3 for t in self.mask_ns], (50, 99, 100)),
            "mask_us_common": quantiles([t / 1e3 for t in self.mask_ns_common], (50, 99)),
            "mask_cpu_us": quantiles([t / 1e3 for t in self.mask_cpu_ns], (50, 99)),
            "mask_steps": len(self.mask_ns),
            "mask_steps_common": len(self.mask_ns_common),
            "instances_mask_forbade_accepted_token": self.mask_forbade,
            "instance_errors": self.instance_errors,
            "schemas_tests_cut_short": self.tests_failed,
            "schemas_with_warnings": self.with_warnings,
        }


def rate(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def quantiles(values: list[float], qs: tuple[int, ...]) -> dict[str, float] | None:
    """``{"p50": …, "p99": …}`` (None without values); p50 is the median."""
    if not values:
        return None
    array = np.asarray(values, dtype=np.float64)
    return {f"p{q}": float(np.percentile(array, q)) for q in qs}


def common_sets(record: dict[str, Any]) -> tuple[bool, set[int]]:
    """Whether every engine compiled the schema, and the valid instances every engine accepted:
    the like-for-like set behind the ``*_common`` timings."""
    outcomes = [o for o in record["engines"].values() if o.get("runs_instances", True)]
    if not outcomes or any(o["status"] != COMPILED or o.get("tests_failed") for o in outcomes):
        return False, set()
    per_engine = [{i for i, r in enumerate(o["instances"]) if r["valid"] and r["accepted"]} for o in outcomes]
    return True, set.intersection(*per_engine)


def summarise(records: list[dict[str, Any]], engines: list[str]) -> dict[str, Any]:
    """Per engine: totals and per-subset tallies."""
    totals = {name: Tally() for name in engines}
    subsets: dict[str, dict[str, Tally]] = {}
    for record in records:
        common_schema, common_instances = common_sets(record)
        per_subset = subsets.setdefault(record["subset"], {name: Tally() for name in engines})
        for name, outcome in record["engines"].items():
            for tally in (totals[name], per_subset[name]):
                tally.add(record, outcome, common_schema, common_instances)
    return {
        "totals": {name: tally.summary() for name, tally in totals.items()},
        "subsets": {subset: {name: t.summary() for name, t in tallies.items()}
                    for subset, tallies in sorted(subsets.items())},
    }


def crashes(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """codemask failures that are not a ``CodemaskError`` (exceptions, dead workers), and peer worker
    deaths: the schemas worth a bug report."""
    found = []
    for record in records:
        for name, outcome in record["engines"].items():
            where = {"engine": name, "schema": record["schema"], "subset": record["subset"]}
            if outcome["status"] == "crash" or (outcome["status"] == "died"):
                found.append({**where, "phase": "compile", "error": outcome["error"],
                              "traceback": outcome.get("traceback")})
            for i, run in enumerate(outcome.get("instances", [])):
                if run.get("crash"):
                    found.append({**where, "phase": f"instance {i}", "error": run["error"],
                                  "traceback": run.get("traceback")})
            if outcome.get("tests_failed", "").startswith("died"):
                found.append({**where, "phase": "instances", "error": outcome["tests_failed"], "traceback": None})
    return found


def top_errors(records: list[dict[str, Any]], engines: list[str], n: int = 12) -> dict[str, list[list[Any]]]:
    """The most frequent compile-failure messages per engine (numbers and quoted names folded)."""
    out = {}
    for name in engines:
        counts: Counter[str] = Counter()
        for record in records:
            outcome = record["engines"][name]
            if outcome["status"] != COMPILED:
                message = re.sub(r"'[^']*'|\"[^\"]*\"|\d+", "…", outcome.get("error") or "")[:160]
                counts[f"{outcome['status']}: {message}"] += 1
        out[name] = [[message, count] for message, count in counts.most_common(n)]
    return out


def slim(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per-schema records for the JSON: per-token times and tracebacks dropped, failures kept."""
    out = []
    for record in records:
        engines = {}
        for name, o in record["engines"].items():
            item: dict[str, Any] = {"status": o["status"]}
            if o["status"] == COMPILED:
                runs = o["instances"]
                item.update({
                    "compile_ms": round(o["seconds"] * 1e3, 3),
                    "first_mask_ms": None if o.get("first_mask_s") is None else round(o["first_mask_s"] * 1e3, 3),
                    "valid_accepted": sum(r["accepted"] for r in runs if r["valid"]),
                    "invalid_rejected": sum(not r["accepted"] for r in runs if not r["valid"]),
                    "wrong": [{"instance": i, "valid": r["valid"], "why": r.get("failure") or r.get("error")}
                              for i, r in enumerate(runs) if r["accepted"] != r["valid"]],
                    "mask_max_us": _slowest_mask_us(runs),
                })
                for key in ("warnings", "tests_failed"):
                    if o.get(key):
                        item[key] = o[key]
            else:
                item["error"] = o.get("error")
            engines[name] = item
        out.append({**{k: record[k] for k in ("schema", "subset", "valid", "invalid")}, "engines": engines})
    return out


def _slowest_mask_us(runs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The slowest mask over a schema's timed instances: µs, instance and token step (where the
    tail of the mask times comes from)."""
    timed = [(t, i, step) for i, r in enumerate(runs) for step, t in enumerate(r.get("times_ns") or [])]
    if not timed:
        return None
    t, instance, step = max(timed)
    return {"us": round(t / 1e3, 1), "instance": instance, "step": step}


# -- reporting -------------------------------------------------------------------------------------


def pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.0%}" if value in (0, 1) else f"{value:.1%}"


def ms(stats: dict[str, float] | None, key: str) -> str:
    return "—" if stats is None else fmt_seconds(stats[key] / 1e3)


def us(stats: dict[str, float] | None, key: str) -> str:
    return "—" if stats is None else f"{stats[key]:.1f}"


def failures_cell(s: dict[str, Any]) -> str:
    """Compile failures by kind: ``unsupported 3, error 1, timeout 2``."""
    kinds = {k: v for k, v in s["statuses"].items() if k != COMPILED}
    return ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())) or "—"


def totals_table(summary: dict[str, Any]) -> str:
    lines = ["| engine | schemas | compiled | valid accepted | invalid rejected | compile p50 | compile p99 "
             "| first mask p50 | first mask p99 | mask median µs | mask p99 µs | mask max µs | mask p99 µs CPU "
             "| common: compile p50 · mask median / p99 µs | compile failures |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for name, s in summary["totals"].items():
        checked = s["valid_instances"] + s["invalid_instances"] > 0
        lines.append(
            f"| {name} | {s['schemas']} | {pct(s['compile_rate'])} | "
            + (f"{pct(s['valid_accept_rate'])} ({s['valid_accepted']}/{s['valid_instances']}) | "
               f"{pct(s['invalid_reject_rate'])} ({s['invalid_rejected']}/{s['invalid_instances']}) | "
               if checked else "— | — | ")
            + f"{ms(s['compile_ms'], 'p50')} | {ms(s['compile_ms'], 'p99')} | {ms(s.get('ttfm_ms'), 'p50')} "
            f"| {ms(s.get('ttfm_ms'), 'p99')} | {us(s['mask_us'], 'p50')} | {us(s['mask_us'], 'p99')} "
            f"| {us(s['mask_us'], 'p100')} | {us(s.get('mask_cpu_us'), 'p99')} "
            f"| {ms(s['compile_ms_common'], 'p50')} · {us(s['mask_us_common'], 'p50')} / "
            f"{us(s['mask_us_common'], 'p99')} | {failures_cell(s)} |")
    return "\n".join(lines)


def head_to_head(records: list[dict[str, Any]], engine: str, peer: str) -> dict[str, int]:
    """Correctness of ``engine`` and ``peer`` on the schemas both compiled (their tests not cut short),
    from `slim` records: the like-for-like comparison behind "rejects at least as many invalid
    instances as the peer"."""
    out = dict.fromkeys(("schemas", "valid", "invalid", "engine_valid_accepted", "engine_invalid_rejected",
                         "peer_valid_accepted", "peer_invalid_rejected"), 0)
    for record in records:
        pair = [record["engines"].get(engine), record["engines"].get(peer)]
        if any(o is None or o["status"] != COMPILED or o.get("tests_failed") for o in pair):
            continue
        out["schemas"] += 1
        out["valid"] += record["valid"]
        out["invalid"] += record["invalid"]
        for who, outcome in zip(("engine", "peer"), pair, strict=True):
            out[f"{who}_valid_accepted"] += outcome["valid_accepted"]
            out[f"{who}_invalid_rejected"] += outcome["invalid_rejected"]
    return out


def head_to_head_table(records: list[dict[str, Any]], engines: list[str], peer: str = "llguidance") -> str:
    """One row per other engine: valid accepted and invalid rejected by it and by ``peer`` on the
    schemas both compiled."""
    lines = [f"| engine | schemas both compiled | valid accepted: engine · {peer} "
             f"| invalid rejected: engine · {peer} |", "|---|---:|---:|---:|"]
    for name in engines:
        if name == peer or not SCHEMA_ENGINES[name].runs_instances:
            continue
        h = head_to_head(records, name, peer)
        lines.append(f"| {name} | {h['schemas']} | {h['engine_valid_accepted']} · {h['peer_valid_accepted']} "
                     f"of {h['valid']} | {h['engine_invalid_rejected']} · {h['peer_invalid_rejected']} "
                     f"of {h['invalid']} |")
    return "\n".join(lines)


def subset_coverage_table(summary: dict[str, Any], engines: list[str]) -> str:
    """One row per subset, one cell per engine: compiled · valid accepted · invalid rejected."""
    lines = ["| subset | schemas | " + " | ".join(engines) + " |", "|---|---:|" + "---:|" * len(engines)]
    for subset, per_engine in summary["subsets"].items():
        cells = [f"{pct(s['compile_rate'])} · {pct(s['valid_accept_rate'])} · {pct(s['invalid_reject_rate'])}"
                 for s in (per_engine[name] for name in engines)]
        lines.append(f"| {subset} | {per_engine[engines[0]]['schemas']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def subset_full_table(summary: dict[str, Any]) -> str:
    lines = ["| subset | engine | schemas | compiled | valid accepted | invalid rejected | compile p50 "
             "| compile p99 | mask median µs | mask p99 µs | mask steps | compile failures |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for subset, per_engine in summary["subsets"].items():
        for name, s in per_engine.items():
            lines.append(
                f"| {subset} | {name} | {s['schemas']} | {pct(s['compile_rate'])} "
                f"| {pct(s['valid_accept_rate'])} ({s['valid_accepted']}/{s['valid_instances']}) "
                f"| {pct(s['invalid_reject_rate'])} ({s['invalid_rejected']}/{s['invalid_instances']}) "
                f"| {ms(s['compile_ms'], 'p50')} | {ms(s['compile_ms'], 'p99')} | {us(s['mask_us'], 'p50')} "
                f"| {us(s['mask_us'], 'p99')} | {s['mask_steps']} | {failures_cell(s)} |")
    return "\n".join(lines)


def summary_section(report: dict[str, Any]) -> str:
    """The summary: set-up line, totals, per-subset coverage, the plot."""
    machine, v, settings = report["machine"], report["versions"], report["settings"]
    engines = settings["engines"]
    return (
        "### JSON Schema coverage and correctness (`benchmarks/jsonschema_coverage.py`)\n\n"
        f"{machine['cpu']}, {machine['cores']} cores, {report['created']}, {report['wall_s']:.0f} s; codemask "
        f"{v['codemask_git']}, xgrammar {v['xgrammar']}, llguidance {v['llguidance']}, outlines-core "
        f"{v['outlines-core']}; Llama-3 tokenizer. Up to {settings['max_schemas_per_subset']} schemas per "
        f"jsonschemabench subset (seed {settings['seed']}), {report['schemas']} in all; compile limit "
        f"{settings['compile_timeout']:g} s. *Compiled*: no error within the limit; *valid accepted* / "
        "*invalid rejected*: the schema's test instances (compact JSON) fed token by token, then EOS, over "
        "the schemas the engine compiled; compile time cold, mask time per token on the valid instances "
        "it accepted (*common*: the schemas every engine compiled and the instances every engine "
        "accepted). Per-subset timings, per-schema results and failure messages: "
        "`benchmarks/results/jsonschema_coverage.{md,json}`.\n\n"
        f"{totals_table(report['summary'])}\n\n"
        + (f"Head to head with llguidance, on the schemas both compiled:\n\n"
           f"{head_to_head_table(report['per_schema'], engines)}\n\n" if "llguidance" in engines else "")
        + "Per subset, compiled · valid accepted · invalid rejected:\n\n"
        f"{subset_coverage_table(report['summary'], engines)}\n\n"
        "![JSON Schema coverage](benchmarks/results/jsonschema_coverage.png)\n"
    )


def markdown_report(report: dict[str, Any]) -> str:
    return (summary_section(report) + "\n#### Per subset and engine\n\n" + subset_full_table(report["summary"])
            + "\n\n#### Notes\n\n" + "\n".join(f"- {note}" for note in NOTES) + "\n")


def plot(summary: dict[str, Any], engines: list[str], path: Path) -> None:
    """Per subset: compile rate, valid accepted, invalid rejected (bars), compile p50 and mask median (log)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    subsets = list(summary["subsets"])
    panels = [("compile_rate", "compiled", False), ("valid_accept_rate", "valid accepted", False),
              ("invalid_reject_rate", "invalid rejected", False), ("compile_ms", "compile p50 (ms)", True),
              ("ttfm_ms", "first mask p50 (ms)", True), ("mask_us", "mask median (µs)", True)]
    fig, axes = plt.subplots(len(panels), 1, figsize=(max(10.0, 0.62 * len(subsets) + 2), 3.0 * len(panels)),
                             sharex=True)
    x = np.arange(len(subsets))
    width = 0.8 / max(len(engines), 1)
    for ax, (key, label, log_scale) in zip(axes, panels, strict=True):
        for j, name in enumerate(engines):
            values = [panel_value(summary["subsets"][s][name][key]) for s in subsets]
            ax.bar(x - 0.4 + width * (j + 0.5), values, width=width, label=name)
        ax.set_ylabel(label, fontsize=9)
        if log_scale:
            ax.set_yscale("log")
        else:
            ax.set_ylim(0, 1.05)
        ax.grid(axis="y", which="both", alpha=0.3)
    axes[-1].set_xticks(x, subsets, rotation=40, ha="right", fontsize=8)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=len(engines), fontsize=9, bbox_to_anchor=(0.5, 0.985))
    fig.suptitle("JSON Schema per jsonschemabench subset (Llama-3 tokenizer; rates higher, times lower is better)",
                 fontsize=11, y=0.998)
    fig.tight_layout(rect=(0, 0, 1, 0.975))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def panel_value(value: Any) -> float:
    """A rate, or the median of a timing dict; NaN (no bar) where there is nothing."""
    if value is None:
        return float("nan")
    return float(value["p50"]) if isinstance(value, dict) else float(value)


NOTES = [
    "Compile statuses: ok; unsupported (codemask's UnsupportedSchemaError: a construct it refuses rather than "
    "widen); error (any other reported error: invalid schema, a peer's exception or error state); crash "
    "(codemask: an exception that is not a CodemaskError); timeout (over --compile-timeout, wall clock: "
    "the worker is killed); memory (over --max-rss-gib resident); died (the worker process died).",
    "Correctness counts only the schemas the engine compiled; valid_accepted_of_all_schemas in the JSON "
    "counts the others as failures.",
    "codemask: strict Grammar.from_json_schema(mode='validate'), whitespace flexible, masks classified per "
    "position when first needed (codemask_precompute: all at compile time; codemask_generate: "
    "mode='generate', compile and first mask timed, instances not run); xgrammar: compile_json_schema with "
    "strict_mode=False (JSON Schema's default of allowing undeclared properties) and any_whitespace, so "
    "it keeps the declared property order; llguidance: grammar_from_json_schema with its defaults (flexible "
    "whitespace, not lenient) and general \\uXXXX escapes, compile = grammar + first LLMatcher (masks lazy, "
    "so its compile time moves work to the first masks); outlines-core: build_regex_from_schema "
    "(recursion depth 3, whitespace [ ]?) + Index.",
    "Compile time: cold, in a worker forked after the engine's vocabulary set-up and a warm-up compile of a "
    "trivial schema; p50/p99 over the schemas the engine compiled (common: those every engine compiled). "
    "First mask (time to first mask): the compile plus a new matcher and its first fill_mask, wall clock.",
    "Mask time: fill_mask per token (and the final EOS mask) on the valid instances the engine accepted, "
    "wall clock; a fresh matcher per instance. The mask's agreement with accept is checked "
    "(instances_mask_forbade_accepted_token).",
    "Single-threaded engines (OMP/RAYON/torch threads 1, xgrammar max_threads 1), one engine at a time; a "
    "shared 2-core machine (loadavg in the JSON): compare ratios, not absolute times.",
]


# -- driver ----------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--max-schemas-per-subset", type=int, default=None,
                   help="seeded sample per subset (default 4: ~14 minutes on 2 cores; --quick 1)")
    p.add_argument("--subsets", default=None, help="comma-separated subset names or globs (default all)")
    p.add_argument("--engines", default=",".join(SCHEMA_ENGINES), help="comma-separated: " + ", ".join(SCHEMA_ENGINES))
    p.add_argument("--compile-timeout", type=float, default=10.0, help="seconds per schema compile (default 10)")
    p.add_argument("--test-timeout", type=float, default=60.0,
                   help="seconds for a schema's instances, plus 10 ms per token (default 60)")
    p.add_argument("--max-rss-gib", type=float, default=6.0, help="a worker's resident memory limit (default 6)")
    p.add_argument("--seed", type=int, default=0, help="seed of the schema sample")
    p.add_argument("--quick", action="store_true", help="smoke test: 1 schema per subset")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results", help="results folder")
    args = p.parse_args(argv)
    if args.max_schemas_per_subset is None:
        args.max_schemas_per_subset = 1 if args.quick else 4
    args.subsets = args.subsets.split(",") if args.subsets else None
    args.engines = args.engines.split(",")
    unknown = [e for e in args.engines if e not in SCHEMA_ENGINES]
    if unknown:
        p.error(f"unknown engines {unknown}; known: {', '.join(SCHEMA_ENGINES)}")
    return args


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    torch.set_num_threads(1)
    started, load_before = time.time(), os.getloadavg()
    tokenizer = load_tokenizer(TOKENIZER)
    files = sample_files(args.subsets, args.max_schemas_per_subset, args.seed)
    if not files:
        raise SystemExit(f"no subset matches {args.subsets}")
    cases = interleave(load_cases(files, tokenizer))
    log(f"{len(cases)} schemas from {len(files)} subsets; {TOKENIZER}: vocabulary {len(tokenizer)}, "
        f"EOS {tokenizer.eos_token_id}")
    adapters, setup = build_adapters(args.engines, tokenizer, log)
    if not adapters:
        raise SystemExit("no engine available")
    gc.collect()
    gc.freeze()  # keep the forked workers' copy-on-write pages shared
    workers = {name: Worker(adapter, int(args.max_rss_gib * 2**30)) for name, adapter in adapters.items()}
    try:
        records = run_cases(workers, cases, args, log)
    finally:
        for worker in workers.values():
            worker.close()
        for adapter in adapters.values():
            adapter.close()
    engines = list(adapters)
    report = {
        "benchmark": "jsonschema_coverage",
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "wall_s": round(time.time() - started, 1),
        "machine": {**machine_info(), "loadavg_before": load_before, "loadavg_after": os.getloadavg()},
        "versions": versions(),
        "tokenizer": {"name": TOKENIZER, "vocab_size": len(tokenizer), "eos": int(tokenizer.eos_token_id)},
        "settings": {**{k: (relative(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
                     "engines": engines},
        "engine_setup": setup,
        "worker_restarts": {name: w.restarts for name, w in workers.items()},
        "schemas": len(cases),
        "notes": NOTES,
        "summary": summarise(records, engines),
        "crashes": crashes(records),
        "top_compile_errors": top_errors(records, engines),
        "per_schema": slim(records),
    }
    write_outputs(report, args)
    return 0


def write_outputs(report: dict[str, Any], args: argparse.Namespace) -> None:
    """JSON, markdown and plot under ``--out``."""
    args.out.mkdir(parents=True, exist_ok=True)
    engines = report["settings"]["engines"]
    (args.out / "jsonschema_coverage.json").write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")
    (args.out / "jsonschema_coverage.md").write_text(markdown_report(report))
    plot(report["summary"], engines, args.out / "jsonschema_coverage.png")
    print(totals_table(report["summary"]))
    print()
    print(subset_coverage_table(report["summary"], engines))
    for crash in report["crashes"]:
        print(f"\ncrash: {crash['engine']} {crash['schema']} ({crash['phase']}): {crash['error']}")
    log(f"wrote {relative(args.out)}/jsonschema_coverage.json, .md, .png in {report['wall_s']:.0f} s")


if __name__ == "__main__":
    sys.exit(main())
