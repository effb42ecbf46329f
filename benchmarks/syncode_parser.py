"""SynCode's false rejections at the parser level, on the files `code_grammars.py` measures.

`code_grammars.py` drives SynCode's logits processor, which needs SynCode's mask store: built in pure
Python over every FSM state x the 128k-token vocabulary, it does not finish within the benchmark's
limit on this machine, so that benchmark cannot say how often SynCode refuses valid code. What it
can say without the store is where SynCode's *incremental parser* — the first half of every SynCode
step (`GrammarConstrainer`: parse the text so far, then look the mask up) — fails on a prefix of a
valid file: SynCode then logs "Parsing failed" and decodes unconstrained from there, so the file is
not constrained to its end. Those failures are a lower bound on SynCode's false rejections (its
masks can only refuse more: it masks out valid tokens at token boundaries, its paper's known
over-approximation). codemask's count on the same files is its whole false-rejection count
(`code_grammars.py`: every token allowed by its mask, EOS after whole files).

Run in the benchmarks' environment (``bash benchmarks/setup.sh``, SynCode installed as its
docstring says)::

    benchmarks/.venv/bin/python benchmarks/syncode_parser.py                 # 4 files x 600 tokens, seed 0
    benchmarks/.venv/bin/python benchmarks/syncode_parser.py --seeds 0 1 2   # more files of each language

Same files, tokenizer and cut as ``code_grammars.py`` (``load_docs``); each prefix the token
sequence reaches is parsed as SynCode parses it (the decoded text, its incomplete UTF-8 tail set
aside). Writes ``benchmarks/results/syncode_parser.{json,md}``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
import types
from pathlib import Path
from typing import Any

for _name, _value in {"OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1",
                      "LOG_LEVEL": "ERROR"}.items():
    os.environ.setdefault(_name, _value)

from code_grammars import SYNCODE_CACHE, Doc, load_docs  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
LANGUAGES = ("python", "go", "sql", "c", "java")


def syncode_parser(language: str) -> Any:
    """SynCode's incremental parser for its grammar of ``language``, made as `GrammarConstrainer` makes it."""
    os.environ["SYNCODE_CACHE"] = str(SYNCODE_CACHE) + "/"
    try:
        import datasets  # noqa: F401
    except ImportError:  # only syncode.dataset (its evaluation data sets) uses it
        sys.modules["datasets"] = types.SimpleNamespace(load_dataset=None)  # type: ignore[assignment]
    import syncode
    from syncode.grammar_mask.grammar_constrainer import GrammarConstrainer
    from syncode.parsers import create_parser

    grammar = syncode.Grammar(language)
    ignore_whitespace = GrammarConstrainer._get_ignore_whitespace(None, grammar)  # type: ignore[arg-type]
    return create_parser(grammar, parser="lalr", ignore_whitespace=ignore_whitespace)


def first_failure(parser: Any, doc: Doc, tokenizer: Any) -> dict[str, Any] | None:
    """The first prefix (by token) SynCode's parser fails on, or None when every prefix parses."""
    parser.reset()
    for count in range(1, len(doc.tokens) + 1):
        data = tokenizer.decode(doc.tokens[:count], skip_special_tokens=True).encode("utf-8", "surrogatepass")
        text = data.decode("utf-8", "ignore")  # (SynCode keeps an incomplete UTF-8 tail aside)
        try:
            parser.get_acceptable_next_terminals(text)
        except Exception as exc:
            error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
            return {"token": count - 1, "line": text.count("\n") + 1, "error": error, "context": text[-60:]}
    return None


def run(languages: list[str], seeds: list[int], files: int, max_tokens: int) -> dict[str, Any]:
    from codemask.assets import load_tokenizer

    tokenizer = load_tokenizer("llama3")
    results: dict[str, Any] = {}
    for language in languages:
        parser = syncode_parser(language)
        docs = {doc.name: doc for seed in seeds for doc in load_docs(language, files, max_tokens, tokenizer, seed)}
        start = time.perf_counter()
        failures = {name: first_failure(parser, doc, tokenizer) for name, doc in docs.items()}
        refused = {name: failure for name, failure in failures.items() if failure is not None}
        results[language] = {"files": len(docs), "refused": len(refused), "failures": refused,
                             "seconds": round(time.perf_counter() - start, 1)}
        print(f"[{language}] SynCode's parser failed on {len(refused)} of {len(docs)} files", flush=True)
    return results


def report(results: dict[str, Any], command: str) -> str:
    lines = ["### SynCode's parser on the benchmark's files (`benchmarks/syncode_parser.py`)", "",
             f"{datetime.date.today()}; `{command}`. Files SynCode's incremental parser fails on at some prefix "
             "(a lower bound on its false rejections; codemask's are `code_grammars.py`'s).", "",
             "| language | files | SynCode's parser fails | first failure |", "|---|---:|---:|---|"]
    for language, result in results.items():
        first = next(iter(result["failures"].items()), None)
        where = f"{first[0]}, line {first[1]['line']}: {first[1]['error'][:90]}" if first else ""
        lines.append(f"| {language} | {result['files']} | {result['refused']} | {where.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--languages", default=",".join(LANGUAGES))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=600)
    args = parser.parse_args()
    languages = args.languages.split(",")
    unknown = sorted(set(languages) - set(LANGUAGES))
    if unknown:
        parser.error(f"--languages: SynCode 0.4.16 ships no grammar for {', '.join(unknown)} "
                     f"(it has {', '.join(LANGUAGES)})")
    results = run(languages, args.seeds, args.files, args.max_tokens)
    command = "benchmarks/.venv/bin/python benchmarks/syncode_parser.py " + " ".join(sys.argv[1:])
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "syncode_parser.json").write_text(json.dumps({"command": command, "results": results}, indent=1))
    text = report(results, command.strip())
    (RESULTS / "syncode_parser.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
