"""Code grammars on real source files: compile time, per-token mask time and false rejections,
codemask beside llguidance (Lark) and SynCode.

Run in the benchmarks' own environment (``bash benchmarks/setup.sh``; SynCode:
``benchmarks/.venv/bin/pip install --no-deps syncode==0.4.16 interegular fire termcolor``, see below)::

    benchmarks/.venv/bin/python benchmarks/code_grammars.py                       # 8 files x 1500 tokens
    benchmarks/.venv/bin/python benchmarks/code_grammars.py --files 4 --max-tokens 600 \
        --syncode-build-timeout 180                     # the recorded run: 16 minutes, loaded 2 cores
    benchmarks/.venv/bin/python benchmarks/code_grammars.py \
        --from-json benchmarks/results/code_grammars.json   # re-render .md/.png
    benchmarks/.venv/bin/python benchmarks/code_grammars.py --languages python --files 2 --max-tokens 300
    benchmarks/.venv/bin/python benchmarks/code_grammars.py --engines codemask,llguidance

Per language, real files (every one valid in its language):

- ``python``: ``.py`` files of the interpreter's own standard library (``sysconfig`` ``stdlib``; not
  tests, 4-40 KB, UTF-8, accepted by ``ast.parse``), a seeded sample;
- ``go``: the Go files under ``/usr/share`` (git's contrib) and ``tests/data/code/go``;
- ``sql``: ``tests/data/code/sql`` (SQLite scripts); ``c``: ``tests/data/code/c``;
- ``java``: ``tests/data/code/java``, then a seeded sample of the newest JDK ``src.zip``;
- ``javascript``: ``tests/data/code/javascript``, then npm packages' ``.js`` files that ``node
  --check`` accepts (not minified).

Each file is tokenised with the Llama-3 tokenizer (128,256 ids) and cut to ``--max-tokens`` tokens
(a prefix of a valid program is still a valid prefix; EOS is checked only after whole files). Every
engine gets a fresh matcher per file and, per token: the next-token mask (timed, ``perf_counter_ns``),
a check that the mask allows the file's next token, and the token. A *false rejection* is a valid
file whose token the mask forbids or the engine refuses (or, after a whole file, EOS refused).
Engines are interleaved per file (order rotated) so machine noise hits them alike.

Engines, each with the grammar it can take:

- ``codemask``: ``Grammar.builtin(language)`` (``grammars/<language>.lark``), compiled cold with an
  empty disk cache (which includes the precompute on the grammar's sample code, `engine/samples.py`);
  cached = the same compiler again / a new compiler on the disk cache.
- ``llguidance``: the same ``grammars/<language>.lark`` text through ``llguidance.grammar_from("lark")``;
  where llguidance refuses a construct (its error names it) the language is n/a for it. No compiled
  object: compile = first ``LLMatcher`` construction.
- ``syncode``: SynCode 0.4.16's *own* grammar for the language (it ships python, go, sql, c, java; it
  is LALR(1) and cannot take codemask's Earley-style grammars), ``SyncodeLogitsProcessor`` in its
  default ``grammar_mask`` mode with the same tokenizer object, CPU, no model. Its per-token cost is
  what its logits processor does per step: decode the output so far, incremental parse, mask lookup
  (timed without the final ``scores.masked_fill``). SynCode builds a "mask store" per grammar and
  tokenizer eagerly (every FSM state x the vocabulary, pure Python: hours with 128k tokens on 2 loaded
  cores) and caches it under ``benchmarks/.cache/syncode/``; the benchmark builds it in a child process
  limited to ``--syncode-build-timeout`` seconds (a build cut short makes the language an error, with
  SynCode's last progress line); its cold compile time is that build (``--syncode-rebuild``). SynCode imports
  the ``datasets`` package only for its evaluation data sets: a stub stands in for it. By default
  SynCode runs on python, go and sql (``--syncode-languages``).

Results: ``benchmarks/results/code_grammars.{json,md,png}``.
"""

from __future__ import annotations

import argparse
import ast
import datetime
import gc
import glob
import json
import os
import random
import re
import subprocess
import sys
import sysconfig
import tempfile
import time
import traceback
import types
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import one_thread  # noqa: F401  (before numpy, torch and the engines: one thread each, offline)

# isort: split


