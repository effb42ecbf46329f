"""The Python grammar against CPython's parser on the whole standard library.

    .venv/bin/python benchmarks/python_stdlib.py [--root /usr/lib/python3.11] [--tokenizer llama3]
        [--mask-files 40] [--mutant-files 120] [--mutants 20] [--out benchmarks/results/python_stdlib.json]

For every ``.py`` file under ``--root`` that ``ast.parse`` accepts (and that is UTF-8):

1. *bytes*: the file fed byte by byte to the builtin ``python`` grammar must be accepted;
2. *tokens*: the file tokenised by a real tokenizer and fed with ``accept_token``, then EOS, must
   be accepted;
3. *masks* (a sample of ``--mask-files`` files, spread over the sorted list): at every token the
   next-token mask must allow the token taken (and agree with ``accept_token``), and EOS exactly
   at the end; mask times are recorded (first seen state = cold, repeated = cached);
4. *mutants* (``--mutant-files`` files x ``--mutants`` edits): a mutant that ``ast.parse`` rejects
   must not be accepted; one it accepts must be accepted. Where the engine cuts a rejected
   mutant off is compared with the edit's offset and CPython's error line.

Results go to ``--out`` (JSON) and a summary to stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
import zlib
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from codemask import Grammar, GrammarCompiler, GrammarMatcher, Vocabulary  # noqa: E402
from codemask.assets import load_tokenizer  # noqa: E402
from tests.python_harness import STDLIB, byte_verdict, mutants, stdlib_files  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))] if ordered else float("nan")


def check_tokens(compiled: Any, tokenizer: Any, eos: int, text: str, masks: bool,
                 times: list[float]) -> tuple[bool, str]:
    """Feed ``text`` token by token (and EOS); with ``masks``, check and time every mask."""
    matcher = GrammarMatcher(compiled)
    # a file's text is text: "<|begin_of_text|>" in a string is not the special token
    ids = tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True)
    for i, token in enumerate([*ids, eos]):
        if masks:
            start = time.perf_counter()
            allowed = matcher.is_token_allowed(token)
            times.append(time.perf_counter() - start)
            if allowed != matcher.fork().accept_token(token):
                return False, f"mask and accept_token disagree at token {i}"
        if not matcher.accept_token(token):
            return False, f"token {i} ({tokenizer.decode([token])!r}) refused"
    return True, ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=STDLIB)
    parser.add_argument("--tokenizer", default="llama3")
    parser.add_argument("--mask-files", type=int, default=40)
    parser.add_argument("--mutant-files", type=int, default=120)
    parser.add_argument("--mutants", type=int, default=20)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/python_stdlib.json")
    args = parser.parse_args()

    files = stdlib_files(args.root)
    grammar = Grammar.builtin("python")
    tokenizer = load_tokenizer(args.tokenizer)
    vocab = Vocabulary.from_tokenizer(tokenizer)
    start = time.perf_counter()
    compiled = GrammarCompiler(vocab, cache_dir=False, progress=False).compile(grammar)
    compile_s = time.perf_counter() - start
    core = compiled.core
    eos = vocab.eos_token_id
    result: dict[str, Any] = {"python": platform.python_version(), "root": str(args.root), "files": len(files),
                              "tokenizer": args.tokenizer, "compile_s": compile_s, "machine": platform.processor()}

    start = time.perf_counter()
    byte_fails = [str(f) for f in files if not byte_verdict(core, f.read_bytes())[1]]
    result["bytes"] = {"accepted": len(files) - len(byte_fails), "failures": byte_fails,
                       "seconds": time.perf_counter() - start}
    print(f"bytes: {len(files) - len(byte_fails)}/{len(files)} accepted", flush=True)

    step = max(1, len(files) // max(1, args.mask_files))
    mask_sample = set(files[::step][: args.mask_files])
    times: list[float] = []
    token_fails = []
    tokens = 0
    start = time.perf_counter()
    for f in files:
        text = f.read_text(encoding="utf-8")
        ok, why = check_tokens(compiled, tokenizer, eos, text, f in mask_sample, times)
        if f in mask_sample:
            tokens += len(tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True))
        if not ok:
            token_fails.append(f"{f}: {why}")
    result["tokens"] = {"accepted": len(files) - len(token_fails), "failures": token_fails,
                        "seconds": time.perf_counter() - start}
    micro = [t * 1e6 for t in times]
    result["masks"] = {"files": len(mask_sample), "masks": len(micro), "median_us": statistics.median(micro),
                       "p99_us": percentile(micro, 99), "max_us": max(micro), "mean_us": statistics.fmean(micro)}
    print(f"tokens: {len(files) - len(token_fails)}/{len(files)} accepted; masks on {len(mask_sample)} files: "
          f"median {result['masks']['median_us']:.1f} us, p99 {result['masks']['p99_us']:.1f} us", flush=True)

    step = max(1, len(files) // max(1, args.mutant_files))
    counts = {"invalid": 0, "false_accept": 0, "valid": 0, "false_reject": 0, "cut_at_or_after_edit": 0,
              "cut_by_cpython_line": 0}
    examples = []
    for f in files[::step][: args.mutant_files]:
        for m in mutants(f.read_text(encoding="utf-8"), args.mutants, seed=zlib.crc32(f.name.encode())):
            data = m.text.encode("utf-8")
            taken, accepted = byte_verdict(core, data)
            if m.valid:
                counts["valid"] += 1
                counts["false_reject"] += not accepted
            else:
                counts["invalid"] += 1
                if accepted:
                    counts["false_accept"] += 1
                    examples.append({"file": str(f), "edit": m.edit, "offset": m.offset})
                else:
                    counts["cut_at_or_after_edit"] += taken >= m.offset
                    counts["cut_by_cpython_line"] += data[:taken].count(b"\n") + 1 <= _error_line(m.text)
    result["mutants"] = {**counts, "false_accept_examples": examples[:20]}
    print(f"mutants: {counts}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")


def _error_line(text: str) -> int:
    import ast
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            ast.parse(text)
        except SyntaxError as exc:
            return exc.lineno or 1 << 30
    return 1 << 30


if __name__ == "__main__":
    main()
