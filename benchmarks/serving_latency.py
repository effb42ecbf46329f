"""IDE latency: line completions at cursors in real Python files, through ``codemask serve`` over HTTP.

An editor asks for the rest of the line at its cursor, with the whole file around it, and shows the
first token as soon as it comes. This benchmark does that to a ``codemask serve`` subprocess for each
packaged model — SmolLM2-135M (no fill-in-the-middle tokens: the model sees the prefix, the grammar
sees the suffix) and Qwen2.5-Coder-0.5B (its FIM format) — one request at a time:

- **Files**: modules of this interpreter's standard library (``sysconfig``'s ``stdlib``, no test
  folders) that are UTF-8, parse, and hold 1,000-5,000 bytes, minus every file the repository's tests
  sample from the standard library (``tests/grammar/test_python.py``); a seeded choice of them.
- **Cursors** (seeded, at token boundaries of one-line statements that are neither a docstring nor
  commented): *end of line*: the rest of the line is deleted, the suffix starts at its newline;
  *middle of a line*: on a line that ends in closing brackets or a colon (``foo(a, b(c)):``), the
  text between the cursor and that tail is deleted and the tail stays in the suffix, as an editor
  that closed the brackets leaves it.
- **Requests**: ``POST /v1/completions`` with ``prompt`` = the file before the cursor, ``suffix`` =
  the file after the deleted text, ``until: "line"``, ``max_tokens`` 48, temperature 0, streamed;
  once plain and once with ``language: "python"``.
- **Measured** by the client: time to the first chunk with text, time to ``data: [DONE]``; whether
  the file with the completion in place (``prefix + completion + suffix``) parses with ``ast.parse``;
  whether the completion is the deleted text; how many ran to the token limit. One untimed request
  with ``language`` warms each server up first (its time is reported: the Python grammar's first
  compile for the model's vocabulary).

Usage: .venv/bin/python benchmarks/serving_latency.py [--cursors 40] [--models smollm2,qwen-coder]
Writes ``benchmarks/results/serving_latency.{json,md,png}``.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse
import ast
import io
import random
import sys
import sysconfig
import tempfile
import time
import tokenize
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from publish import publish
from servers import Server, codemask_command, free_port, machine, percentile, running, stream_completion

MODELS = {"smollm2": "SmolLM2-135M", "qwen-coder": "Qwen2.5-Coder-0.5B"}
CONFIGS = {"plain": {}, "language": {"language": "python"}}
CLOSERS = {")", "]", "}", ":"}
SKIPPED_FOLDERS = {"test", "tests", "idle_test", "site-packages", "lib2to3"}
LOGS = Path(tempfile.gettempdir()) / "codemask-serving-logs"


@dataclass(frozen=True)
class Cursor:
    """A completion point: the file before it, the deleted text an editor user would type, the rest."""

    path: str
    kind: str  # "end" (of a line) or "mid" (the line's closing tail stays after the cursor)
    prefix: str
    deleted: str
    suffix: str


# -- the files and cursors ------------------------------------------------------------------------


def parses(source: str) -> bool:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            ast.parse(source)
        except (SyntaxError, ValueError):
            return False
    return True


def files_in_tests() -> set[str]:
    """The standard library files (paths relative to its root) that the repository's tests sample."""
    from tests.grammar import test_python
    from tests.python_harness import STDLIB

    sampled = [p for offset in range(4) for p in test_python.sample(12, offset)]
    sampled += [p for offset in range(3) for p in test_python.sample(8, offset)]
    sampled += sorted(test_python.library(), key=lambda f: f.stat().st_size)[40:120:40]
    return {str(p.relative_to(STDLIB)) for p in sampled}


def held_out_files(root: Path) -> list[Path]:
    """The standard library modules of 1,000-5,000 bytes that parse and that no test reads, sorted."""
    excluded = files_in_tests()
    found = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if set(relative.parts[:-1]) & SKIPPED_FOLDERS or str(relative) in excluded:
            continue
        if not 1000 <= path.stat().st_size <= 5000:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        if parses(text) and not text.startswith("\ufeff"):
            found.append(path)
    return found


def one_line_statements(text: str) -> list[list[tokenize.TokenInfo]]:
    """The significant tokens of each logical line that is one physical line without a comment and
    does not start with a string (docstrings), with at least three tokens."""
    lines: list[list[tokenize.TokenInfo]] = []
    current: list[tokenize.TokenInfo] = []
    skip = {tokenize.INDENT, tokenize.DEDENT, tokenize.NL, tokenize.ENCODING, tokenize.ENDMARKER}
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type in skip:
            continue
        if tok.type == tokenize.NEWLINE:
            rows = {t.start[0] for t in current} | {t.end[0] for t in current}
            commented = any(t.type == tokenize.COMMENT for t in current)
            if len(rows) == 1 and not commented and len(current) >= 3 and current[0].type != tokenize.STRING:
                lines.append(current)
            current = []
        else:
            current.append(tok)
    return lines