from engines import CodemaskAdapter, EngineAdapter, LLGuidanceAdapter, Unsupported, _seconds_since
from mask_speed import (
    fmt_ratio,
    fmt_seconds,
    percentiles,
    plot,
    relative,
    report_header,
    token_repr,
)
from mask_speed import versions as engine_versions

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "data" / "code"
GRAMMARS = ROOT / "grammars"
SYNCODE_CACHE = ROOT / "benchmarks" / ".cache" / "syncode"
LANGUAGES = ("python", "go", "sql", "c", "java", "javascript")
ENGINE_NAMES = ("codemask", "llguidance", "syncode")
MAX_EXAMPLES = 8


@dataclass
class Doc:
    """One real source file, tokenised and possibly cut to the token budget."""

    name: str
    tokens: list[int]
    truncated: bool


@dataclass
class DocRun:
    """One engine on one file."""

    times_ns: list[int] = field(default_factory=list)
    accepted: bool = False
    failure: str | None = None


@dataclass
class EngineLanguage:
    """What one engine did on one language."""

    engine: str
    grammar: str = ""
    status: str = "ok"  # ok | n/a | error
    reason: str | None = None
    compiled: Any = None
    compile_cold_s: float | None = None
    compile_note: str | None = None
    cached: dict[str, float | None] = field(default_factory=dict)
    runs: dict[int, DocRun] = field(default_factory=dict)


# -- corpora ---------------------------------------------------------------------------------------


def python_sources(n: int, rng: random.Random) -> list[tuple[str, str]]:
    """Moderate-size standard-library modules CPython parses: the interpreter's own Lib folder."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    paths = [p for p in sorted(stdlib.rglob("*.py"))
             if not {"test", "tests", "site-packages", "idle_test"} & set(p.relative_to(stdlib).parts)
             and 4_000 <= p.stat().st_size <= 40_000]
    rng.shuffle(paths)
    out = []
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8")
            ast.parse(text)
        except (UnicodeDecodeError, SyntaxError, ValueError):
            continue
        out.append((str(path.relative_to(stdlib)), text))
        if len(out) >= n:
            break
    return out


def corpus_files(language: str, suffixes: tuple[str, ...]) -> list[tuple[str, str]]:
    """The repository's test programs for a language (each checked by its oracle in the tests)."""
    paths = sorted(p for p in (CORPUS / language).iterdir() if p.suffix in suffixes)
    return [(relative(p), p.read_text(encoding="utf-8")) for p in paths]


def go_sources(n: int, rng: random.Random) -> list[tuple[str, str]]:
    found = sorted(glob.glob("/usr/share/**/*.go", recursive=True))
    system = [(p, Path(p).read_text(encoding="utf-8")) for p in found]
    return (corpus_files("go", (".go",)) + system)[:n]


def sql_sources(n: int, rng: random.Random) -> list[tuple[str, str]]:
    return corpus_files("sql", (".sql",))[:n]


def c_sources(n: int, rng: random.Random) -> list[tuple[str, str]]:
    return corpus_files("c", (".c",))[:n]


def java_sources(n: int, rng: random.Random) -> list[tuple[str, str]]:
    """The test programs, then JDK library classes (valid Java by construction) from ``src.zip``."""
    out = corpus_files("java", (".java",))
    zips = sorted(glob.glob("/usr/lib/jvm/*/lib/src.zip"))
    if zips and len(out) < n:
        archive = zipfile.ZipFile(zips[-1])
        names = [name for name in archive.namelist() if name.endswith(".java")]
        rng.shuffle(names)
        for name in names:
            text = archive.read(name).decode("utf-8", errors="replace")
            if 2_000 < len(text) < 30_000:
                out.append((f"{Path(zips[-1]).parent.parent.name}:{name}", text))
            if len(out) >= n:
                break
    return out[:n]


def js_sources(n: int, rng: random.Random) -> list[tuple[str, str]]:
    """The test programs, then npm packages' script files that ``node --check`` accepts."""
    out = corpus_files("javascript", (".js", ".mjs"))
    found = sorted(glob.glob("/usr/lib/node_modules/**/*.js", recursive=True))
    rng.shuffle(found)
    for path in found:
        if len(out) >= n:
            break
        text = Path(path).read_text(encoding="utf-8", errors="replace")
        minified = max(map(len, text.splitlines()), default=0) >= 400
        if 2_000 < len(text) < 30_000 and not minified and node_accepts(text):
            out.append((path, text))
    return out[:n]


def node_accepts(text: str) -> bool:
    """``node --check`` on the text as a CommonJS script."""
    with tempfile.NamedTemporaryFile("w", suffix=".cjs", encoding="utf-8", delete=False) as handle:
        handle.write(text)
    try:
        return subprocess.run(["node", "--check", handle.name], capture_output=True).returncode == 0
    finally:
        os.unlink(handle.name)


