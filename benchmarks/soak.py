"""Memory of one compiled grammar that serves request after request: resident memory over 10,000
nested JSON documents, with the masks checked against fresh compiles on the way.

A server compiles a grammar once and makes a matcher per request. Every engine runs in a process
of its own (so that each one's resident set is its own), compiles its builtin JSON grammar for the
Llama-3 tokenizer once, and then, per request, makes a new matcher and asks the mask before every
token of a document and accepts it. Resident memory (``/proc/self/statm``) is sampled every
``--sample-every`` requests. The documents are seeded random JSON values of 10-60 containers
nested up to a few dozen deep (new stacks keep appearing, as with real nested data), the same for
every engine.

- ``codemask``: the default compiler (`GrammarCompiler`, whose compiled grammars keep at most
  `DEFAULT_MAX_PARSER_STATES` parser states for new matchers). Every ``--check-every``-th request
  its masks are compared with those of a fresh compile of the same grammar (the mask at every
  token); the count of differing masks must be 0.
- ``codemask_unbounded``: the same with ``max_parser_states`` out of reach, i.e. one generation of
  parser states for the whole run, as before the bound; stopped at ``--unbounded-limit-mb``.
- ``xgrammar``, ``llguidance``: the peers through `engines.py` (where installed: benchmarks/.venv).

Usage: benchmarks/.venv/bin/python benchmarks/soak.py [--requests 10000] [--engines ...]
Writes ``benchmarks/results/soak.{json,md,png}``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import one_thread  # noqa: F401  (before numpy, torch and the engines: one thread each, offline)

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
ENGINE_NAMES = ("codemask", "codemask_unbounded", "xgrammar", "llguidance")


def nested_document(rng: random.Random, budget: list[int], top: bool = False) -> object:
    """A random JSON value of about ``budget[0]`` containers (an object or array at the top)."""
    if not top and (budget[0] <= 0 or rng.random() < 0.2):
        return rng.choice([rng.randrange(-1000, 1000), round(rng.uniform(-10, 10), 3), f"s{rng.randrange(100)}",
                           True, False, None])
    budget[0] -= 1
    if rng.random() < 0.5:
        return {rng.choice(["id", "name", "items", "meta", "value", "children"]): nested_document(rng, budget)
                for _ in range(rng.randrange(1, 3))}
    return [nested_document(rng, budget) for _ in range(rng.randrange(1, 3))]


def documents(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [json.dumps(nested_document(rng, [rng.randrange(10, 60)], top=True), indent=2 if i % 3 == 0 else None)
            for i in range(count)]


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


# -- one engine, in a process of its own ---------------------------------------------------------------

def run_engine(engine: str, args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np

    from codemask import assets

    tokenizer = assets.load_tokenizer(args.tokenizer)
    texts = documents(args.requests, args.seed)
    token_ids = [tokenizer.encode(text, add_special_tokens=False) for text in texts]
    vocab_size, eos = len(tokenizer), int(tokenizer.eos_token_id)
    step, checker = _driver(engine, tokenizer, vocab_size, eos, args)
    samples: list[tuple[int, float]] = [(0, rss_mb())]
    checked = differing = tokens = 0
    started = time.perf_counter()
    stopped = None
    for n, ids in enumerate(token_ids, 1):
        masks = step(ids)
        tokens += len(ids)
        if checker is not None and n % args.check_every == 0:
            checking = time.perf_counter()
            want = checker(ids)
            started += time.perf_counter() - checking  # (not the engine's time)
            checked += len(want)
            differing += int((~np.all(masks == want, axis=1)).sum())
        if n % args.sample_every == 0:
            samples.append((n, rss_mb()))
            if engine == "codemask_unbounded" and samples[-1][1] > args.unbounded_limit_mb:
                stopped = f"stopped at {samples[-1][1]:.0f} MB (--unbounded-limit-mb)"
                break
    seconds = time.perf_counter() - started
    return {"engine": engine, "samples": samples, "requests": samples[-1][0], "tokens": tokens, "seconds": seconds,
            "masks_checked": checked, "masks_differing": differing, "stopped": stopped}


def _driver(engine: str, tokenizer: Any, vocab_size: int, eos: int, args: argparse.Namespace) -> tuple[Any, Any]:
    """``step(ids)``: one request (a new matcher, a mask before every token, the token accepted),
    returning its masks; ``check(ids)``: the masks of a fresh compile (codemask only)."""
    import numpy as np

    if engine.startswith("codemask"):
        from codemask import Grammar, GrammarCompiler, GrammarMatcher, Vocabulary

        vocab = Vocabulary.from_tokenizer(tokenizer, vocab_size=vocab_size, stop_token_ids=[eos])
        limit = {"max_parser_states": 2**62} if engine == "codemask_unbounded" else {}
        compiled = GrammarCompiler(vocab, cache_dir=False, progress=False, **limit).compile(Grammar.builtin("json"))

        def masks_of(grammar: Any, ids: list[int]) -> np.ndarray:
            matcher = GrammarMatcher(grammar)
            rows = np.zeros((len(ids), (vocab_size + 31) // 32), dtype=np.int32)
            for i, token in enumerate(ids):
                matcher.fill_next_token_bitmask(rows, i)
                if not matcher.accept_token(token):
                    raise RuntimeError(f"codemask refused token {i} of a document")
            return rows

        def fresh(ids: list[int]) -> np.ndarray:
            reference = GrammarCompiler(vocab, cache_dir=False, progress=False).compile(Grammar.builtin("json"))
            return masks_of(reference, ids)

        return (lambda ids: masks_of(compiled, ids)), fresh if engine == "codemask" else None

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import torch

    from engines import ENGINES

    adapter = ENGINES[engine](tokenizer, vocab_size, eos)
    compiled_peer, _seconds = adapter.compile("json", None)
    bitmask = torch.zeros((1, (vocab_size + 31) // 32), dtype=torch.int32)

    def step(ids: list[int]) -> np.ndarray:
        matcher = adapter.new_matcher(compiled_peer)
        for i, token in enumerate(ids):
            adapter.fill_mask(matcher, bitmask)
            if not adapter.accept(matcher, token):
                raise RuntimeError(f"{engine} refused token {i} of a document")
        return np.zeros(0)

    return step, None


# -- the driver -------------------------------------------------------------------------------------

def child(engine: str, args: argparse.Namespace) -> dict[str, Any]:
    """Run one engine in a fresh interpreter (its own resident set) and read its JSON result."""
    command = [sys.executable, __file__, "--child", engine, "--requests", str(args.requests), "--seed", str(args.seed),
               "--tokenizer", args.tokenizer, "--sample-every", str(args.sample_every),
               "--check-every", str(args.check_every), "--unbounded-limit-mb", str(args.unbounded_limit_mb)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        return {"engine": engine, "error": tail[0]}
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def summarise(result: dict[str, Any], warm_up: int) -> dict[str, Any]:
    """RSS after warm-up and at the end, and the least-squares growth per 1,000 requests after warm-up."""
    samples = [(n, mb) for n, mb in result.get("samples", []) if n >= warm_up]
    if len(samples) < 2:
        return {}
    xs, ys = [n for n, _ in samples], [mb for _, mb in samples]
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / \
        sum((x - mean_x) ** 2 for x in xs)
    return {"rss_after_warm_up_mb": ys[0], "rss_end_mb": ys[-1], "rss_max_after_warm_up_mb": max(ys),
            "growth_mb_per_1000_requests": 1000 * slope,
            "tokens_per_s": result["tokens"] / result["seconds"]}


def table(results: list[dict[str, Any]], warm_up: int) -> str:
    lines = [f"| engine | requests | RSS after {warm_up:,} (MB) | RSS at the end (MB) | max after warm-up (MB) | "
             "growth (MB / 1,000 requests) | tokens/s | masks checked (differing) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['engine']} | n/a: {r['error']} |||||||")
            continue
        s = r["summary"]
        checked = f"{r['masks_checked']:,} ({r['masks_differing']})" if r["masks_checked"] else "—"
        note = f" ({r['stopped']})" if r.get("stopped") else ""
        lines.append(f"| {r['engine']} | {r['requests']:,}{note} | {s['rss_after_warm_up_mb']:.0f} | "
                     f"{s['rss_end_mb']:.0f} | {s['rss_max_after_warm_up_mb']:.0f} | "
                     f"{s['growth_mb_per_1000_requests']:+.1f} | {s['tokens_per_s']:,.0f} | {checked} |")
    return "\n".join(lines)


def plot(results: list[dict[str, Any]], warm_up: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    for r in results:
        if r.get("samples"):
            xs, ys = zip(*r["samples"], strict=True)
            ax.plot(xs, ys, label=r["engine"])
    ax.axvline(warm_up, color="gray", linestyle=":", linewidth=1)
    ax.set_xlabel("requests (nested JSON documents, one compiled grammar)")
    ax.set_ylabel("resident memory (MB)")
    ax.set_title("Resident memory of a long-lived compiled grammar (Llama-3 tokenizer)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--engines", default=",".join(ENGINE_NAMES))
    parser.add_argument("--tokenizer", default="llama3")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sample-every", type=int, default=100)
    parser.add_argument("--check-every", type=int, default=250)
    parser.add_argument("--unbounded-limit-mb", type=float, default=3000.0)
    parser.add_argument("--warm-up", type=int, default=1000, help="requests before the growth is judged")
    parser.add_argument("--child", choices=ENGINE_NAMES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    for name in ("requests", "sample_every", "check_every", "warm_up"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.child:
        print(json.dumps(run_engine(args.child, args)))
        return
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    unknown = sorted(set(engines) - set(ENGINE_NAMES))
    if unknown:
        parser.error(f"unknown engines {unknown}; known: {', '.join(ENGINE_NAMES)}")
    results = []
    for engine in engines:
        print(f"{engine} ...", file=sys.stderr, flush=True)
        result = child(engine, args)
        if "error" not in result:
            result["summary"] = summarise(result, args.warm_up)
        results.append(result)
    text = table(results, args.warm_up)
    print(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "soak.json").write_text(json.dumps({"requests": args.requests, "tokenizer": args.tokenizer,
                                                   "seed": args.seed, "warm_up": args.warm_up, "results": results},
                                                  indent=1) + "\n")
    (RESULTS / "soak.md").write_text(f"### Long-lived compiled grammar (`benchmarks/soak.py --requests "
                                     f"{args.requests}`)\n\n{text}\n")
    plot(results, args.warm_up, RESULTS / "soak.png")


if __name__ == "__main__":
    main()