def cursors_in(path: Path, root: Path, rng: random.Random) -> list[Cursor]:
    """One end-of-line cursor and, where a line ends in closers, one mid-line cursor in the file."""
    text = path.read_text(encoding="utf-8")
    starts = [0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))

    def offset(position: tuple[int, int]) -> int:
        return starts[position[0] - 1] + position[1]

    name = str(path.relative_to(root))
    lines = one_line_statements(text)
    found = []
    if lines:
        tokens = rng.choice(lines)
        keep = rng.randrange(1, len(tokens))
        cursor, line_end = offset(tokens[keep - 1].end), offset(tokens[-1].end)
        found.append(Cursor(name, "end", text[:cursor], text[cursor:line_end], text[line_end:]))
    closing = [(t, len(t) - _tail_length(t)) for t in lines if 2 <= len(t) - _tail_length(t) < len(t)]
    if closing:
        tokens, body = rng.choice(closing)
        keep = rng.randrange(1, body)
        cursor, tail = offset(tokens[keep - 1].end), offset(tokens[body].start)
        found.append(Cursor(name, "mid", text[:cursor], text[cursor:tail], text[tail:]))
    return found


def _tail_length(tokens: list[tokenize.TokenInfo]) -> int:
    """How many closing brackets and colons end the line."""
    count = 0
    while count < len(tokens) and tokens[-1 - count].string in CLOSERS:
        count += 1
    return count


def choose_cursors(count: int, seed: int) -> tuple[Path, list[Cursor]]:
    """``count`` cursors, half of each kind, from a seeded order of the held-out files."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = held_out_files(root)
    rng = random.Random(seed)
    rng.shuffle(files)
    wanted = {"end": count - count // 2, "mid": count // 2}
    chosen: list[Cursor] = []
    for path in files:
        for cursor in cursors_in(path, root, rng):
            if wanted[cursor.kind] > 0:
                wanted[cursor.kind] -= 1
                chosen.append(cursor)
        if not any(wanted.values()):
            break
    return root, chosen


# -- the runs -------------------------------------------------------------------------------------


def request(cursor: Cursor, config: str, max_tokens: int) -> dict[str, Any]:
    return {"prompt": cursor.prefix, "suffix": cursor.suffix, "until": "line", "max_tokens": max_tokens,
            "temperature": 0, **CONFIGS[config]}


def run_model(model: str, cursors: list[Cursor], max_tokens: int) -> dict[str, Any]:
    """Every cursor under every configuration, one request at a time, against a fresh server."""
    port = free_port()
    results: dict[str, list[dict[str, Any]]] = {config: [] for config in CONFIGS}
    with running(codemask_command(model, port), port, model, LOGS / f"serving_latency_{model}.log") as server, \
            httpx.Client(timeout=600) as client:
        started = time.perf_counter()
        stream_completion(client, server, request(cursors[0], "language", max_tokens))
        warmup = time.perf_counter() - started
        for i, cursor in enumerate(cursors):
            for config in CONFIGS:
                results[config].append(one(client, server, cursor, config, max_tokens))
            print(f"  {model} {i + 1}/{len(cursors)}", file=sys.stderr, flush=True)
    from codemask.assets import load_tokenizer
    from codemask.server.fim import completion_prompt

    tokenizer = load_tokenizer(model)
    lengths = [len(tokenizer.encode(completion_prompt(tokenizer, c.prefix, c.suffix))) for c in cursors]
    return {"model": MODELS[model], "warmup_s": warmup, "prompt_tokens_p50": percentile(lengths, 50),
            "prompt_tokens_max": max(lengths),
            "configs": {config: summary(rows) for config, rows in results.items()}, "requests": results}


def one(client: httpx.Client, server: Server, cursor: Cursor, config: str, max_tokens: int) -> dict[str, Any]:
    got = stream_completion(client, server, request(cursor, config, max_tokens))
    return {"path": cursor.path, "kind": cursor.kind, "deleted": cursor.deleted, "completion": got.text,
            "first_token_s": got.first_token_s, "total_s": got.total_s, "finish_reason": got.finish_reason,
            "chunks": got.chunks, "parses": parses(cursor.prefix + got.text + cursor.suffix),
            "suffix_intact": suffix_intact(cursor.prefix + got.text, cursor.suffix),
            "exact": got.text.rstrip() == cursor.deleted.rstrip()}


def suffix_intact(before: str, suffix: str) -> bool:
    """Whether the file parses with the suffix still code: no token of it (a comment or a string the
    completion opened) runs across the end of the completion. A completion that ends in an open
    comment parses with the rest of the cursor's line commented out, and is counted as not intact."""
    if not parses(before + suffix):
        return False
    starts = [0]
    for line in (before + suffix).splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    boundary = len(before)
    for tok in tokenize.generate_tokens(io.StringIO(before + suffix).readline):
        begin, end = starts[tok.start[0] - 1] + tok.start[1], starts[tok.end[0] - 1] + tok.end[1]
        if begin < boundary < end:
            return False
        if begin >= boundary:
            return True
    return True


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def share(key: str, kind: str | None = None) -> float:
        picked = [r for r in rows if kind is None or r["kind"] == kind]
        return sum(bool(r[key]) for r in picked) / len(picked) if picked else float("nan")

    first = [r["first_token_s"] for r in rows]
    total = [r["total_s"] for r in rows]
    return {"n": len(rows), "first_token_p50_s": percentile(first, 50), "first_token_p95_s": percentile(first, 95),
            "total_p50_s": percentile(total, 50), "total_p95_s": percentile(total, 95),
            "parses": share("parses"), "parses_end": share("parses", "end"), "parses_mid": share("parses", "mid"),
            "suffix_intact": share("suffix_intact"),
            "exact": share("exact"), "empty": sum(not r["completion"] for r in rows),
            "to_limit": sum(r["finish_reason"] == "length" for r in rows)}