SOURCES = {"python": python_sources, "go": go_sources, "sql": sql_sources, "c": c_sources,
           "java": java_sources, "javascript": js_sources}


def load_docs(language: str, n: int, max_tokens: int, tokenizer: Any, seed: int) -> list[Doc]:
    return [cut_doc(name, text, tokenizer, max_tokens) for name, text in SOURCES[language](n, random.Random(seed))]


def cut_doc(name: str, text: str, tokenizer: Any, max_tokens: int) -> Doc:
    """A file tokenized and cut to ``max_tokens``."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    return Doc(name, ids[:max_tokens], len(ids) > max_tokens)


# -- engines ---------------------------------------------------------------------------------------


class CodemaskCode(CodemaskAdapter):
    """codemask with its builtin code grammar; ``kind`` is the language."""

    def _grammar(self, kind: str, text: str | None) -> Any:
        return self._api.Grammar.builtin(kind)

    def grammar_label(self, language: str) -> str:
        return f"grammars/{language}.lark"


class LLGuidanceCode(LLGuidanceAdapter):
    """llguidance on the same Lark text; a construct it refuses makes the language n/a."""

    def _grammar(self, kind: str, text: str | None) -> str:
        assert text is not None
        try:
            return str(self._llg.grammar_from("lark", text))
        except Exception as exc:  # its Lark front end refuses the grammar
            raise Unsupported(f"llguidance refuses grammars/{kind}.lark: {first_line(exc)}") from exc

    def _matcher(self, grammar: str) -> Any:
        matcher = self._llg.LLMatcher(self.lltok, grammar, log_level=0)
        if matcher.is_error():
            raise Unsupported(f"llguidance refuses the grammar: {llg_error(matcher.get_error())}")
        return matcher

    def grammar_label(self, language: str) -> str:
        return f"grammars/{language}.lark"


def llg_error(message: str) -> str:
    """llguidance's error, first line and the grammar line it points at (which names the construct)."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    pointed = next((lines[i - 1] for i, line in enumerate(lines) if line.startswith("^") and i), "")
    return f"{lines[0] if lines else message}" + (f" — at `{pointed[:110]}`" if pointed else "")


def first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0][:500]


@dataclass
class SynCodeMatcher:
    """SynCode's state for one file: the ids so far (after a one-token prompt) and the last mask."""

    ids: list[int]
    mask: Any = None
    error: str | None = None


