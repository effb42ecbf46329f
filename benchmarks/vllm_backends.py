"""vLLM's structured-output backends side by side on one GPU: codemask, xgrammar and guidance.

With vLLM importable and a GPU, each backend serves the same JSON-Schema requests (held-out
jsonschemabench schemas, one chat prompt each) with ``vllm.LLM`` in a process of its own, greedy,
and the run records wall time, output tokens per second, and how many outputs parse and validate
against their schema. ``--load-format dummy`` (the default) runs the model's config with random
weights: the timing is the engine's and the backends', not the model's quality, so every backend
sees the same forward passes; ``--load-format auto`` loads real weights from ``--model``.

Without vLLM (or without a GPU) the script checks conformance instead: for held-out schemas it
walks random allowed tokens with :class:`~codemask.integrations.matching.RequestMatcher` rows (the
rows the vLLM backend fills) and masks random logits with them on the GPU and on the CPU
(codemask's ``apply_token_bitmask_``, and xgrammar's kernel where installed), asserting the same
tokens survive.

Usage: python benchmarks/vllm_backends.py --model DIR [--requests 64] [--max-tokens 256]
       [--backends codemask,xgrammar,guidance] [--load-format dummy]
Writes benchmarks/results/vllm_backends.json (and .png in benchmark mode).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: tests.data_paths
from tests.data_paths import corpora_root

ROOT = Path(__file__).resolve().parents[1]
DATA = corpora_root() / "jsonschemabench"
RESULTS = ROOT / "benchmarks" / "results"
BACKENDS = ("codemask", "xgrammar", "guidance")


def schemas(count: int, stride: int = 31) -> list[dict[str, Any]]:
    """``count`` jsonschemabench schemas (a fixed stride) that codemask compiles exactly."""
    from codemask.errors import GrammarError
    from codemask.grammar.grammar import Grammar

    found = []
    for path in sorted(DATA.glob("*.json"))[::stride]:
        schema = json.loads(path.read_text(encoding="utf-8"))["schema"]
        try:
            Grammar.from_json_schema(schema)
        except GrammarError:
            continue
        found.append({"name": path.name, "schema": schema})
        if len(found) == count:
            break
    return found


def prompt_for(schema: dict[str, Any]) -> str:
    return ("Write one JSON document that is valid against this JSON Schema, and nothing else.\n"
            + json.dumps(schema)[:2000])


def run_backend(args: argparse.Namespace) -> dict[str, Any]:
    """One backend's run (in its own process, so that each LLM gets the whole GPU)."""
    import jsonschema
    from vllm import LLM, SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    if args.backend == "codemask":
        import codemask.integrations.vllm as codemask_vllm

        codemask_vllm.register()
    cases = json.loads(Path(args.cases).read_text(encoding="utf-8"))
    llm = LLM(args.model, load_format=args.load_format, max_model_len=4096, enforce_eager=False,
              structured_outputs_config={"backend": args.backend}, seed=0)
    tokenizer = llm.get_tokenizer()
    prompts = [tokenizer.apply_chat_template([{"role": "user", "content": prompt_for(c["schema"])}],
                                             tokenize=False, add_generation_prompt=True) for c in cases]
    params = [SamplingParams(temperature=0.0, max_tokens=args.max_tokens,
                             structured_outputs=StructuredOutputsParams(json=c["schema"])) for c in cases]
    llm.generate(prompts[:2], params[:2], use_tqdm=False)  # warm-up: compile caches, CUDA graphs
    started = time.perf_counter()
    outputs = llm.generate(prompts, params, use_tqdm=False)
    elapsed = time.perf_counter() - started
    tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
    valid = ended = 0
    for case, output in zip(cases, outputs, strict=True):
        ended += output.outputs[0].finish_reason == "stop"
        try:
            jsonschema.validate(json.loads(output.outputs[0].text), case["schema"])
            valid += 1
        except (ValueError, jsonschema.ValidationError, jsonschema.SchemaError):
            pass
    return {"backend": args.backend, "requests": len(cases), "wall_s": elapsed, "output_tokens": tokens,
            "tokens_per_s": tokens / elapsed, "valid": valid, "ended": ended}


