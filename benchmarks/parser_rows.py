"""How long the parser takes to fill transition rows, in C (`native.Interner`) and in Python.

`ParserCore._fill_row` (one closure per distinct column of a parser state's rows) is what a
first visit of a grammar position spends outside the trie walk. This fills the rows of the first
``--states`` parser states reached breadth first from the start, on fresh cores, with the C
extension and without it, and reports the time spent in ``fill_rows`` alone (median of
``--repeat`` runs). Both versions intern the same states (``tests/engine/test_native.py``).

Usage: .venv/bin/python benchmarks/parser_rows.py [--states 3000] [--repeat 3]
Writes ``benchmarks/results/parser_rows.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

from codemask import Grammar, GrammarCompiler, Vocabulary, assets
from codemask.engine import native
from codemask.engine.automaton import RTN
from codemask.engine.parser import ParserCore

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "tests" / "data" / "jsonschemabench" / "Kubernetes---kb_474_Normalized.json"
RESULTS = ROOT / "benchmarks" / "results"


def grammars() -> dict[str, Grammar]:
    return {"json": Grammar.builtin("json"),
            "python_function": Grammar.from_ebnf((ROOT / "grammars" / "python_function.ebnf").read_text()),
            "kb_474 (JSON Schema)": Grammar.from_json_schema(json.loads(SCHEMA.read_text())["schema"])}


def fill_time(rtn: RTN, states: int) -> tuple[int, float]:
    """Rows filled and the seconds spent in ``fill_rows``, breadth first from a fresh core."""
    core = ParserCore(rtn)
    frontier, known, spent, filled = [core.initial], {core.initial}, 0.0, 0
    for state in frontier:
        if len(frontier) >= states:
            break
        start = time.perf_counter()
        core.fill_rows(np.array([state]))
        spent += time.perf_counter() - start
        filled += 1
        for nxt in core.table[state].tolist():
            if nxt >= 0 and nxt not in known:
                known.add(nxt)
                frontier.append(nxt)
    return filled, spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--states", type=int, default=3000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if not native.available():
        raise SystemExit("the C extension is not built: reinstall codemask with a C compiler")
    compiler = GrammarCompiler(Vocabulary.from_tokenizer(assets.load_tokenizer("llama3")), cache_dir=False,
                               progress=False, precompute=False)
    rows = []
    for name, grammar in grammars().items():
        rtn = compiler.compile(grammar).artifacts.rtn
        result: dict[str, object] = {"grammar": name}
        for label, use in (("python", False), ("c", True)):
            with native.using(use):
                runs = [fill_time(rtn, args.states) for _ in range(args.repeat)]
            result["rows"] = runs[0][0]
            result[f"{label}_ms"] = 1e3 * statistics.median(seconds for _, seconds in runs)
        result["speedup"] = float(result["python_ms"]) / float(result["c_ms"])  # type: ignore[arg-type]
        rows.append(result)
    lines = ["| grammar | rows filled | Python ms | C ms | C speed-up |", "|---|---:|---:|---:|---:|"]
    lines += [f"| {r['grammar']} | {r['rows']} | {r['python_ms']:.1f} | {r['c_ms']:.1f} | {r['speedup']:.1f}× |"
              for r in rows]
    table = "\n".join(lines)
    print(table)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "parser_rows.json").write_text(json.dumps({"states": args.states, "repeat": args.repeat,
                                                          "results": rows}, indent=2) + "\n")
    (RESULTS / "parser_rows.md").write_text(
        f"### Parser rows, C vs Python (`benchmarks/parser_rows.py --states {args.states}`)\n\n{table}\n")


if __name__ == "__main__":
    main()