class SynCodeAdapter(EngineAdapter):
    """SynCode's logits processor driven step by step, without a model (see the module docstring)."""

    name = "syncode"
    languages = ("python", "go", "sql", "c", "java")
    rebuild = False
    build_timeout_s = 900.0
    build_note = ""

    def _setup(self) -> None:
        os.environ["SYNCODE_CACHE"] = str(SYNCODE_CACHE) + "/"  # SynCode concatenates strings
        os.environ.setdefault("LOG_LEVEL", "WARNING")
        try:
            import datasets  # noqa: F401
        except ImportError:  # only syncode.dataset (its evaluation data sets) uses it
            sys.modules["datasets"] = types.SimpleNamespace(load_dataset=None)  # type: ignore[assignment]
        import syncode
        import torch

        self._syncode, self._torch = syncode, torch
        self._prompt = int(self.tokenizer.bos_token_id or 0)

    @property
    def version(self) -> str:
        from importlib.metadata import version

        return version("syncode")

    def grammar_label(self, language: str) -> str:
        return f"SynCode's {language}.lark (LALR)"

    def compile(self, kind: str, text: str | None) -> tuple[Any, float]:
        """Build the mask store in a child process (bounded by ``build_timeout_s``), then load it here."""
        if kind not in self.languages:
            raise Unsupported(f"SynCode 0.4.16 ships no {kind} grammar")
        store = self._store_path(self._syncode.Grammar(kind))
        if self.rebuild or not store.exists():
            self._build_in_child(kind, store)
        start = time.perf_counter_ns()
        processor = self._syncode.SyncodeLogitsProcessor(self._syncode.Grammar(kind), self.tokenizer, use_cache=True,
                                                         parse_output_only=True, mode="grammar_mask")
        self._processor, self.loaded_s = processor, _seconds_since(start)
        record = json.loads(store.with_suffix(".build.json").read_text())
        self.build_note = record.get("note", "")
        return processor, float(record["build_s"])

    def _build_in_child(self, kind: str, store: Path) -> None:
        """SynCode's mask-store build, timed, in a child process: a build that outlasts the limit is killed
        (it is pure Python over every FSM state x the 128k vocabulary) and the language is reported as an error."""
        store.unlink(missing_ok=True)
        command = [sys.executable, str(Path(__file__).resolve()), "--syncode-build", kind]
        start = time.perf_counter_ns()
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=self.build_timeout_s)
        except subprocess.TimeoutExpired as exc:
            raise RuntimeError(f"SynCode's {kind} mask store (grammar_mask, Llama-3 128k) did not finish building "
                               f"within {self.build_timeout_s:.0f} s on this loaded 2-core machine"
                               + build_progress(exc.stderr, self.build_timeout_s)) from exc
        seconds = _seconds_since(start)
        if done.returncode != 0 or not store.exists():
            raise RuntimeError(f"SynCode's {kind} mask store build failed: {done.stderr.strip()[-300:]}")
        store.with_suffix(".build.json").write_text(json.dumps({
            "build_s": seconds, "note": f"built {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
                                         f"load average {os.getloadavg()[0]:.1f}"}))

    def _store_path(self, grammar: Any) -> Path:
        """Where SynCode caches the mask store (its ``init_mask_store`` naming)."""
        name = type(self.tokenizer).__name__
        return SYNCODE_CACHE / "mask_stores" / name / f"grammar_mask_{grammar.hash()}_{self.tokenizer.vocab_size}.pkl"

    def compile_cached(self, kind: str, text: str | None) -> dict[str, float | None]:
        start = time.perf_counter_ns()
        self._syncode.SyncodeLogitsProcessor(self._syncode.Grammar(kind), self.tokenizer, use_cache=True,
                                             parse_output_only=True, mode="grammar_mask")
        return {"memory": None, "disk": _seconds_since(start)}

    def new_matcher(self, compiled: Any) -> SynCodeMatcher:
        compiled.reset()
        return SynCodeMatcher([self._prompt])

    def fill_mask(self, matcher: SynCodeMatcher, bitmask: Any) -> None:
        """``GrammarConstrainer.mask_scores`` for one sequence, keeping the mask and any parse error."""
        engine = self._processor.grammar_engine
        input_ids = self._torch.tensor([matcher.ids])
        engine._set_start_from(input_ids)
        partial, remainder = engine._get_partial_outputs(input_ids)[0]
        try:
            result = engine.inc_parser.get_acceptable_next_terminals(partial)
        except Exception as exc:  # SynCode logs this and falls back to unconstrained decoding
            matcher.mask, matcher.error = None, f"parse error ({type(exc).__name__}: {first_line(exc)[:150]})"
            return
        if remainder:
            from syncode.parse_result import RemainderState

            result.remainder_state = RemainderState.INCOMPLETE
            result.remainder = result.remainder.encode("utf-8") + remainder
        else:
            result.remainder = result.remainder.encode("utf-8")
        matcher.mask = engine.dfa_mask_store.get_accept_mask(result)

    def allows(self, matcher: SynCodeMatcher, bitmask: Any, token_id: int) -> bool:
        if matcher.mask is None:
            return False
        return token_id < len(matcher.mask) and bool(matcher.mask[token_id])

    def accept(self, matcher: SynCodeMatcher, token_id: int) -> bool:
        matcher.ids.append(token_id)
        return True


def build_progress(stderr: str | bytes | None, limit_s: float) -> str:
    """SynCode's own account of a build cut short: its FSM count and its last tqdm line (states done of
    all, elapsed<remaining), so the report says how far it got and how long it expected to take."""
    text = stderr.decode("utf-8", "replace") if isinstance(stderr, bytes) else stderr or ""
    fsms = re.findall(r"(\d+ FSMs with \d+ states)", text)
    bars = re.findall(r"(\d+/\d+) \[([\d:]+)<([\d:?]+)", text)
    parts = [fsms[-1]] if fsms else []
    if bars:
        done, total = (int(x) for x in bars[-1][0].split("/"))
        elapsed = sum(int(x) * 60 ** i for i, x in enumerate(reversed(bars[-1][1].split(":"))))
        parts.append(f"the last progress line of its per-state loop over the vocabulary: {done}/{total} states "
                     f"at {elapsed} s of {limit_s:.0f}")
    else:
        parts.append("still before its per-state loop over the vocabulary")
    return " (" + "; ".join(parts) + ")"


ADAPTERS: dict[str, type[EngineAdapter]] = {"codemask": CodemaskCode, "llguidance": LLGuidanceCode,
                                            "syncode": SynCodeAdapter}


