"""GPU check: the Triton bitmask kernel, masking and RPG costs on CUDA logits, and decoding end to end.

A prepared run for a lent GPU machine (``scripts/device_check.sh`` runs it there), where device time
is short and nothing can be fetched: the tokenizer and model config come from a carried folder
(``--assets``), the model has random weights (only overheads are measured, never quality), every
section is independent (a failing one records its error and the next one runs) and the results are
rewritten after each section, so that a run cut short still leaves what it measured. Sections:

- ``bitmask_correctness``: ``apply_token_bitmask_`` on CUDA logits (the Triton kernel) and its torch
  path, compared bit for bit with an independent reference (``torch.where`` on the CPU over the
  booleans the bitmask was packed from) over dtypes, vocabularies (Qwen2.5's padded 151,936 logits for
  151,665 tokens included), batch sizes, ``indices=`` subsets and bitmask placements.
- ``mask_timing``: per-call time of the Triton and the torch path, with the bitmask already on the
  device, copied from pinned host memory, and as the grammar stage calls it (pinned, ``indices=``).
- ``rpg_step``: per-step cost of RPG's stage (``prepare``/``apply``/``commit`` as the decoding loop
  drives it) over real Python (``json.decoder``'s source) and over a degenerate loop, split into
  the CPU analysis and the indexed add on the logits.
- ``end_to_end``: ``constrained_generate`` with a randomly initialised Qwen2.5-Coder-0.5B: tokens/s
  and time per step unconstrained, with RPG, under the JSON, a fixed-key JSON Schema (with and
  without jump-forward) and the Python grammar, against the bare model's forward pass.

With ``--cpu`` everything runs on the CPU at small sizes, with a 2-layer model (a dry run: the Triton
comparison is recorded as skipped); without it, a machine where torch sees no CUDA device is an
error. Times are wall times with the device synchronised around each call (what a decoding step
waits for), plus CUDA-event times for the masking kernels. Constrained outputs are checked by a
fresh matcher and, where one finished, by ``json.loads``/jsonschema/``ast``: with random weights
none may finish, so the matcher's check is the one that always runs.

Usage: PYTHONPATH=src:benchmarks python3 benchmarks/gpu_check.py [--quick] [--cpu] [--out DIR] [--assets DIR]
       [--sections bitmask_correctness,mask_timing,rpg_step,end_to_end] [--deadline-s 270]
Writes ``OUT/gpu_check.json`` and ``OUT/gpu_check.md`` (default OUT: ``/tmp/gpu_check``); ``--render
OUT/gpu_check.json`` publishes them to ``benchmarks/results`` with the plot.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse
import ast
import contextlib
import datetime
import hashlib
import inspect
import itertools
import json
import platform
import statistics
import subprocess
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

import codemask
from codemask.adadec.calibrate import chat_prompt
from codemask.compilers import compiler_for, model_stop_token_ids, model_vocab_size, ordered_stop_token_ids
from codemask.decoding.pipeline import StepLayout
from codemask.engine import bitmask as bitmask_module
from codemask.engine.bitmask import apply_token_bitmask_, bitmask_width, pack_bool_mask
from codemask.engine.matcher import GrammarMatcher
from codemask.repetition import RPG, RepetitionStage, apply_penalties_

# transformers >= 5.24 renames the model's cache argument; codemask's loop must run on older ones as well
warnings.filterwarnings("ignore", message=".*past_key_values.*", category=FutureWarning)

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_ASSETS = ROOT / ".device" / "qwen2.5-coder-0.5b"
DEFAULT_OUT = Path("/tmp/gpu_check")  # not benchmarks/results: a dry run must not overwrite the GPU results
SECTIONS = ("bitmask_correctness", "mask_timing", "rpg_step", "end_to_end")
QWEN_LOGITS, QWEN_VOCAB = 151936, 151665  # Qwen2.5's logits are padded past its 151,665 tokens
CORRECTNESS_SHAPES = ((32000, 32000), (128256, 128256), (QWEN_LOGITS, QWEN_VOCAB))  # (logits columns, vocabulary)

JSON_REQUESTS = [
    "Describe a cat as a JSON object with name, age and color.",
    "Give Paris as JSON: city, country, population.",
    "Make up a person as JSON: first_name, last_name, age, email.",
    "Describe a laptop for sale as JSON: brand, model, price_usd, in_stock.",
]
PYTHON_REQUESTS = [
    "Write a Python function that returns the n-th Fibonacci number.",
    "Write a Python class for a stack with push, pop and peek.",
    "Write a Python function that parses an ISO date string.",
    "Write a Python function that merges two sorted lists.",
]
RECORD_SCHEMA = {  # fixed keys in a fixed layout: what jump-forward can append without the model
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 24},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "active": {"type": "boolean"},
    },
    "required": ["name", "age", "active"],
    "additionalProperties": False,
}
LOOP_SOURCE = "def step(x):\n" + "    x = x + 1\n" * 400  # a degenerate loop: RPG decays at most steps


@dataclass(frozen=True)
class Plan:
    """Sizes of one run: the GPU's, ``--quick``'s, or the CPU dry run's."""

    device: torch.device
    correctness_batches: tuple[int, ...]
    timing_batches: tuple[int, ...]
    reps: int
    warmup: int
    rpg_tokens: int
    rpg_batches: tuple[int, ...]
    prompts: int
    batched_rows: int
    max_new_tokens: int
    deadline: float  # perf_counter() after which end_to_end stops starting work

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"