# -- the report -----------------------------------------------------------------------------------


def markdown(report: dict[str, Any]) -> str:
    lines = ["### IDE latency (`benchmarks/serving_latency.py`)", "",
             f"{report['machine']}, load average {report['load_average_at_start'][0]} at the start, "
             f"{report['date']}; {report['cursors']} cursors ({report['kinds']['end']} at the end of a line, "
             f"{report['kinds']['mid']} in the middle) in {report['files']} standard library files, one streamed "
             f"request at a time, `until: \"line\"`, max_tokens {report['max_tokens']}, temperature 0; "
             f"`{report['command']}`.", "",
             "| model | `language` | first token p50 / p95 ms | total p50 / p95 ms | parses in place "
             "(end / mid) | parses, suffix intact | = deleted text | ran to the limit |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for entry in report["models"]:
        for config, s in entry["configs"].items():
            lines.append(f"| {entry['model']} | {'python' if config == 'language' else '—'} | "
                         f"{1000 * s['first_token_p50_s']:.0f} / {1000 * s['first_token_p95_s']:.0f} | "
                         f"{1000 * s['total_p50_s']:.0f} / {1000 * s['total_p95_s']:.0f} | "
                         f"{s['parses']:.0%} ({s['parses_end']:.0%} / {s['parses_mid']:.0%}) | "
                         f"{s['suffix_intact']:.0%} | {s['exact']:.0%} | "
                         f"{s['to_limit']}/{s['n']} |")
    warm = ", ".join(f"{e['model']} {e['warmup_s']:.1f} s" for e in report["models"])
    sizes = ", ".join(f"{e['model']} {e['prompt_tokens_p50']:.0f} (at most {e['prompt_tokens_max']})"
                      for e in report["models"])
    lines += ["", f"The prompts hold a median of {sizes} tokens: the file before the cursor, and for Qwen2.5-Coder "
              "the file after it too (its FIM format). The time to the first token is mostly the forward pass over "
              "them. The first request (untimed, "
              f"with `language`) took {warm}: the Python grammar's compile for the model's vocabulary, once per "
              "server."]
    return "\n".join(lines)


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(11, 3.6))
    labels = [f"{e['model']}\n{'language' if c == 'language' else 'plain'}"
              for e in report["models"] for c in e["configs"]]
    stats = [s for e in report["models"] for s in e["configs"].values()]
    x = range(len(labels))
    for ax, key, title in ((axes[0], "first_token", "first token (ms)"), (axes[1], "total", "total latency (ms)")):
        ax.bar([i - 0.2 for i in x], [1000 * s[f"{key}_p50_s"] for s in stats], 0.4, label="p50")
        ax.bar([i + 0.2 for i in x], [1000 * s[f"{key}_p95_s"] for s in stats], 0.4, label="p95")
        ax.set_title(title)
        ax.legend()
    axes[2].bar(list(x), [100 * s["parses"] for s in stats])
    axes[2].set_title("parses in place (%)")
    axes[2].set_ylim(0, 100)
    for ax in axes:
        ax.set_xticks(list(x), labels, fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cursors", type=int, default=40, help="cursors, half at the end of a line, half mid-line")
    parser.add_argument("--models", default="smollm2,qwen-coder")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    report: dict[str, Any] = {**machine(), "max_tokens": args.max_tokens, "seed": args.seed,
                              "command": ".venv/bin/python benchmarks/serving_latency.py " + " ".join(sys.argv[1:])}
    root, cursors = choose_cursors(args.cursors, args.seed)
    report |= {"stdlib": str(root), "cursors": len(cursors), "files": len({c.path for c in cursors}),
               "kinds": {kind: sum(c.kind == kind for c in cursors) for kind in ("end", "mid")},
               "cursor_list": [asdict(c) | {"prefix": len(c.prefix), "suffix": len(c.suffix)} for c in cursors]}
    report["models"] = [run_model(model, cursors, args.max_tokens) for model in args.models.split(",")]
    publish("serving_latency", report, markdown(report), plot)


if __name__ == "__main__":
    main()
