"""JSON Schema correctness at the byte level over a large seeded sample of jsonschemabench.

`jsonschema_coverage.py` compares the engines token by token on a few schemas per subset; this
check is the wide one for codemask alone: a seeded sample of hundreds of schemas from
``$CODEMASK_DATA/jsonschemabench``, each compiled to a grammar and run through the byte-level
`Recognizer` (no tokenizer, no mask cache), with every test instance serialised compactly
(``ensure_ascii=False``) and indented. It reports how many schemas compile, are refused
(`UnsupportedSchemaError`, by keyword) or time out, and the two numbers that matter: valid
instances refused (must be 0) and invalid instances rejected. Results:
``benchmarks/results/jsonschema_bytelevel.json``.

    .venv/bin/python benchmarks/jsonschema_bytelevel.py --sample 300
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from codemask.engine.recognizer import Recognizer
from codemask.errors import CodemaskError, UnsupportedSchemaError
from codemask.grammar.grammar import Grammar

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: tests.data_paths
from tests.data_paths import corpora_root

BENCH = corpora_root() / "jsonschemabench"
RESULTS = Path(__file__).resolve().parent / "results" / "jsonschema_bytelevel.json"


class CompileTimeout(Exception):
    """A schema took longer than the time limit to become a recognizer."""


def _alarm(signum: int, frame: Any) -> None:
    raise CompileTimeout


def compile_schema(schema: Any, limit_s: int) -> tuple[Recognizer, float, float]:
    """The schema's recognizer and the wall and CPU seconds it took (grammar IR plus rule automata:
    what `GrammarCompiler.compile` does now that token masks are classified lazily). CPU time is
    the figure to compare on a machine other jobs load."""
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(limit_s)
    start, cpu_start = time.perf_counter(), time.process_time()
    try:
        recognizer = Recognizer(Grammar.from_json_schema(schema, mode="validate"))
        return recognizer, time.perf_counter() - start, time.process_time() - cpu_start
    finally:
        signal.alarm(0)


def check_instances(recognizer: Recognizer, tests: list[dict[str, Any]], counts: collections.Counter[str],
                    refused: list[dict[str, str]], name: str) -> None:
    for test in tests:
        for text in (json.dumps(test["data"], ensure_ascii=False), json.dumps(test["data"], indent=2)):
            accepted = recognizer.accepts(text)
            if test["valid"]:
                counts["valid"] += 1
                if not accepted:
                    refused.append({"schema": name, "instance": text[:200]})
            else:
                counts["invalid"] += 1
                counts["invalid_rejected"] += not accepted


def run(sample: int, seed: int, limit_s: int) -> dict[str, Any]:
    files = sorted(BENCH.glob("*.json"))
    random.Random(seed).shuffle(files)
    counts: collections.Counter[str] = collections.Counter()
    refusals: collections.Counter[str] = collections.Counter()
    refused_valid: list[dict[str, str]] = []
    seconds: list[float] = []
    cpu_seconds: list[float] = []
    for path in files[:sample]:
        case = json.loads(path.read_text(encoding="utf-8"))
        try:
            recognizer, took, cpu = compile_schema(case["schema"], limit_s)
        except UnsupportedSchemaError as exc:
            counts["refused"] += 1
            refusals[exc.keyword] += 1
            continue
        except CompileTimeout:
            counts["timeout"] += 1
            continue
        except CodemaskError:
            counts["error"] += 1
            continue
        counts["compiled"] += 1
        seconds.append(took)
        cpu_seconds.append(cpu)
        check_instances(recognizer, case.get("tests", []), counts, refused_valid, path.name)
    return {
        "benchmark": "jsonschema_bytelevel", "sample": sample, "seed": seed, "compile_limit_s": limit_s,
        "counts": dict(counts), "refused_by_keyword": dict(refusals.most_common()),
        "valid_refused": refused_valid,
        "ir_and_automata_s": _quantiles(seconds), "ir_and_automata_cpu_s": _quantiles(cpu_seconds),
    }


def _quantiles(values: list[float]) -> dict[str, float | None]:
    ordered = sorted(values)
    return {"p50": statistics.median(ordered) if ordered else None,
            "p90": ordered[int(0.9 * (len(ordered) - 1))] if ordered else None,
            "p99": ordered[int(0.99 * (len(ordered) - 1))] if ordered else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sample", type=int, default=300, help="schemas in the seeded sample")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--compile-timeout", type=int, default=10, help="seconds per schema")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    result = run(args.sample, args.seed, args.compile_timeout)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    counts = result["counts"]
    print(f"compiled {counts.get('compiled', 0)}/{args.sample}, refused {counts.get('refused', 0)}, "
          f"timeouts {counts.get('timeout', 0)}, errors {counts.get('error', 0)}; "
          f"valid refused {len(result['valid_refused'])}/{counts.get('valid', 0)}, "
          f"invalid rejected {counts.get('invalid_rejected', 0)}/{counts.get('invalid', 0)}; "
          f"compile p50 {result['ir_and_automata_s']['p50']:.3f} s wall, "
          f"{result['ir_and_automata_cpu_s']['p50']:.3f} s CPU")


if __name__ == "__main__":
    main()