def benchmark(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    cases = schemas(args.requests)
    cases_path = RESULTS / "vllm_backends.cases.json"
    cases_path.write_text(json.dumps(cases), encoding="utf-8")
    runs = []
    for backend in args.backends.split(","):
        command = [sys.executable, __file__, "--run-backend", backend, "--cases", str(cases_path),
                   "--model", args.model, "--max-tokens", str(args.max_tokens), "--load-format", args.load_format]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            runs.append({"backend": backend, "error": done.stderr[-2000:]})
            continue
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    cases_path.unlink()
    return {"mode": "benchmark", "device": torch.cuda.get_device_name(0), "model": args.model,
            "load_format": args.load_format, "max_tokens": args.max_tokens, "runs": runs}


def conformance(args: argparse.Namespace) -> dict[str, Any]:
    """Rows filled as the vLLM backend fills them, applied on the GPU and on the CPU: the same tokens survive."""
    import numpy as np
    import torch

    from codemask.assets import load_tokenizer
    from codemask.compilers import compiler_for
    from codemask.engine.bitmask import allocate_token_bitmask, apply_token_bitmask_
    from codemask.integrations.matching import RequestMatcher
    from codemask.integrations.specs import grammar_for

    device = "cuda" if torch.cuda.is_available() else "cpu"
    tokenizer = load_tokenizer("qwen3")
    width = 151_936
    compiler = compiler_for(tokenizer, width)
    xgrammar = importlib.util.find_spec("xgrammar") is not None
    rng = np.random.default_rng(0)
    checked = 0
    for case in schemas(args.requests):
        matcher = RequestMatcher(compiler.compile(grammar_for("json", json.dumps(case["schema"]))),
                                 {tokenizer.eos_token_id}, width)
        bitmask = allocate_token_bitmask(1, width)
        for _ in range(args.steps):
            if matcher.is_terminated():
                break
            matcher.fill_row(bitmask, 0)
            logits = torch.randn(1, width, generator=torch.Generator().manual_seed(checked))
            on_cpu = logits.clone()
            apply_token_bitmask_(on_cpu, bitmask)
            on_device = logits.to(device)
            apply_token_bitmask_(on_device, bitmask.to(device))
            assert torch.equal(on_device.cpu(), on_cpu), f"{case['name']}: device and CPU masks differ"
            if xgrammar and device == "cuda":
                import xgrammar as xgr

                theirs = logits.to(device)
                xgr.apply_token_bitmask_inplace(theirs, bitmask.to(device))
                assert torch.equal(theirs.cpu(), on_cpu), f"{case['name']}: xgrammar's kernel disagrees"
            allowed = torch.isfinite(on_cpu[0]).nonzero().flatten().tolist()
            assert matcher.accept(int(rng.choice(allowed)))
            checked += 1
    return {"mode": "conformance", "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
            "schemas": args.requests, "rows_checked": checked, "xgrammar_kernel": xgrammar and device == "cuda"}


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [r for r in result["runs"] if "error" not in r]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.bar([r["backend"] for r in runs], [r["tokens_per_s"] for r in runs], color="#4c72b0")
    for i, r in enumerate(runs):
        ax.text(i, r["tokens_per_s"], f"{r['valid']}/{r['requests']} valid", ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("output tokens / s")
    ax.set_title(f"vLLM structured outputs on {result['device']}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=None, help="a model folder (config + tokenizer; weights unless dummy)")
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--steps", type=int, default=32, help="conformance: tokens walked per schema")
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--load-format", default="dummy", choices=["dummy", "auto", "safetensors"])
    parser.add_argument("--conformance", action="store_true", help="check masks on the device even with vLLM")
    parser.add_argument("--run-backend", help=argparse.SUPPRESS)
    parser.add_argument("--cases", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.run_backend:
        args.backend = args.run_backend
        print(json.dumps(run_backend(args)))
        return 0
    import torch

    has_vllm = importlib.util.find_spec("vllm") is not None and torch.cuda.is_available()
    if has_vllm and not args.conformance:
        if args.model is None:
            parser.error("--model is needed to serve with vLLM")
        result = benchmark(args)
    else:
        result = conformance(args)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "vllm_backends.json"
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    if result["mode"] == "benchmark":
        plot(result, out.with_suffix(".png"))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