def make_plan(device: torch.device, quick: bool, deadline: float) -> Plan:
    """The sizes for ``device``: the full set on CUDA (a few minutes), less with ``quick``, tiny on a CPU."""
    if device.type != "cuda":
        return Plan(device, (1, 3), (1, 4), reps=10, warmup=2, rpg_tokens=120, rpg_batches=(1, 2),
                    prompts=2, batched_rows=2, max_new_tokens=12, deadline=deadline)
    if quick:
        return Plan(device, (1, 8), (1, 64), reps=50, warmup=10, rpg_tokens=300, rpg_batches=(1, 8),
                    prompts=2, batched_rows=4, max_new_tokens=32, deadline=deadline)
    return Plan(device, (1, 8, 64), (1, 64), reps=200, warmup=20, rpg_tokens=1500, rpg_batches=(1, 8),
                prompts=3, batched_rows=4, max_new_tokens=96, deadline=deadline)


# --- timing ------------------------------------------------------------------------------------


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def summary(seconds: Sequence[float], unit: str = "ms") -> dict[str, float]:
    """Median, p99, minimum and count of ``seconds``, in ``unit`` (``ms`` or ``us``)."""
    if not seconds:
        return {"n": 0}
    scale = {"ms": 1e3, "us": 1e6}[unit]
    ordered = sorted(seconds)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return {f"median_{unit}": statistics.median(ordered) * scale, f"p99_{unit}": p99 * scale,
            f"min_{unit}": ordered[0] * scale, "n": len(ordered)}


def time_calls(fn: Callable[[], object], device: torch.device, reps: int, warmup: int) -> dict[str, Any]:
    """Wall time per call of ``fn`` with the device synchronised before and after (what a decoding step
    waits for: it reads the chosen token back), and on CUDA the GPU time between events around it."""
    for _ in range(warmup):
        fn()
    synchronize(device)
    wall: list[float] = []
    gpu: list[float] = []
    for _ in range(reps):
        events = cuda_events(device)
        started = time.perf_counter()
        if events:
            events[0].record()
        fn()
        if events:
            events[1].record()
        synchronize(device)
        wall.append(time.perf_counter() - started)
        if events:
            gpu.append(events[0].elapsed_time(events[1]) / 1e3)
    return {"wall": summary(wall, "us"), "gpu": summary(gpu, "us")}


def cuda_events(device: torch.device) -> tuple[torch.cuda.Event, torch.cuda.Event] | None:
    """A start and an end event to time GPU work with, on CUDA (None elsewhere)."""
    if device.type != "cuda":
        return None
    return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)


def median_of(stats: dict[str, Any]) -> float:
    return float(stats.get("median_us", float("nan")))


# --- section a: the Triton kernel against a reference --------------------------------------------


@dataclass(frozen=True)
class MaskCase:
    """One correctness case: the logits' shape and dtype, which rows are masked, where the bitmask is."""

    dtype: torch.dtype
    columns: int
    vocab: int
    batch: int
    subset: bool
    pinned: bool  # a pinned host bitmask that the call copies (the real use), or one already on the device


@contextlib.contextmanager
def torch_path_only() -> Iterator[None]:
    """Make ``apply_token_bitmask_`` take its torch path on CUDA too.

    The public function asks ``_triton_apply()`` for the kernel on every call, so answering None there
    is all it takes: validation, copies and ``indices=`` handling stay exactly those of a real call.
    """
    original = bitmask_module._triton_apply

    def no_kernel() -> None:
        return None

    bitmask_module._triton_apply = no_kernel  # type: ignore[assignment]
    try:
        yield
    finally:
        bitmask_module._triton_apply = original


def triton_in_use(device: torch.device) -> bool:
    """Whether ``apply_token_bitmask_`` dispatches to the Triton kernel for contiguous logits on ``device``."""
    return device.type == "cuda" and bitmask_module._triton_apply() is not None


