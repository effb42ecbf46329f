"""Where a code grammar's per-token mask time goes: the breakdown behind `code_grammars.py`'s p99.

Run in the benchmarks' own environment (``bash benchmarks/setup.sh``)::

    benchmarks/.venv/bin/python benchmarks/mask_profile.py                      # python, 4 files x 600
    benchmarks/.venv/bin/python benchmarks/mask_profile.py --language sql --top 5

The same files, tokenizer and order as ``code_grammars.py`` (``load_docs``: ``--files`` real files
cut to ``--max-tokens`` Llama-3 tokens, one compiled grammar shared by all of them, a fresh matcher
per file). Per step, the mask time (``fill_next_token_bitmask``, ``perf_counter_ns``) and the time
spent inside it in:

- ``classify``: first visits of a lexer state (`lexer_masks.classify_lexer_state`: the vocabulary's
  trie walked through the lexer, uncertain tokens grouped), and inside it ``scan``, the C trie scan
  alone (`native.lexer_walk`);
- ``split``: a residual set's first lexeme from a lexer state not met with it before
  (`ResidualSets._split`);
- ``closure``: new parser states (`ParserCore.closure`, and `ParserCore._compute_step`, a step
  that moves the stacks and closes them, in C with the extension; the steps the lexer layer's C
  side computes itself, `native.SymbolSteps`, are counted from its own clock, `stats()`);
- ``gc``: the garbage collector's pauses (``gc.callbacks``);
- ``other``: the rest — the recursion over residual sets and parser states in Python, cached masks.

The wrappers add about a microsecond per call (~1% here). Prints the totals, the slow steps (over
1 ms) and the ``--top`` slowest, how many lexer states, candidate sets and parser states the files
made, and the p99 the steps would have if classifications, splits and closures cost nothing (a
bound on what precomputing them could buy); writes
``benchmarks/results/mask_profile_<language>.{json,md,png}``. ``--warm-files N`` first runs N
other files of the language through the same compiled grammar, untimed, as a longer-running
process would have (results ``mask_profile_<language>_warm<N>.*``). ``--saved-state N`` runs those N
files instead through a grammar compiled over a temporary disk cache, saves its mask state there
(`GrammarCompiler.save_mask_state`, what ``codemask warm`` does) and times the files in a new
process whose compile finds that state: lexer-side work as after N files, parser-side work from
cold (results ``mask_profile_<language>_state<N>.*``).
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import one_thread  # noqa: F401  (before numpy, torch and the engines: one thread each, offline)

# isort: split

import numpy as np

from code_grammars import cut_doc, load_docs

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
PARTS = ("classify", "split", "closure", "gc")
SLOW_NS = 1_000_000


class Timers:
    """Time spent inside the wrapped functions (outermost calls only) and in collector pauses."""

    def __init__(self) -> None:
        self.ns = dict.fromkeys(PARTS, 0)
        self.calls = dict.fromkeys(PARTS, 0)
        self.scan_ns = 0  # inside classify: the C trie scan
        self._depth = 0
        self._gc_start = 0

    def wrap(self, part: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            if self._depth:
                return function(*args, **kwargs)
            self._depth += 1
            start = time.perf_counter_ns()
            try:
                return function(*args, **kwargs)
            finally:
                self.ns[part] += time.perf_counter_ns() - start
                self.calls[part] += 1
                self._depth -= 1
        return timed

    def wrap_scan(self, function: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter_ns()
            try:
                return function(*args, **kwargs)
            finally:
                self.scan_ns += time.perf_counter_ns() - start
        return timed

    def on_gc(self, phase: str, _info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_start = time.perf_counter_ns()
        else:
            self.ns["gc"] += time.perf_counter_ns() - self._gc_start
            self.calls["gc"] += 1


@contextmanager
def instrumented(timers: Timers) -> Iterator[None]:
    """The engine's cold paths wrapped with ``timers`` inside the block."""
    from codemask.engine import lexer_masks, native, parser

    targets = [(lexer_masks, "classify_lexer_state", "classify"), (lexer_masks.ResidualSets, "_split", "split"),
               (parser.ParserCore, "closure", "closure"), (parser.ParserCore, "_compute_step", "closure")]
    originals = [(owner, name, getattr(owner, name)) for owner, name, _part in targets]
    originals.append((native, "lexer_walk", native.lexer_walk))
    for owner, name, part in targets:
        setattr(owner, name, timers.wrap(part, getattr(owner, name)))
    native.lexer_walk = timers.wrap_scan(native.lexer_walk)
    gc.callbacks.append(timers.on_gc)
    try:
        yield
    finally:
        gc.callbacks.remove(timers.on_gc)
        for owner, name, original in originals:
            setattr(owner, name, original)


