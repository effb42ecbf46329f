"""JSON that models finish: packaged models writing one document per real JSON Schema, per engine.

For each model (SmolLM2-135M-Instruct, Qwen2.5-Coder-0.5B-Instruct) and each schema of a seeded
sample of JSONSchemaBench (every subset, schemas up to ``--max-schema-chars``), the model is asked
through its chat template to write one JSON document that follows the schema, greedily, up to
``--max-new-tokens``. The same prompt goes through every engine:

- ``codemask``: ``constrained_generate`` with ``Grammar.from_json_schema(schema, strict=False)``
  (generation mode, the default);
- ``codemask_hf``: Hugging Face ``model.generate`` with codemask's ``grammar_logits_processor``;
- ``xgrammar``: ``model.generate`` with ``xgrammar.contrib.hf.LogitsProcessor`` over
  ``compile_json_schema(schema)`` with its defaults;
- ``llguidance``: ``model.generate`` with a logits processor over ``LLMatcher`` and
  ``grammar_from_json_schema(schema)`` with its defaults.

An output counts as **valid** when it parses and ``jsonschema`` validates it against the schema, and
as **ended** when the model ended it (an end-of-sequence token, not the token limit). A schema an
engine cannot compile counts as neither. Results: ``benchmarks/results/jsonschema_generation.{json,md,png}``.

Run in the benchmarks' environment (``bash benchmarks/setup.sh``), on an otherwise idle machine:

    OMP_WAIT_POLICY=PASSIVE benchmarks/.venv/bin/python benchmarks/jsonschema_generation.py
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import jsonschema
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: tests.data_paths
from tests.data_paths import corpora_root

ROOT = Path(__file__).resolve().parents[1]
DATA = corpora_root()  # jsonschemabench: $CODEMASK_DATA
RESULTS = ROOT / "benchmarks" / "results"
ENGINES = ("codemask", "codemask_hf", "xgrammar", "llguidance")
PROMPT = ("Write one JSON value that follows this JSON Schema. Answer with the JSON only.\n\n"
          "JSON Schema:\n{schema}")


def sample_schemas(count: int, seed: int, max_chars: int) -> list[dict[str, Any]]:
    """``count`` schemas, round-robin over JSONSchemaBench's subsets in a seeded order."""
    by_subset: dict[str, list[dict[str, Any]]] = {}
    for path in sorted((DATA / "jsonschemabench").glob("*.json")):
        case = json.loads(path.read_text())
        text = json.dumps(case["schema"])
        if len(text) <= max_chars:
            by_subset.setdefault(path.stem.split("---")[0].split("_")[0], []).append(
                {"name": path.stem, "schema": case["schema"], "text": text})
    rng = random.Random(seed)
    for cases in by_subset.values():
        rng.shuffle(cases)
    queues = [by_subset[k] for k in sorted(by_subset)]
    ordered = [q[i] for i in range(max(map(len, queues))) for q in queues if i < len(q)]
    return ordered[:count]


def validity(schema: Any, text: str) -> bool:
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return False
    try:
        return bool(jsonschema.validators.validator_for(schema)(schema).is_valid(value))
    except (jsonschema.exceptions.SchemaError, RecursionError):
        return False


class Runner:
    """One model and tokenizer, and each engine's way of writing a document for a schema."""

    def __init__(self, model_name: str, max_new_tokens: int) -> None:
        from codemask.assets import load_model, load_tokenizer

        self.model = load_model(model_name)
        self.tokenizer = load_tokenizer(model_name)
        self.max_new_tokens = max_new_tokens
        eos = self.model.generation_config.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, list) else [eos])
        self.vocab_size = self.model.get_output_embeddings().weight.shape[0]
        self._xgr_compiler: Any = None
        self._llg_tokenizer: Any = None

    def prompt(self, schema_text: str) -> tuple[list[dict[str, str]], list[int]]:
        """The chat messages and the token ids the chat template makes of them."""
        messages = [{"role": "user", "content": PROMPT.format(schema=schema_text)}]
        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return messages, list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def run(self, engine: str, schema: Any, messages: list[dict[str, str]], prompt_ids: list[int]) -> dict[str, Any]:
        """Write one document; the record's ``compiled``, ``valid``, ``ended``, text and times."""
        started = time.perf_counter()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                if engine == "codemask":
                    text, ended, tokens = self._codemask(schema, messages)
                else:
                    text, ended, tokens = self._hf(self._processor(engine, schema), prompt_ids)
        except Exception as exc:  # an engine that cannot compile the schema: not valid, not ended
            return {"compiled": False, "valid": False, "ended": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
        return {"compiled": True, "valid": validity(schema, text), "ended": ended, "tokens": tokens,
                "seconds": round(time.perf_counter() - started, 3), "text": text[:2000]}

    def _codemask(self, schema: Any, messages: list[dict[str, str]]) -> tuple[str, bool, int]:
        from codemask import Grammar, constrained_generate

        grammar = Grammar.from_json_schema(schema, strict=False)
        result = constrained_generate(self.model, self.tokenizer, messages, grammar=grammar,
                                      max_new_tokens=self.max_new_tokens)
        return result.text, result.finish_reason == "grammar_end", len(result.token_ids)

    def _processor(self, engine: str, schema: Any) -> Any:
        if engine == "codemask_hf":
            from codemask import Grammar
            from codemask.hf import grammar_logits_processor

            return grammar_logits_processor(self.tokenizer, Grammar.from_json_schema(schema, strict=False), self.model)
        if engine == "xgrammar":
            import xgrammar as xgr

            if self._xgr_compiler is None:
                info = xgr.TokenizerInfo.from_huggingface(self.tokenizer, vocab_size=self.vocab_size)
                self._xgr_compiler = xgr.GrammarCompiler(info)
            return xgr.contrib.hf.LogitsProcessor(self._xgr_compiler.compile_json_schema(json.dumps(schema)))
        if engine == "llguidance":
            return LLGuidanceProcessor(self, schema)
        raise ValueError(f"unknown engine {engine!r}")

    def _hf(self, processor: Any, prompt_ids: list[int]) -> tuple[str, bool, int]:
        from transformers import LogitsProcessorList

        ids = torch.tensor([prompt_ids])
        with torch.inference_mode():
            out = self.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                      max_new_tokens=self.max_new_tokens,
                                      logits_processor=LogitsProcessorList([processor]),
                                      pad_token_id=self.tokenizer.pad_token_id or next(iter(self.eos_ids)))
        new = out[0, len(prompt_ids):].tolist()
        ended = bool(new) and new[-1] in self.eos_ids
        if ended:
            new = new[:-1]
        return self.tokenizer.decode(new, skip_special_tokens=True), ended, len(new)

    def llguidance_tokenizer(self) -> Any:
        if self._llg_tokenizer is None:
            import llguidance.hf

            self._llg_tokenizer = llguidance.hf.from_tokenizer(self.tokenizer, n_vocab=self.vocab_size)
        return self._llg_tokenizer