def case_operands(case: MaskCase, rng: np.random.Generator
                  ) -> tuple[torch.Tensor, np.ndarray, np.ndarray, list[int] | None]:
    """Random CPU logits (NaN, ±inf and -0.0 in every row), the allowed tokens (all-allowed and
    all-forbidden rows among them, random bits past the vocabulary), their bitmask words and the rows to mask."""
    density = rng.uniform(0.0, 1.0, case.batch)
    if case.batch >= 3:
        density[1], density[2] = 1.0, 0.0
    allowed = rng.random((case.batch, 32 * bitmask_width(case.vocab))) < density[:, None]
    words = pack_bool_mask(allowed)
    generator = torch.Generator().manual_seed(int(rng.integers(1 << 31)))
    logits = torch.randn(case.batch, case.columns, generator=generator).to(case.dtype)
    logits[:, :4] = torch.tensor([float("nan"), float("inf"), float("-inf"), -0.0]).to(case.dtype)
    if not case.subset:
        return logits, allowed, words, None
    rows = sorted(int(r) for r in rng.choice(case.batch, size=max(1, case.batch // 2), replace=False))
    return logits, allowed, words, [*rows, rows[0]]  # a duplicate index is allowed and must be harmless


def reference_mask(logits: torch.Tensor, allowed_tokens: np.ndarray, vocab: int, rows: list[int] | None
                   ) -> torch.Tensor:
    """The expected result, computed independently of codemask (from the booleans the bitmask was packed
    from): the listed rows become ``torch.where(allowed, logits, -inf)`` and their columns past ``vocab`` -inf."""
    allowed = torch.from_numpy(allowed_tokens[:, :vocab])
    neg_inf = torch.tensor(float("-inf"), dtype=logits.dtype)
    masked = torch.where(allowed, logits[:, :vocab], neg_inf)
    expected = logits.clone()
    selected = torch.tensor(sorted(set(rows)) if rows is not None else list(range(logits.shape[0])))
    expected[selected, :vocab] = masked[selected]
    expected[selected, vocab:] = neg_inf
    return expected


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def mismatches(actual: torch.Tensor, expected: torch.Tensor) -> int:
    """Elements whose bits differ (so NaN payloads, -0.0 and the exact -inf count)."""
    as_int = bitmask_module._SAME_WIDTH_INT[actual.dtype]
    return int((actual.view(as_int) != expected.view(as_int)).sum())


def masked_on_device(case: MaskCase, logits: torch.Tensor, words: np.ndarray, rows: list[int] | None,
                     device: torch.device) -> torch.Tensor:
    """``apply_token_bitmask_`` on a device copy of ``logits``, brought back to the CPU."""
    on_device = logits.to(device)
    host = torch.from_numpy(words)
    bitmask = host.pin_memory() if case.pinned and device.type == "cuda" else host.to(device)
    apply_token_bitmask_(on_device, bitmask, indices=rows, vocab_size=case.vocab)
    return on_device.cpu()


def correctness_cases(plan: Plan) -> Iterator[MaskCase]:
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for columns, vocab in CORRECTNESS_SHAPES:
            for batch in plan.correctness_batches:
                for subset in (False, True):
                    for pinned in (True, False) if plan.cuda else (False,):
                        yield MaskCase(dtype, columns, vocab, batch, subset, pinned)


def bitmask_correctness(plan: Plan, rng: np.random.Generator) -> dict[str, Any]:
    """Every case through the Triton kernel (CUDA only) and the torch path, against the reference."""
    use_triton = triton_in_use(plan.device)
    cases = []
    for case in correctness_cases(plan):
        logits, allowed, words, rows = case_operands(case, rng)
        expected = reference_mask(logits, allowed, case.vocab, rows)
        with torch_path_only():
            torch_bad = mismatches(masked_on_device(case, logits, words, rows, plan.device), expected)
        triton_bad = None
        if use_triton:
            triton_bad = mismatches(masked_on_device(case, logits, words, rows, plan.device), expected)
        cases.append({**asdict(case), "dtype": dtype_name(case.dtype), "rows": rows,
                      "triton_mismatches": triton_bad, "torch_mismatches": torch_bad})
    return {
        "triton": "in use" if use_triton else f"skipped: {'Triton did not import' if plan.cuda else 'no CUDA device'}",
        "cases": len(cases),
        "triton_mismatches": None if not use_triton else sum(c["triton_mismatches"] for c in cases),
        "torch_mismatches": sum(c["torch_mismatches"] for c in cases),
        "failing_cases": [c for c in cases if c["torch_mismatches"] or c["triton_mismatches"]],
        "per_case": cases,
    }


# --- section b: masking time -------------------------------------------------------------------


def masking_calls(logits: torch.Tensor, host: torch.Tensor, vocab: int) -> dict[str, Callable[[], None]]:
    """The three ways a bitmask reaches ``apply_token_bitmask_``, as calls to time."""
    on_device = host.to(logits.device)
    every_row = list(range(logits.shape[0]))

    def resident() -> None:
        apply_token_bitmask_(logits, on_device, vocab_size=vocab)

    def pinned() -> None:
        apply_token_bitmask_(logits, host, vocab_size=vocab)

    def as_grammar_stage() -> None:  # codemask.decoding.grammar.GrammarStage.apply
        copied = host.to(logits.device, non_blocking=True) if logits.device.type != "cpu" else host
        apply_token_bitmask_(logits, copied, indices=every_row, vocab_size=vocab)

    return {"device bitmask": resident, "pinned host bitmask": pinned, "grammar stage (pinned, indices)":
            as_grammar_stage}


def mask_timing(plan: Plan, rng: np.random.Generator) -> dict[str, Any]:
    """Triton vs torch path per dtype, batch and bitmask placement, on Qwen2.5-shaped logits."""
    use_triton = triton_in_use(plan.device)
    rows: list[dict[str, Any]] = []
    for dtype in (torch.float32, torch.bfloat16):
        for batch in plan.timing_batches:
            logits = torch.randn(batch, QWEN_LOGITS, device=plan.device).to(dtype)
            words = pack_bool_mask(rng.random((batch, 32 * bitmask_width(QWEN_VOCAB))) < 0.5)
            host = codemask.allocate_token_bitmask(batch, QWEN_VOCAB, pin_memory=True)
            host.copy_(torch.from_numpy(words))
            for variant, call in masking_calls(logits, host, QWEN_VOCAB).items():
                row: dict[str, Any] = {"dtype": dtype_name(dtype), "batch": batch, "bitmask": variant}
                if use_triton:
                    row["triton"] = time_calls(call, plan.device, plan.reps, plan.warmup)
                with torch_path_only():
                    row["torch"] = time_calls(call, plan.device, plan.reps, plan.warmup)
                rows.append(row)
    return {"triton": "in use" if use_triton else "skipped: not on CUDA or no Triton",
            "logits": QWEN_LOGITS, "vocab": QWEN_VOCAB, "reps": plan.reps,
            "sync_only": time_calls(lambda: None, plan.device, plan.reps, plan.warmup), "rows": rows}


# --- section c: RPG per step -------------------------------------------------------------------


def python_streams(tokenizer: Any) -> dict[str, list[int]]:
    """Token streams to step RPG through: real code (the stdlib's ``json.decoder``, present on every
    machine) and a degenerate loop, where RPG finds a repeat at nearly every step."""
    import json.decoder

    sources = {"json.decoder": inspect.getsource(json.decoder), "loop": LOOP_SOURCE}
    return {name: list(tokenizer(text, add_special_tokens=False)["input_ids"]) for name, text in sources.items()}


def rpg_pass(vocab: Any, stream: list[int], batch: int, plan: Plan, prompt_tokens: int = 16) -> dict[str, Any]:
    """Step ``batch`` copies of ``stream`` through a :class:`RepetitionStage` as ``DecodingLoop.run``
    does (prepare, apply, commit), then through the stage's two parts separately: the per-row
    analysis (``RepetitionState.penalties``) and the indexed add on the logits (``apply_penalties_``)."""
    rpg, stops = RPG(), ordered_stop_token_ids(vocab.stop_token_ids, None, vocab.eos_token_id)
    prompt, steps = stream[:prompt_tokens], stream[prompt_tokens: prompt_tokens + plan.rpg_tokens]
    logits = torch.randn(batch, vocab.vocab_size, device=plan.device)
    layout = StepLayout.one_row_per_sequence(range(batch))
    stage = RepetitionStage(rpg, vocab.token_bytes, stops, [prompt] * batch)
    split = RepetitionStage(rpg, vocab.token_bytes, stops, [prompt] * batch, overlap=False)
    apply_s, step_s, analysis_s, add_s = [], [], [], []
    try:
        for token in steps:
            started = time.perf_counter()
            stage.prepare(layout)  # the loop runs the forward pass here; nothing hides the analysis in this test
            before_apply = time.perf_counter()
            stage.apply(logits, layout)
            synchronize(plan.device)
            apply_s.append(time.perf_counter() - before_apply)
            for seq in range(batch):
                stage.commit(seq, [token])
            step_s.append(time.perf_counter() - started)
            analysis, added = split_step(split, logits, plan.device, rpg, stops)
            analysis_s.append(analysis)
            if added is not None:
                add_s.append(added)
            for seq in range(batch):
                split.commit(seq, [token])
    finally:
        stage.close()
        split.close()
    return {"batch": batch, "steps": len(steps), "apply": summary(apply_s), "step": summary(step_s),
            "analysis": summary(analysis_s), "index_put": summary(add_s),
            "steps_with_decays": len(add_s), "share_with_decays": len(add_s) / max(len(steps), 1)}


def split_step(stage: RepetitionStage, logits: torch.Tensor, device: torch.device, rpg: RPG,
               stops: list[int]) -> tuple[float, float | None]:
    """One step's analysis time, and the time of the indexed add where any row has a decay (else None)."""
    started = time.perf_counter()
    penalties = [state.penalties() for state in stage.states]
    analysis = time.perf_counter() - started
    if not any(penalties):
        return analysis, None
    started = time.perf_counter()
    apply_penalties_(logits, penalties, rpg, stops)
    synchronize(device)
    return analysis, time.perf_counter() - started


def rpg_step(plan: Plan, tokenizer: Any) -> dict[str, Any]:
    vocab = compiler_for(tokenizer, QWEN_LOGITS).vocab
    streams = python_streams(tokenizer)
    runs = [{"stream": name, **rpg_pass(vocab, stream, batch, plan)}
            for name, stream in streams.items() for batch in plan.rpg_batches]
    return {"stream_tokens": {name: len(s) for name, s in streams.items()}, "runs": runs}


# --- section d: end to end ---------------------------------------------------------------------


@dataclass(frozen=True)
class Mode:
    """One decoding configuration of ``constrained_generate``."""

    name: str
    grammar: codemask.Grammar | None = None
    check: str = "none"  # how outputs are validated: none, json, schema, python
    jump_forward: bool = False
    repetition: bool = False
    batched: bool = False  # all prompts in one call, rather than one call per prompt


def decoding_modes() -> list[Mode]:
    records = codemask.Grammar.from_json_schema(RECORD_SCHEMA, whitespace=2)
    json_grammar, python = codemask.Grammar.builtin("json"), codemask.Grammar.builtin("python")
    return [
        Mode("unconstrained"),
        Mode("unconstrained+rpg", repetition=True),
        Mode("json", json_grammar, "json"),
        Mode("records", records, "schema"),
        Mode("records+jf", records, "schema", jump_forward=True),
        Mode("python", python, "python"),
        Mode("unconstrained batched", batched=True),
        Mode("json batched", json_grammar, "json", batched=True),
    ]


def load_tokenizer(assets: Path) -> Any:
    """The tokenizer saved in ``assets``, as ``codemask.assets.load_tokenizer`` loads a packaged one."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(assets, local_files_only=True)


def random_model(assets: Path, device: torch.device) -> Any:
    """The model of ``assets/config.json`` with random weights (bfloat16 on CUDA); on a CPU a 2-layer,
    64-wide version with the same vocabulary, so that a dry run takes seconds."""
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

    config = AutoConfig.from_pretrained(assets, local_files_only=True)
    if device.type != "cuda":
        config.num_hidden_layers, config.hidden_size, config.intermediate_size = 2, 64, 128
        config.num_attention_heads, config.num_key_value_heads, config.max_window_layers = 4, 2, 2
        config.layer_types = config.layer_types[:2] if getattr(config, "layer_types", None) else None
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    torch.manual_seed(0)
    with torch.device(device):  # initialising on the GPU takes a fraction of the CPU's time
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.generation_config = GenerationConfig.from_pretrained(assets, local_files_only=True)
    return model.eval()


class StepClock:
    """Stamps the start of every forward pass (a forward pre-hook on the model). With one forward pass
    per decoding step, consecutive stamps bracket a whole step: stage work, forward pass, selection and
    commit; the first interval (prefill plus the first step) is left out."""

    def __init__(self, model: Any) -> None:
        self.stamps: list[float] = []
        self._handle = model.register_forward_pre_hook(self._stamp)

    def _stamp(self, *_: object) -> None:
        self.stamps.append(time.perf_counter())

    def take(self) -> list[float]:
        """The step times since the last call, and start again."""
        times = [b - a for a, b in itertools.pairwise(self.stamps)][1:]
        self.stamps = []
        return times

    def close(self) -> None:
        self._handle.remove()


def model_steps(model: Any, tokenizer: Any, prompts: list[str], steps: int,
                device: torch.device) -> dict[str, dict[str, float]]:
    """Per-step wall time of the bare model over a batch of ``prompts``: the model call alone
    (``forward``, synchronised), and a whole step of a decoding loop with nothing else in it (``step``:
    greedy argmax, the tokens read back to the host, the attention mask grown, the cached forward pass)."""
    from transformers import DynamicCache

    encoded = tokenizer(prompts, return_tensors="pt", padding=True)  # identical prompts: no padding
    ids, attention = encoded["input_ids"].to(device), encoded["attention_mask"].to(device)
    forward_s, step_s = [], []
    with torch.inference_mode():
        out = model(input_ids=ids, attention_mask=attention, past_key_values=DynamicCache(config=model.config),
                    use_cache=True, logits_to_keep=1)
        for _ in range(steps):
            started = time.perf_counter()
            tokens = out.logits[:, -1].float().argmax(-1, keepdim=True)
            tokens.tolist()
            attention = torch.cat([attention, torch.ones_like(tokens)], dim=1)
            before_forward = time.perf_counter()
            positions = attention.sum(dim=1, keepdim=True) - 1
            out = model(input_ids=tokens, attention_mask=attention, position_ids=positions,
                        past_key_values=out.past_key_values, use_cache=True, logits_to_keep=1)
            synchronize(device)
            forward_s.append(time.perf_counter() - before_forward)
            step_s.append(time.perf_counter() - started)
    return {"forward": summary(forward_s), "step": summary(step_s)}


def output_status(result: codemask.GenerationResult, mode: Mode, compiler: Any) -> str:
    """``complete`` (the grammar ended and the text parses), ``prefix`` (cut by length, but every token
    is one a fresh matcher accepts) or ``invalid``; ``unchecked`` for unconstrained modes."""
    import jsonschema  # here, not at the top: the other sections run where the device's install of it failed

    if mode.grammar is None:
        return "unchecked"
    matcher = GrammarMatcher(compiler.compile(mode.grammar), **mode.grammar.completion)
    if not all(matcher.accept_token(t) for t in result.token_ids):
        return "invalid"
    if result.finish_reason != "grammar_end":
        return "prefix"
    try:
        if mode.check == "python":
            ast.parse(result.text)
        else:
            value = json.loads(result.text)
            if mode.check == "schema":
                jsonschema.validate(value, RECORD_SCHEMA)
    except (ValueError, SyntaxError, jsonschema.ValidationError):
        return "invalid"
    return "complete"


def run_mode(model: Any, tokenizer: Any, mode: Mode, prompts: list[str], clock: StepClock, compiler: Any,
             max_new_tokens: int) -> dict[str, Any]:
    """Generate from every prompt (one call each, or one batched call) and summarise what it cost."""
    calls = [prompts] if mode.batched else [[p] for p in prompts]
    results: list[codemask.GenerationResult] = []
    steps: list[float] = []
    wall = 0.0
    for batch in calls:
        clock.take()
        started = time.perf_counter()
        out = codemask.constrained_generate(model, tokenizer, batch, grammar=mode.grammar,
                                            max_new_tokens=max_new_tokens, jump_forward=mode.jump_forward,
                                            repetition=RPG() if mode.repetition else None)
        wall += time.perf_counter() - started
        steps += clock.take()
        results += out
    tokens = sum(r.stats.generated_tokens for r in results)
    statuses = [output_status(r, mode, compiler) for r in results]
    return {
        "mode": mode.name, "rows_per_call": len(calls[0]), "outputs": len(results), "tokens": tokens,
        "wall_s": wall, "tokens_per_s": tokens / wall if wall else 0.0, "step": summary(steps),
        "forward_passes": sum(r.stats.forward_passes for r in results),
        "forced_tokens": sum(r.stats.grammar.forced_tokens for r in results),
        "mask_ms_per_token": 1e3 * sum(r.stats.grammar.mask_time_s for r in results) / max(tokens, 1),
        "rpg_ms_per_token": 1e3 * sum(r.stats.repetition.analysis_time_s for r in results) / max(tokens, 1),
        "finish_reasons": [r.finish_reason for r in results],
        "validity": {s: statuses.count(s) for s in sorted(set(statuses))},
        "samples": [r.text[:160] for r in results],
    }


def end_to_end(plan: Plan, tokenizer: Any, assets: Path) -> dict[str, Any]:
    """The bare model's step at each batch size the modes use, then every mode after a warm-up of its own
    (grammar and kernel compiles, allocator); a mode that fails is recorded and the next one runs."""
    started = time.perf_counter()
    model = random_model(assets, plan.device)
    init_s = time.perf_counter() - started
    compiler = compiler_for(tokenizer, model_vocab_size(model), model_stop_token_ids(model))
    json_prompts = [chat_prompt(tokenizer, r + " Reply with the JSON only.") for r in JSON_REQUESTS[: plan.prompts]]
    python_prompts = [chat_prompt(tokenizer, r) for r in PYTHON_REQUESTS[: plan.prompts]]
    batched_prompts = [chat_prompt(tokenizer, r) for r in (JSON_REQUESTS * 2)[: plan.batched_rows]]
    model_steps(model, tokenizer, json_prompts[:1], 16, plan.device)  # warm-up: cuBLAS handles, allocator
    row_counts = sorted({1, plan.batched_rows})
    baselines = {rows: model_steps(model, tokenizer, json_prompts[:1] * rows, plan.max_new_tokens, plan.device)
                 for rows in row_counts}
    clock = StepClock(model)
    rounds: list[list[dict[str, Any]]] = []
    skipped: list[str] = []
    try:  # every mode twice, in turn: a drift of the machine shows as a difference between the rounds
        for round_number in (1, 2):
            modes = []
            for mode in decoding_modes():
                prompts = (python_prompts if mode.check == "python" else batched_prompts if mode.batched
                           else json_prompts)
                if time.perf_counter() > plan.deadline:
                    skipped.append(f"{mode.name} (round {round_number})")
                    continue
                print(f"  round {round_number}, mode {mode.name}", flush=True)
                modes.append(timed_mode(model, tokenizer, mode, prompts, clock, compiler, plan.max_new_tokens))
            rounds.append(modes)
    finally:
        clock.close()
    after = {rows: model_steps(model, tokenizer, json_prompts[:1] * rows, plan.max_new_tokens, plan.device)
             for rows in row_counts}
    return {"model": f"{assets.name} config, random weights", "init_s": init_s,
            "parameters": sum(p.numel() for p in model.parameters()), "max_new_tokens": plan.max_new_tokens,
            "model_step": {str(k): v for k, v in baselines.items()},
            "model_step_after": {str(k): v for k, v in after.items()},
            "modes": rounds[-1], "rounds": rounds, "skipped_for_time": skipped}


def timed_mode(model: Any, tokenizer: Any, mode: Mode, prompts: list[str], clock: StepClock, compiler: Any,
               max_new_tokens: int) -> dict[str, Any]:
    """One mode: a 4-token warm-up on the first prompt, then the measured run; its error if either fails."""
    try:
        run_mode(model, tokenizer, mode, prompts[:1], clock, compiler, 4)
        return run_mode(model, tokenizer, mode, prompts, clock, compiler, max_new_tokens)
    except Exception as exc:  # the other modes still run
        print(f"   error in {mode.name}: {type(exc).__name__}: {exc}", flush=True)
        return {"mode": mode.name, "rows_per_call": len(prompts) if mode.batched else 1,
                "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-3000:]}


# --- report ------------------------------------------------------------------------------------


def versions(device: torch.device) -> dict[str, Any]:
    """What ran: device, library versions, codemask's commit and whether its C extension loaded."""
    import transformers

    from codemask.engine import native

    info: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(), "platform": platform.platform(), "torch": torch.__version__,
        "cuda": torch.version.cuda, "transformers": transformers.__version__, "numpy": np.__version__,
        "codemask_native": native.available(), "cpu_count": os.cpu_count(),
    }
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = None
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info["device"] = f"{props.name}, {props.total_memory / 2**30:.0f} GiB, {props.multi_processor_count} SMs"
    else:
        info["device"] = f"{platform.machine()} CPU (the --cpu dry run)"
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        info["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                        text=True, timeout=10, check=False).stdout.strip() or None
    info["src_sha256"] = source_digest()
    return info


def source_digest() -> str:
    """A digest of codemask's Python sources: the copy on a lent machine has no git history, and
    uncommitted edits travel with it, so this is what ties results to the code that produced them."""
    digest = hashlib.sha256()
    for path in sorted((ROOT / "src" / "codemask").rglob("*.py")):
        digest.update(path.relative_to(ROOT).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def run_section(name: str, report: dict[str, Any], body: Callable[[], dict[str, Any]]) -> None:
    """Run one section, recording its result or its error, and how long it took."""
    print(f"== {name}", flush=True)
    started = time.perf_counter()
    try:
        report["sections"][name] = {"status": "ok", **body()}
    except Exception as exc:  # one broken section must not lose the others' results
        report["sections"][name] = {"status": "error", "error": f"{type(exc).__name__}: {exc}",
                                    "traceback": traceback.format_exc()[-4000:]}
        print(f"   error: {type(exc).__name__}: {exc}", flush=True)
    report["sections"][name]["seconds"] = time.perf_counter() - started


def us(stats: dict[str, Any] | None) -> str:
    if not stats or not stats.get("n"):
        return "n/a"
    return f"{stats['median_us']:.1f} / {stats['p99_us']:.1f}"


def ms(stats: dict[str, Any] | None) -> str:
    if not stats or not stats.get("n"):
        return "n/a"
    return f"{stats['median_ms']:.3f} / {stats['p99_ms']:.3f}"


def correctness_table(section: dict[str, Any]) -> list[str]:
    triton_total = "n/a" if section["triton_mismatches"] is None else section["triton_mismatches"]
    lines = [f"Triton: {section['triton']}; {section['cases']} cases; mismatching elements: Triton "
             f"{triton_total}, torch path {section['torch_mismatches']} (must be 0).", "",
             "| dtype | logits / vocab | cases | Triton mismatches | torch-path mismatches |",
             "|---|---|---:|---:|---:|"]
    groups: dict[tuple[str, int, int], list[dict[str, Any]]] = {}
    for case in section["per_case"]:
        groups.setdefault((case["dtype"], case["columns"], case["vocab"]), []).append(case)
    for (dtype, columns, vocab), cases in groups.items():
        triton_bad = "n/a" if cases[0]["triton_mismatches"] is None else sum(c["triton_mismatches"] for c in cases)
        lines.append(f"| {dtype} | {columns} / {vocab} | {len(cases)} | {triton_bad} "
                     f"| {sum(c['torch_mismatches'] for c in cases)} |")
    return lines


def timing_table(section: dict[str, Any]) -> list[str]:
    lines = [f"Logits {section['logits']} wide, vocabulary {section['vocab']}, {section['reps']} calls each, "
             f"wall median / p99 µs with a synchronisation around each call (sync alone: "
             f"{us(section['sync_only']['wall'])}); GPU-event median in brackets.", "",
             "| dtype | batch | bitmask | Triton | torch path | torch ÷ Triton |", "|---|---:|---|---:|---:|---:|"]
    for row in section["rows"]:
        triton, torch_path = row.get("triton"), row["torch"]
        ratio = (f"{median_of(torch_path['wall']) / median_of(triton['wall']):.2f}×" if triton else "n/a")
        lines.append(f"| {row['dtype']} | {row['batch']} | {row['bitmask']} "
                     f"| {us(triton['wall']) + gpu_note(triton) if triton else 'n/a'} "
                     f"| {us(torch_path['wall']) + gpu_note(torch_path)} | {ratio} |")
    return lines


def gpu_note(timed: dict[str, Any]) -> str:
    return f" ({timed['gpu']['median_us']:.1f})" if timed["gpu"].get("n") else ""


def rpg_table(section: dict[str, Any]) -> list[str]:
    lines = [f"Stream lengths in tokens: {section['stream_tokens']}; times median / p99 ms per step.", "",
             "| stream | batch | steps | apply (analysis + add) | whole step | analysis alone | indexed add "
             "(steps with decays) | steps with decays |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for run in section["runs"]:
        lines.append(f"| {run['stream']} | {run['batch']} | {run['steps']} | {ms(run['apply'])} | {ms(run['step'])} "
                     f"| {ms(run['analysis'])} | {ms(run['index_put'])} | {run['share_with_decays']:.0%} |")
    return lines


def end_to_end_table(section: dict[str, Any]) -> list[str]:
    warm = section["model_step_after"]  # the first bare run meets a cold machine
    bare = "; ".join(f"batch {rows}: model call {ms(b['forward'])} (after the modes: "
                     f"{ms(warm[rows]['forward']) if rows in warm else 'n/a'}), whole bare step {ms(b['step'])}"
                     for rows, b in section["model_step"].items())
    lines = [f"{section['model']} ({section['parameters'] / 1e6:.0f}M parameters, built in "
             f"{section['init_s']:.1f} s), greedy, up to {section['max_new_tokens']} new tokens per prompt. "
             f"The bare model, median / p99 ms: {bare}. A mode's step runs from one forward pass to the next "
             "(stages, selection, commit included); × model call = its median over the warm bare model call's "
             "(the one after the modes); ÷ unconstrained = tokens/s over the unconstrained mode's at the same "
             "rows per call. Every mode "
             "ran twice in turn; the table is the second round, the first is in the JSON "
             f"(tokens/s: {first_round(section)}).", "",
             "| mode | rows per call | tokens/s | ÷ unconstrained | step median / p99 ms | × model call "
             "| mask ms/token | RPG ms/token | forced tokens | outputs | finish |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    unconstrained = {m["rows_per_call"]: m["tokens_per_s"] for m in section["modes"]
                     if m.get("tokens_per_s") and m["mode"].startswith("unconstrained")
                     and "rpg" not in m["mode"]}
    for m in section["modes"]:
        if "error" in m:
            lines.append(f"| {m['mode']} | {m['rows_per_call']} | error: {m['error'][:200]} |||||||")
            continue
        forward = warm.get(str(m["rows_per_call"]), {}).get("forward", {}).get("median_ms")
        ratio = f"{m['step']['median_ms'] / forward:.2f}×" if forward and m["step"].get("median_ms") else "n/a"
        plain = unconstrained.get(m["rows_per_call"])
        speed = f"{m['tokens_per_s'] / plain:.2f}×" if plain else "n/a"
        validity = ", ".join(f"{k} {v}" for k, v in m["validity"].items())
        finish = ", ".join(f"{r} {m['finish_reasons'].count(r)}" for r in sorted(set(m["finish_reasons"])))
        lines.append(f"| {m['mode']} | {m['rows_per_call']} | {m['tokens_per_s']:.1f} | {speed} | {ms(m['step'])} "
                     f"| {ratio} "
                     f"| {m['mask_ms_per_token']:.3f} | {m['rpg_ms_per_token']:.3f} | {m['forced_tokens']} "
                     f"| {validity} | {finish} |")
    if section["skipped_for_time"]:
        lines += ["", f"Skipped for time: {', '.join(section['skipped_for_time'])}."]
    return lines


def first_round(section: dict[str, Any]) -> str:
    rounds = section.get("rounds", [])
    if len(rounds) < 2:
        return "one round only"
    return ", ".join(f"{m['mode']} {m['tokens_per_s']:.1f}" for m in rounds[0] if "tokens_per_s" in m)


TABLES: dict[str, Callable[[dict[str, Any]], list[str]]] = {
    "bitmask_correctness": correctness_table, "mask_timing": timing_table, "rpg_step": rpg_table,
    "end_to_end": end_to_end_table,
}


def markdown(report: dict[str, Any]) -> str:
    meta = report["meta"]
    lines = [f"### GPU check (`benchmarks/gpu_check.py`{' --quick' if report['quick'] else ''})", "",
             f"{meta['device']}; torch {meta['torch']} (CUDA {meta['cuda']}), Triton {meta['triton']}, "
             f"transformers {meta['transformers']}, Python {meta['python']}, codemask C extension "
             f"{'loaded' if meta['codemask_native'] else 'not loaded'}, commit {meta.get('commit')} "
             f"(sources {meta['src_sha256']}); {meta['date']}."]
    for name, section in report["sections"].items():
        lines += ["", f"#### {name} ({section['status']}, {section['seconds']:.1f} s)", ""]
        if section["status"] == "ok":
            lines += TABLES[name](section)
        else:
            lines.append(f"**{section['status']}**: {section.get('error')}")
    return "\n".join(lines) + "\n"


def plot(report: dict[str, Any], path: Path) -> None:
    """Masking time, Triton vs the torch path (GPU events), and decoding tokens/s per mode (second round)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    timing = report["sections"].get("mask_timing", {}).get("rows", [])
    modes = [m for m in report["sections"].get("end_to_end", {}).get("modes", []) if "tokens_per_s" in m]
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.5))
    labels = [f"{r['dtype']} b{r['batch']}\n{r['bitmask'].split(' (')[0]}" for r in timing if r.get("triton")]
    x = np.arange(len(labels))
    for offset, key, name in ((-0.2, "triton", "Triton"), (0.2, "torch", "torch path")):
        left.bar(x + offset, [r[key]["gpu"]["median_us"] for r in timing if r.get("triton")], 0.4, label=name)
    left.set_xticks(x, labels, rotation=70, fontsize=6)
    left.set_ylabel("µs per call (GPU events, median)")
    left.set_title("Applying a 151,936-token bitmask")
    left.legend()
    right.bar([f"{m['mode']} ×{m['rows_per_call']}" for m in modes], [m["tokens_per_s"] for m in modes])
    right.tick_params(axis="x", rotation=60, labelsize=7)
    right.set_ylabel("tokens/s")
    right.set_title("constrained_generate, Qwen2.5-0.5B shape (random weights)")
    fig.suptitle(report["meta"]["device"])
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_report(report: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_check.json").write_text(json.dumps(report, indent=1, default=str) + "\n", encoding="utf-8")
    (out / "gpu_check.md").write_text(markdown(report), encoding="utf-8")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--render", type=Path,
                        help="only write benchmarks/results/gpu_check.md and .png from this gpu_check.json")
    parser.add_argument("--assets", type=Path, default=DEFAULT_ASSETS,
                        help="folder with config.json, generation_config.json and the tokenizer files")
    parser.add_argument("--quick", action="store_true", help="fewer sizes, repetitions and tokens")
    parser.add_argument("--sections", default=",".join(SECTIONS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--deadline-s", type=float, default=270.0,
                        help="end_to_end starts no new mode after this many seconds from the start")
    parser.add_argument("--cpu", action="store_true", help="the CPU dry run even where CUDA is available")
    args = parser.parse_args(argv)
    unknown = set(args.sections.split(",")) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown sections {sorted(unknown)}; known: {', '.join(SECTIONS)}")
    if args.render and not args.render.is_file():
        parser.error(f"--render: no file {args.render}")
    if not args.render and not (args.assets / "config.json").is_file():
        parser.error(f"--assets {args.assets} has no config.json: run scripts/prepare_device.sh (or name the folder)")
    if not args.render and not args.cpu and not torch.cuda.is_available():
        parser.error("torch sees no CUDA device; pass --cpu for the CPU dry run")
    return args


def main(argv: list[str] | None = None) -> int:
    started = time.perf_counter()
    args = parse_args(argv)
    if args.render:  # on a machine with matplotlib: the table and the plot
        from publish import publish

        published = json.loads(args.render.read_text(encoding="utf-8"))
        publish("gpu_check", published, markdown(published).strip(), plot, write_json=False)
        return 0
    device = torch.device("cpu" if args.cpu else "cuda")
    plan = make_plan(device, args.quick, started + args.deadline_s)
    rng = np.random.default_rng(args.seed)
    report: dict[str, Any] = {"meta": versions(device), "quick": args.quick, "argv": sys.argv, "plan": asdict(plan),
                              "sections": {}}
    print(f"gpu_check on {report['meta']['device']}, writing to {args.out}", flush=True)
    tokenizer = load_tokenizer(args.assets)
    bodies: dict[str, Callable[[], dict[str, Any]]] = {
        "bitmask_correctness": lambda: bitmask_correctness(plan, rng),
        "mask_timing": lambda: mask_timing(plan, rng),
        "rpg_step": lambda: rpg_step(plan, tokenizer),
        "end_to_end": lambda: end_to_end(plan, tokenizer, args.assets),
    }
    for name in args.sections.split(","):
        run_section(name, report, bodies[name])
        write_report(report, args.out)
    if device.type == "cuda":
        report["meta"]["peak_gpu_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30
    report["meta"]["total_s"] = time.perf_counter() - started
    write_report(report, args.out)
    print(markdown(report), flush=True)
    return 1 if any(s["status"] != "ok" for s in report["sections"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