def profile(language: str, files: int, max_tokens: int, seed: int, warm_files: int = 0,
            state_dir: Path | None = None, precompute: bool = False, paths: list[Path] | None = None) -> dict[str, Any]:
    """Time every step of the benchmark's files (or of ``paths``, other real files of the language,
    each cut to ``max_tokens``), after ``warm_files`` others (untimed) went through the same
    compiled grammar; with ``state_dir``, compile over that disk cache instead (a mask state saved
    there by `save_state` comes with the grammar) and warm nothing; with ``precompute``, compile
    with ``precompute=True`` (the grammar's sample code run at compile time, inside the compile
    time reported)."""
    import torch

    import codemask
    from codemask.assets import load_tokenizer

    tokenizer = load_tokenizer("llama3")
    docs = load_docs(language, files + warm_files, max_tokens, tokenizer, seed)
    docs, warm = docs[:files], docs[files:]  # the first ``files`` are the benchmark's whatever ``warm_files``
    if paths:
        docs = [cut_doc(str(path), path.read_text(encoding="utf-8"), tokenizer, max_tokens) for path in paths]
    vocab = codemask.Vocabulary.from_tokenizer(tokenizer, vocab_size=len(tokenizer),
                                               stop_token_ids=[tokenizer.eos_token_id])
    start = time.perf_counter()
    compiled = codemask.GrammarCompiler(vocab, cache_dir=state_dir or False, progress=False,
                                        precompute=precompute).compile(codemask.Grammar.builtin(language))
    compile_s = time.perf_counter() - start
    bitmask = torch.full((1, (len(tokenizer) + 31) // 32), -1, dtype=torch.int32)
    if state_dir is None:
        run_untimed(compiled, warm, bitmask)  # the caches a longer-running process would have
    timers = Timers()
    steps: list[dict[str, Any]] = []
    c_steps = getattr(compiled.core, "native_steps", None)  # parser steps the lexer layer makes in C
    made_before = made(compiled.core)  # (the warm files', the samples' or the saved state's)
    with instrumented(timers):
        for doc in docs:
            matcher = codemask.GrammarMatcher(compiled)
            for index, token in enumerate(doc.tokens):
                before, calls = dict(timers.ns), timers.calls["classify"]
                c_before = c_steps.stats() if c_steps is not None else (0, 0)
                start_ns = time.perf_counter_ns()
                matcher.fill_next_token_bitmask(bitmask)
                total = time.perf_counter_ns() - start_ns
                c_after = c_steps.stats() if c_steps is not None else (0, 0)
                timers.ns["closure"] += c_after[1] - c_before[1]
                timers.calls["closure"] += c_after[0] - c_before[0]
                parts = {part: timers.ns[part] - before[part] for part in PARTS}
                parts["other"] = total - sum(parts.values())
                steps.append({"file": doc.name, "step": index, "ns": total, "parts": parts,
                              "classified": timers.calls["classify"] - calls})
                if not matcher.accept_token(token):
                    raise SystemExit(f"{doc.name}: token {index} refused — not a valid file for the grammar")
    core = compiled.core
    return {"language": language, "files": [d.name for d in docs], "warm_files": [d.name for d in warm],
            "compile_s": compile_s, "steps": steps,
            "calls": timers.calls, "scan_s": timers.scan_ns / 1e9,
            "made": {what: n - made_before[what] for what, n in made(core).items()}}


def made(core: Any) -> dict[str, int]:
    """How many lexer states, candidate sets and parser states a lexer-mode core holds."""
    return {"lexer states": len(core.lexer.keys), "candidate sets": len(core._by_allowed),
            "parser states": core.parser.num_states}


def run_untimed(compiled: Any, docs: list[Any], bitmask: Any) -> None:
    import codemask

    for doc in docs:
        matcher = codemask.GrammarMatcher(compiled)
        for token in doc.tokens:
            matcher.fill_next_token_bitmask(bitmask)
            if not matcher.accept_token(token):
                raise SystemExit(f"{doc.name}: token refused — not a valid file for the grammar")


def save_state(language: str, files: int, max_tokens: int, seed: int, warm_files: int, state_dir: Path) -> None:
    """Run the ``warm_files`` files after the benchmark's through a grammar compiled over
    ``state_dir`` and save its mask state there (as ``codemask warm`` does)."""
    import torch

    import codemask
    from codemask.assets import load_tokenizer

    tokenizer = load_tokenizer("llama3")
    warm = load_docs(language, files + warm_files, max_tokens, tokenizer, seed)[files:]
    vocab = codemask.Vocabulary.from_tokenizer(tokenizer, vocab_size=len(tokenizer),
                                               stop_token_ids=[tokenizer.eos_token_id])
    compiler = codemask.GrammarCompiler(vocab, cache_dir=state_dir, progress=False, precompute=False)
    compiled = compiler.compile(codemask.Grammar.builtin(language))  # (the state of these files alone)
    run_untimed(compiled, warm, torch.full((1, (len(tokenizer) + 31) // 32), -1, dtype=torch.int32))
    path = compiler.save_mask_state(compiled)
    assert path is not None
    print(f"mask state of {len(warm)} files: {path.stat().st_size / 1e6:.0f} MB", file=sys.stderr)


def summarise(run: dict[str, Any], top: int) -> dict[str, Any]:
    times = np.array([s["ns"] for s in run["steps"]], dtype=np.int64)
    slow = [s for s in run["steps"] if s["ns"] > SLOW_NS]
    parts = (*PARTS, "other")
    return {
        "steps": len(times), "total_s": times.sum() / 1e9, "p50_us": float(np.percentile(times, 50)) / 1e3,
        "p99_ms": float(np.percentile(times, 99)) / 1e6, "max_ms": float(times.max()) / 1e6,
        "slow_steps": len(slow), "slow_steps_classifying": sum(1 for s in slow if s["classified"]),
        "total_s_by_part": {p: sum(s["parts"][p] for s in run["steps"]) / 1e9 for p in parts},
        "slow_s_by_part": {p: sum(s["parts"][p] for s in slow) / 1e9 for p in parts},
        "calls": run["calls"], "scan_s": run["scan_s"], "made": run["made"],
        "without": {" + ".join(free): _without(run["steps"], free) for free in FREE_PARTS},
        "slowest": sorted(run["steps"], key=lambda s: -s["ns"])[:top],
    }


# Bounds on what making parts of a step free would buy: the step times with these parts taken out.
FREE_PARTS = (("classify",), ("classify", "split"), ("classify", "split", "closure"))


def _without(steps: list[dict[str, Any]], free: tuple[str, ...]) -> dict[str, float]:
    """p99 (ms) and steps over 1 ms if the parts ``free`` cost nothing (an upper bound on what
    precomputing them could buy: the rest of a step is the Python around them)."""
    times = np.array([s["ns"] - sum(s["parts"][p] for p in free) for s in steps], dtype=np.int64)
    return {"p99_ms": float(np.percentile(times, 99)) / 1e6, "slow_steps": int((times > SLOW_NS).sum())}


def markdown(run: dict[str, Any], summary: dict[str, Any], command: str) -> str:
    parts = (*PARTS, "other")
    lines = [f"### Mask time by part: {run['language']} (`{command}`)", "",
             f"{platform.processor() or platform.machine()}, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d}; "
             f"files: {', '.join(run['files'])}; {summary['steps']} steps, compile {run['compile_s']:.2f} s"
             + (f"; timed after {len(run['warm_files'])} other files went through the same compiled grammar"
                if run["warm_files"] and not run["saved_state"] else "")
             + (f"; timed in a new process whose compile loaded the mask state {len(run['warm_files'])} other files "
                "had left (`GrammarCompiler.save_mask_state`)" if run["saved_state"] else "")
             + ("; compiled with `precompute=True` (the grammar's sample code run at compile time, in the compile "
                "time)" if run["precompute"] else "") + ".", "",
             f"mask time {summary['total_s']:.2f} s, median {summary['p50_us']:.1f} µs, "
             f"p99 {summary['p99_ms']:.1f} ms, max {summary['max_ms']:.0f} ms; "
             f"{summary['slow_steps']} steps over 1 ms, "
             f"{summary['slow_steps_classifying']} of them classifying a new lexer state.", "",
             "The timed files made " + ", ".join(f"{n} new {what}" for what, n in summary["made"].items()) + ".", "",
             "| part | calls | s, all steps | s, steps over 1 ms |", "|---|---:|---:|---:|"]
    for p in parts:
        calls = summary["calls"].get(p, "")
        lines.append(f"| {p} | {calls} | {summary['total_s_by_part'][p]:.3f} | {summary['slow_s_by_part'][p]:.3f} |")
        if p == "classify" and calls:
            lines.append(f"| … of which the C trie scan | | {summary['scan_s']:.3f} "
                         f"({summary['scan_s'] / calls * 1e3:.2f} ms a state) | |")
    lines += ["", "If parts of a step cost nothing (a bound on what precomputing them could buy):", "",
              "| free | p99 ms | steps over 1 ms |", "|---|---:|---:|"]
    for free, bound in summary["without"].items():
        lines.append(f"| {free} | {bound['p99_ms']:.2f} | {bound['slow_steps']} |")
    lines += ["", "| slowest steps | ms | " + " | ".join(parts) + " |", "|---|---:|" + "---:|" * len(parts)]
    for s in summary["slowest"]:
        lines.append(f"| {s['file']} #{s['step']} | {s['ns'] / 1e6:.1f} | "
                     + " | ".join(f"{s['parts'][p] / 1e6:.1f}" for p in parts) + " |")
    return "\n".join(lines) + "\n"


def plot(summary: dict[str, Any], language: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    parts = (*PARTS, "other")
    fig, ax = plt.subplots(figsize=(9, 4))
    bottom = np.zeros(len(summary["slowest"]))
    for p in parts:
        values = np.array([s["parts"][p] / 1e6 for s in summary["slowest"]])
        ax.bar(range(len(values)), values, bottom=bottom, label=p)
        bottom += values
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_xlabel("slowest steps")
    ax.set_ylabel("ms")
    ax.set_title(f"{language}: where the slowest masks' time goes")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--language", default="python", choices=["python", "go", "sql", "c", "java", "javascript"])
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=600)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--paths", type=Path, nargs="+",
                        help="time these files of the language instead of the benchmark's (held-out real files)")
    warming = parser.add_mutually_exclusive_group()
    warming.add_argument("--warm-files", type=int, default=0,
                         help="run this many other files of the language through the grammar first, untimed")
    warming.add_argument("--saved-state", type=int, default=0, metavar="N",
                         help="time in a new process that starts with the mask state N other files saved")
    warming.add_argument("--precompute", action="store_true",
                         help="compile with precompute=True: the grammar's sample code runs at compile time")
    parser.add_argument("--state-dir", type=Path, help=argparse.SUPPRESS)  # the timing child's disk cache
    args = parser.parse_args(argv)
    if args.warm_files < 0 or args.saved_state < 0:
        parser.error("--warm-files and --saved-state must be at least 0")
    if args.saved_state and args.state_dir is None:
        with tempfile.TemporaryDirectory() as folder:
            save_state(args.language, args.files, args.max_tokens, args.seed, args.saved_state, Path(folder))
            child = [sys.executable, __file__, *(argv if argv is not None else sys.argv[1:]), "--state-dir", folder]
            return subprocess.run(child, check=False).returncode
    missing = [str(path) for path in args.paths or [] if not path.is_file()]
    if missing:
        parser.error(f"--paths: no such file: {', '.join(missing)}")
    run = profile(args.language, args.files, args.max_tokens, args.seed, args.warm_files or args.saved_state,
                  args.state_dir, args.precompute, args.paths)
    run["saved_state"] = args.state_dir is not None
    run["precompute"] = args.precompute
    summary = summarise(run, args.top)
    shown = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--state-dir" and a != str(args.state_dir)]
    command = "benchmarks/.venv/bin/python benchmarks/mask_profile.py " + " ".join(shown)
    text = markdown(run, summary, command.strip())
    print(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    suffix = f"_state{args.saved_state}" if args.saved_state else f"_warm{args.warm_files}" if args.warm_files else ""
    suffix += "_precompute" if args.precompute else ""
    suffix += "_paths" if args.paths else ""
    stem = RESULTS / f"mask_profile_{args.language}{suffix}"
    stem.with_suffix(".md").write_text(text, encoding="utf-8")
    shown_args = {name: value for name, value in vars(args).items() if name != "state_dir"}
    shown_args["paths"] = [str(path) for path in args.paths or []]
    stem.with_suffix(".json").write_text(json.dumps({"args": shown_args, "summary": summary}, indent=1) + "\n",
                                         encoding="utf-8")
    plot(summary, args.language, stem.with_suffix(".png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