def mask_allows(adapter: EngineAdapter, matcher: Any, bitmask: Any, token: int) -> bool:
    """Whether the mask just filled allows ``token``: the bitmask, or SynCode's own boolean mask."""
    if isinstance(adapter, SynCodeAdapter):
        return adapter.allows(matcher, bitmask, token)
    row = bitmask.numpy()[0]
    return bool((int(row[token >> 5]) >> (token & 31)) & 1)


# -- measuring -------------------------------------------------------------------------------------


def run_document(adapter: EngineAdapter, compiled: Any, doc: Doc, eos: int) -> DocRun:
    """Feed one file token by token, timing every mask; stop at the first token (or EOS) refused."""
    import torch

    clock = time.perf_counter_ns
    bitmask = torch.full((1, (adapter.vocab_size + 31) // 32), -1, dtype=torch.int32)
    matcher = adapter.new_matcher(compiled)
    run = DocRun()
    steps = doc.tokens if doc.truncated else [*doc.tokens, eos]
    for step, token in enumerate(steps):
        start = clock()
        adapter.fill_mask(matcher, bitmask)
        run.times_ns.append(clock() - start)
        allowed = mask_allows(adapter, matcher, bitmask, token)
        if not allowed or not adapter.accept(matcher, token):
            what = "EOS" if token == eos and step == len(doc.tokens) else \
                f"token {step} ({token_repr(adapter.tokenizer, token)})"
            why = getattr(matcher, "error", None) or ("mask forbids it" if not allowed else "accept refuses it")
            context = adapter.tokenizer.decode(doc.tokens[:step])[-60:]
            run.failure = f"{what} after {context!r}: {why}"
            return run
    run.accepted = True
    return run


def prepare_engine(name: str, adapter: EngineAdapter, language: str, docs: list[Doc], log: Any
                   ) -> EngineLanguage:
    """Compile cold (and from caches) one engine's grammar for a language; n/a where it has none."""
    result = EngineLanguage(name, grammar=adapter.grammar_label(language))  # type: ignore[attr-defined]
    text = (GRAMMARS / f"{language}.lark").read_text(encoding="utf-8")
    try:
        result.compiled, result.compile_cold_s = adapter.compile(language, text)
        if isinstance(adapter, SynCodeAdapter):
            result.compile_note = (f"mask-store build (a child process; {adapter.build_note}); "
                                   f"loading it from SynCode's disk cache: {adapter.loaded_s:.2f} s")
        result.cached = adapter.compile_cached(language, text)
    except Unsupported as exc:
        result.status, result.reason = "n/a", str(exc)
    except Exception as exc:
        result.status, result.reason = "error", f"{type(exc).__name__}: {first_line(exc)}"
        log(traceback.format_exc())
    log(f"  {name}: " + (f"compile {fmt_seconds(result.compile_cold_s)} cold" if result.status == "ok"
                         else f"{result.status}: {result.reason}"))
    return result


def measure_language(adapters: dict[str, EngineAdapter], language: str, docs: list[Doc], eos: int,
                     log: Any) -> dict[str, EngineLanguage]:
    results = {name: prepare_engine(name, adapter, language, docs, log) for name, adapter in adapters.items()}
    active = [name for name, r in results.items() if r.status == "ok"]
    gc.collect()
    gc.freeze()
    for index, doc in enumerate(docs):
        order = active[index % len(active):] + active[: index % len(active)] if active else []
        for name in order:
            result = results[name]
            try:
                result.runs[index] = run = run_document(adapters[name], result.compiled, doc, eos)
            except Exception as exc:  # an engine crash is not a rejection: report it, measure the others
                result.status, result.reason = "error", f"file {index}: {type(exc).__name__}: {first_line(exc)}"
                log(traceback.format_exc())
                active.remove(name)
                continue
            log(f"  [{index + 1}/{len(docs)}] {name}: {doc.name}: "
                + ("accepted" if run.accepted else f"REFUSED {run.failure}")
                + f" ({len(run.times_ns)} masks, {sum(run.times_ns) / 1e9:.1f} s)")
    gc.unfreeze()
    return results


# -- summarising -----------------------------------------------------------------------------------


def summarise(language: str, docs: list[Doc], results: dict[str, EngineLanguage],
              adapters: dict[str, EngineAdapter]) -> list[dict[str, Any]]:
    """One row per engine; timings over the files every measured engine accepted, and over all steps."""
    measured = [r for r in results.values() if r.status == "ok"]
    common = [i for i in range(len(docs)) if measured and all(r.runs.get(i, DocRun()).accepted for r in measured)]
    rows = []
    for name, result in results.items():
        row: dict[str, Any] = {"tokenizer": "llama3", "workload": language, "language": language, "engine": name,
                               "grammar": result.grammar, "status": result.status, "reason": result.reason,
                               "vocab_setup_s": adapters[name].setup_seconds if name in adapters else None}
        if result.status == "ok":
            runs = result.runs
            refused = [{"file": docs[i].name, "failure": run.failure} for i, run in runs.items() if not run.accepted]
            row.update({
                "compile_cold_s": result.compile_cold_s,
                "compile_note": result.compile_note,
                "compile_cached_memory_s": result.cached.get("memory"),
                "compile_cached_disk_s": result.cached.get("disk"),
                "mask_us": percentiles([t for i in common for t in runs[i].times_ns]),
                "mask_us_all_steps": percentiles([t for run in runs.values() for t in run.times_ns]),
                "tokens": sum(len(runs[i].times_ns) for i in common),
                "tokens_all_steps": sum(len(run.times_ns) for run in runs.values()),
                "files": len(runs),
                "files_common": len(common),
                "files_accepted": sum(run.accepted for run in runs.values()),
                "false_rejections": len(refused),
                "false_rejection_rate": len(refused) / max(len(runs), 1),
                "refused": refused[:MAX_EXAMPLES],
            })
        rows.append(row)
    add_ratios(rows)
    return rows


def add_ratios(rows: list[dict[str, Any]]) -> None:
    """Each engine's median and p99 over codemask's, on the same (common) files."""
    base = next((r for r in rows if r["engine"] == "codemask" and r["status"] == "ok" and r.get("mask_us")), None)
    for row in rows:
        if base and row["status"] == "ok" and row.get("mask_us"):
            row["median_vs_codemask"] = row["mask_us"]["median"] / base["mask_us"]["median"]
            row["p99_vs_codemask"] = row["mask_us"]["p99"] / base["mask_us"]["p99"]


def markdown_table(rows: list[dict[str, Any]]) -> str:
    head = ("| language | engine | grammar | compile cold | mask median µs | p99 µs | max µs | tokens timed "
            "| files accepted | median / codemask | p99 / codemask |")
    lines = [head, "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if r["status"] != "ok":
            lines.append(f"| {r['language']} | {r['engine']} | {r['status']}: {short_reason(r['reason'] or '')} "
                         "|  |  |  |  |  |  |  |  |")
            continue
        m = r["mask_us"] or r["mask_us_all_steps"] or {"median": float("nan"), "p99": float("nan"),
                                                        "max": float("nan")}
        star = "" if r["mask_us"] else "²"
        cold = fmt_seconds(r["compile_cold_s"]) + ("¹" if r["engine"] == "syncode" else "")
        lines.append(
            f"| {r['language']} | {r['engine']} | {r['grammar']} | {cold} | {m['median']:.1f}{star} "
            f"| {m['p99']:.1f}{star} | {m['max']:.0f}{star} | {r['tokens'] or r['tokens_all_steps']} "
            f"| {r['files_accepted']}/{r['files']} | {fmt_ratio(r.get('median_vs_codemask'))} "
            f"| {fmt_ratio(r.get('p99_vs_codemask'))} |")
    return "\n".join(lines)


def short_reason(reason: str) -> str:
    """The table's form of an n/a or error reason: the construct llguidance refuses, how far SynCode got."""
    refused = re.search(r"at \d+\(\d+\): (.*?) — at `\d+ \| (.{0,30})", reason)
    if refused:
        construct = refused.group(2).strip().split(":")[0].replace("|", "\\|")
        return f"refuses the grammar ({refused.group(1)}: `{construct}`)"
    store = re.search(r"within (\d+) s.*?(\d+/\d+) states", reason)
    if store:
        return f"mask store not built within {store.group(1)} s (last progress: {store.group(2)} FSM states)"
    return reason[:120]


NOTES = [
    "Shared 2-core machine with other engineers' jobs running: wall-clock timings are noisy (load average "
    "recorded in machine); compare within the run.",
    "mask_us: per-token mask time over the files every measured engine of that language accepted "
    "(files_common); mask_us_all_steps: over every timed step, including files an engine refused (up to the "
    "refusal). The mask after the last token of a whole (uncut) file, which must allow EOS, is a step.",
    "False rejection: a real, valid file whose token the engine's mask forbade or the engine refused; "
    "files cut at --max-tokens are prefixes of valid programs, so every token must still be allowed.",
    "codemask's lexer-mode masks are computed when a lexer/parser state is first visited (classifying the "
    "vocabulary, ~1-3 ms), later visits are a cache lookup; p99/max are those first visits. Its compile, with "
    "the default precompute and a disk cache, runs the grammar's sample code (a tour of the language's syntax, "
    "and for Python the starts of codemask's own modules, engine/samples.py), so its compile includes those masks.",
    "llguidance gets the same grammars/<language>.lark text; where its Lark front end refuses a construct "
    "(terminal priorities, Lark templates, %declare'd indentation terminals) the language is n/a for it.",
    "SynCode runs its own LALR grammar for the language (it cannot take codemask's Earley-style grammars), "
    "default grammar_mask mode, through SyncodeLogitsProcessor's internals step by step (decode, incremental "
    "parse, mask lookup) with the same tokenizer object and no model; a parse error counts as a rejection "
    "(SynCode itself would fall back to unconstrained decoding there).",
    "SynCode compile cold (¹ in the table) = building its mask store, measured when it was built and recorded "
    "beside its disk cache (benchmarks/.cache/syncode); compile_cached_disk_s = loading it.",
    "ratios: the engine's median (p99) over codemask's on the same files.",
]


def summary_section(report: dict[str, Any], table: str) -> str:
    machine, v, s = report["machine"], report["versions"], report["settings"]
    return (
        f"### Code grammars on real files (`benchmarks/code_grammars.py`)\n\n"
        f"{machine['cpu']}, {machine['cores']} cores shared with other jobs (noisy), {report['created']}; codemask "
        f"{v['codemask_git']}, llguidance {v['llguidance']}, SynCode {v['syncode']}; Llama-3 tokenizer (128k). "
        f"Up to {s['files']} real files per language (Python: standard-library modules), each cut to "
        f"{s['max_tokens']} tokens, fed token by token; mask time per token over the files every engine of the "
        f"language accepted; *files accepted*: real, valid files whose every token (and EOS after whole files) "
        f"the engine allowed — the rest are false rejections. llguidance gets the same `grammars/<lang>.lark` "
        f"where it accepts it, SynCode its own grammar. ² No file was accepted by every engine: times over all "
        f"steps up to each engine's first refusal. "
        f"Refusals, per-file results and notes: `benchmarks/results/code_grammars.{{md,json}}`.\n\n{table}\n"
    )


def failures_section(rows: list[dict[str, Any]]) -> str:
    lines = ["", "False rejections (first per file):", ""]
    for r in rows:
        for item in r.get("refused", []):
            lines.append(f"- {r['language']} / {r['engine']}: `{item['file']}`: {item['failure']}")
    return "\n".join(lines) + "\n" if len(lines) > 3 else ""


# -- driver ----------------------------------------------------------------------------------------


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = engine_versions()
    try:
        out["syncode"] = version("syncode")
    except PackageNotFoundError:
        out["syncode"] = "not installed"
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--languages", default=",".join(LANGUAGES), help="comma-separated: " + ", ".join(LANGUAGES))
    p.add_argument("--engines", default=",".join(ENGINE_NAMES), help="comma-separated: " + ", ".join(ENGINE_NAMES))
    p.add_argument("--syncode-languages", default="python,go,sql",
                   help="languages SynCode runs (it ships python, go, sql, c, java; each mask store takes minutes)")
    p.add_argument("--syncode-rebuild", action="store_true", help="rebuild SynCode's mask stores (cold compile)")
    p.add_argument("--syncode-build-timeout", type=float, default=900.0,
                   help="seconds a SynCode mask-store build may take before the language is an error (default 900)")
    p.add_argument("--syncode-build", metavar="LANGUAGE", help=argparse.SUPPRESS)  # the child process's job
    p.add_argument("--files", type=int, default=8, help="files per language (default 8)")
    p.add_argument("--max-tokens", type=int, default=1500, help="tokens per file at most (default 1500)")
    p.add_argument("--seed", type=int, default=0, help="seed of the file samples")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results", help="results folder")
    p.add_argument("--from-json", type=Path, help="re-render .md/.png from a results JSON, no run")
    args = p.parse_args(argv)
    args.languages = args.languages.split(",")
    args.engines = args.engines.split(",")
    args.syncode_languages = args.syncode_languages.split(",")
    for value, known in ((args.languages, LANGUAGES), (args.engines, ENGINE_NAMES)):
        if set(value) - set(known):
            p.error(f"unknown {sorted(set(value) - set(known))}; known: {', '.join(known)}")
    return args


def make_adapters(names: list[str], tokenizer: Any, log: Any) -> tuple[dict[str, EngineAdapter], dict[str, str]]:
    adapters: dict[str, EngineAdapter] = {}
    unavailable: dict[str, str] = {}
    vocab_size, eos = len(tokenizer), int(tokenizer.eos_token_id)
    for name in names:
        try:
            adapters[name] = ADAPTERS[name](tokenizer, vocab_size, eos)
            log(f"{name}: vocabulary set-up {adapters[name].setup_seconds:.2f} s")
        except Exception as exc:
            unavailable[name] = f"{type(exc).__name__}: {first_line(exc)}"
            log(f"{name}: unavailable: {unavailable[name]}")
    return adapters, unavailable


def build_syncode_store(language: str, tokenizer: Any) -> int:
    """The child process of `SynCodeAdapter._build_in_child`: SynCode builds and pickles its mask store."""
    adapter = SynCodeAdapter(tokenizer, len(tokenizer), int(tokenizer.eos_token_id))
    adapter._syncode.SyncodeLogitsProcessor(adapter._syncode.Grammar(language), tokenizer, use_cache=True,
                                            parse_output_only=True, mode="grammar_mask")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    from codemask.assets import load_tokenizer

    if args.syncode_build:
        return build_syncode_store(args.syncode_build, load_tokenizer("llama3"))
    if args.from_json:
        report = json.loads(args.from_json.read_text(encoding="utf-8"))
        render(report, args.out)
        return 0

    torch.set_num_threads(1)
    SynCodeAdapter.rebuild, SynCodeAdapter.build_timeout_s = args.syncode_rebuild, args.syncode_build_timeout

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    started, load_before = time.time(), os.getloadavg()
    tokenizer = load_tokenizer("llama3")
    eos = int(tokenizer.eos_token_id)
    adapters, unavailable = make_adapters(args.engines, tokenizer, log)
    rows: list[dict[str, Any]] = []
    files: dict[str, list[dict[str, Any]]] = {}
    for language in args.languages:
        docs = load_docs(language, args.files, args.max_tokens, tokenizer, args.seed)
        files[language] = [{"file": d.name, "tokens": len(d.tokens), "truncated": d.truncated} for d in docs]
        log(f"[{language}] {len(docs)} files, {sum(len(d.tokens) for d in docs)} tokens")
        here = {n: a for n, a in adapters.items() if n != "syncode" or language in args.syncode_languages}
        results = measure_language(here, language, docs, eos, log)
        for name in args.engines:
            if name in unavailable:
                results[name] = EngineLanguage(name, status="error", reason=f"unavailable: {unavailable[name]}")
            elif name not in results:
                results[name] = EngineLanguage(name, status="n/a", reason="not run (--syncode-languages)")
        rows.extend(summarise(language, docs, {n: results[n] for n in args.engines}, adapters))
    for adapter in adapters.values():
        adapter.close()
    write_results(args, rows, files, started, load_before)
    return 0


def render(report: dict[str, Any], out: Path) -> None:
    """The Markdown report and the plot, both from the results JSON."""
    rows = report["results"]
    table = markdown_table(rows)
    section = summary_section(report, table)
    notes = "\nNotes:\n\n" + "\n".join(f"- {n}" for n in report["notes"]) + "\n"
    attempts = report.get("syncode_attempts", {})
    syncode = ("\nSynCode:\n\n" + "\n".join(f"- {k.replace('_', ' ')}: {v}" for k, v in attempts.items()) + "\n"
               if attempts else "")
    (out / "code_grammars.md").write_text(section + failures_section(rows) + syncode + notes)
    # where no file was accepted by every engine (²), plot the all-steps times the table shows
    plot([{**r, "mask_us": r.get("mask_us") or r.get("mask_us_all_steps")} for r in rows], out / "code_grammars.png")
    print(table)
    print(failures_section(rows))


def write_results(args: argparse.Namespace, rows: list[dict[str, Any]], files: dict[str, Any], started: float,
                  load_before: tuple[float, float, float]) -> None:
    report = {**report_header("code_grammars", args, started, load_before, versions()), "notes": NOTES,
              "files": files, "results": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "code_grammars.json").write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    render(report, args.out)
    print(f"wrote {relative(args.out)}/code_grammars.json, .md, .png in {time.time() - started:.0f} s",
          file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