class LLGuidanceProcessor:
    """A Hugging Face logits processor over llguidance's ``LLMatcher`` (greedy, one row)."""

    def __init__(self, runner: Runner, schema: Any) -> None:
        import llguidance
        import llguidance.torch

        self._llg = llguidance
        self._torch = llguidance.torch
        grammar = llguidance.LLMatcher.grammar_from_json_schema(schema)
        self.matcher = llguidance.LLMatcher(runner.llguidance_tokenizer(), grammar)
        if self.matcher.is_error():
            raise ValueError(self.matcher.get_error())
        self.bitmask = llguidance.torch.allocate_token_bitmask(1, runner.llguidance_tokenizer().vocab_size)
        self.prompt_length: int | None = None

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.prompt_length is None:
            self.prompt_length = input_ids.shape[1]
        else:
            self.matcher.consume_token(int(input_ids[0, -1]))
        self._torch.fill_next_token_bitmask(self.matcher, self.bitmask, 0)
        self._torch.apply_token_bitmask_inplace(scores, self.bitmask.to(scores.device))
        return scores


def summarise(records: list[dict[str, Any]], models: list[str], engines: list[str]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for model in models:
        for engine in engines:
            rows = [r for r in records if r["model"] == model and r["engine"] == engine]
            summary[f"{model}/{engine}"] = {
                "schemas": len(rows), "compiled": sum(r["compiled"] for r in rows),
                "valid": sum(r["valid"] for r in rows), "ended": sum(r["ended"] for r in rows),
                "valid_and_ended": sum(r["valid"] and r["ended"] for r in rows)}
    return summary


def table(summary: dict[str, Any]) -> str:
    lines = ["| model | engine | compiled | valid | ended | valid and ended |", "|---|---|---:|---:|---:|---:|"]
    for key, s in summary.items():
        model, engine = key.split("/")
        n = s["schemas"]
        lines.append(f"| {model} | {engine} | {s['compiled']}/{n} | {s['valid']}/{n} | {s['ended']}/{n} | "
                     f"**{s['valid_and_ended']}/{n}** |")
    return "\n".join(lines)


def plot(summary: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(summary)
    valid = [summary[k]["valid_and_ended"] / max(summary[k]["schemas"], 1) for k in labels]
    fig, ax = plt.subplots(figsize=(max(6, len(labels) * 0.9), 4))
    ax.bar(range(len(labels)), valid, color=["#2b7bba" if "codemask" in k else "#999999" for k in labels])
    ax.set_xticks(range(len(labels)), [k.replace("/", "\n") for k in labels], fontsize=8)
    ax.set_ylabel("share valid and ended")
    ax.set_ylim(0, 1)
    ax.set_title("JSON Schema generation: outputs valid under the schema and ended by the model")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="smollm2,qwen-coder")
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--schemas", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--max-schema-chars", type=int, default=3000)
    parser.add_argument("--output", default="jsonschema_generation")
    args = parser.parse_args()
    torch.set_num_threads(max(1, (os.cpu_count() or 2)))
    models, engines = args.models.split(","), args.engines.split(",")
    cases = sample_schemas(args.schemas, args.seed, args.max_schema_chars)
    records: list[dict[str, Any]] = []
    for model in models:
        runner = Runner(model, args.max_new_tokens)
        for case in cases:
            messages, prompt_ids = runner.prompt(case["text"])
            for engine in engines:
                record = {"model": model, "engine": engine, "schema": case["name"],
                          **runner.run(engine, case["schema"], messages, prompt_ids)}
                records.append(record)
                print(f"{model:10} {engine:11} {case['name'][:40]:40} valid={record['valid']!s:5} "
                      f"ended={record['ended']!s:5} {record.get('seconds', '-')}", flush=True)
    summary = summarise(records, models, engines)
    versions = {name: _version(name) for name in ("xgrammar", "llguidance", "transformers", "torch")}
    report = {"settings": vars(args), "versions": versions, "summary": summary, "records": records}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.output}.json").write_text(json.dumps(report, indent=2) + "\n")
    (RESULTS / f"{args.output}.md").write_text(table(summary) + "\n")
    plot(summary, RESULTS / f"{args.output}.png")
    print(table(summary))


def _version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "absent"


if __name__ == "__main__":
    main()
