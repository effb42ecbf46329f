"""Learning AdaDec's entropy threshold τ for a model from reference solutions.

As AdaDec's authors do: teacher-force reference solutions (MBPP's train split, tasks 601–974 — never
evaluation tasks), and at each position record the entropy (nats) of the model's next-token
distribution and whether the reference token ranked first. Label 1 = it did not (a step where
greedy decoding would leave the reference). Fit a one-feature logistic regression of the label on
the entropy with balanced class weights, on four fifths of the tasks; on the held-out fifth, take
the probability cut that maximises accuracy; invert it to the entropy τ where the fitted
probability equals the cut. ``codemask calibrate-adadec`` runs this and stores τ with the model's
identity, where ``AdaDec()`` finds it.
"""

from __future__ import annotations

import argparse
import json
import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from codemask.adadec.config import model_identity, store_threshold
from codemask.adadec.entropy import entropy

MBPP_TRAIN = range(601, 975)


@dataclass(frozen=True)
class Calibration:
    """The learned τ and what it rests on."""

    threshold: float
    cut: float
    intercept: float
    slope: float
    heldout_accuracy: float
    positions: int
    positive_rate: float
    pause_rate: float
    """Share of all positions at or above τ (teacher-forced)."""

    def details(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "threshold"}


def mbpp_prompt(text: str, tests: Sequence[str]) -> str:
    """The MBPP task statement as codemask's benchmarks ask it (also used for calibration)."""
    return (f"You are an expert Python programmer, and here is your task: {text} "
            "Your code should pass these tests:\n\n" + "\n".join(tests))


def chat_prompt(tokenizer: Any, request: str) -> str:
    messages = [{"role": "user", "content": request}]
    return str(tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))


def mbpp_examples(path: Path, task_ids: Iterable[int] = MBPP_TRAIN) -> list[tuple[str, str]]:
    """(request, reference answer) for the MBPP tasks ``task_ids`` of ``path`` (JSON lines)."""
    wanted = set(task_ids)
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        task = json.loads(line)
        if task["task_id"] in wanted:
            code = task["code"].replace("\r\n", "\n").replace("\t", "    ")
            out.append((mbpp_prompt(task["text"], task["test_list"]), f"```python\n{code}\n```"))
    return out


def teacher_force(model: Any, tokenizer: Any, prompt: str, reference: str) -> tuple[np.ndarray, np.ndarray]:
    """Per reference token: the entropy before it and whether it was *not* the model's top choice."""
    prompt_ids = list(tokenizer(prompt)["input_ids"])
    ref_ids = list(tokenizer(reference, add_special_tokens=False)["input_ids"])
    ids = torch.tensor([prompt_ids + ref_ids], device=next(model.parameters()).device)
    with torch.inference_mode():
        logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1:-1].float()
    h = entropy(logits).cpu().numpy()
    missed = (logits.argmax(-1).cpu() != torch.tensor(ref_ids)).numpy()
    return h.astype(np.float64), missed.astype(np.float64)


def fit_logistic(x: np.ndarray, y: np.ndarray, iterations: int = 50) -> tuple[float, float]:
    """(intercept, slope) of a logistic regression of ``y`` on ``x`` with balanced class weights (Newton)."""
    positives = float(y.sum())
    negatives = float(len(y) - positives)
    if positives == 0 or negatives == 0:
        raise ValueError("calibration needs positions of both kinds (top-ranked and not)")
    w = np.where(y > 0, len(y) / (2 * positives), len(y) / (2 * negatives))
    design = np.stack([np.ones_like(x), x], axis=1)
    beta = np.zeros(2)
    for _ in range(iterations):
        p = 1 / (1 + np.exp(-design @ beta))
        gradient = design.T @ (w * (y - p))
        hessian = (design * (w * p * (1 - p))[:, None]).T @ design + 1e-9 * np.eye(2)
        step = np.linalg.solve(hessian, gradient)
        beta += step
        if np.abs(step).max() < 1e-10:
            break
    return float(beta[0]), float(beta[1])


def calibrate_from(entropies: Sequence[np.ndarray], labels: Sequence[np.ndarray], seed: int = 0) -> Calibration:
    """τ from per-task teacher-forced entropies and labels (tasks split 4:1 for fit and cut)."""
    order = list(range(len(entropies)))
    random.Random(seed).shuffle(order)
    held = set(order[: max(1, len(order) // 5)])
    fit_x = np.concatenate([entropies[i] for i in order if i not in held])
    fit_y = np.concatenate([labels[i] for i in order if i not in held])
    test_x = np.concatenate([entropies[i] for i in sorted(held)])
    test_y = np.concatenate([labels[i] for i in sorted(held)])
    a, b = fit_logistic(fit_x, fit_y)
    if b <= 0:
        raise ValueError(f"entropy does not predict misses on these data (slope {b:.3g})")
    probs = 1 / (1 + np.exp(-(a + b * test_x)))
    cuts = np.unique(probs)
    accuracy = [float(((probs >= c) == (test_y > 0)).mean()) for c in cuts]
    best = int(np.argmax(accuracy))
    cut = float(cuts[best])
    cut = min(max(cut, 1e-12), 1 - 1e-12)
    tau = max(0.0, (math.log(cut / (1 - cut)) - a) / b)
    all_x = np.concatenate(list(entropies))
    all_y = np.concatenate(list(labels))
    return Calibration(tau, cut, a, b, accuracy[best], len(all_x), float(all_y.mean()),
                       float((all_x >= tau).mean()))


def calibrate(model: Any, tokenizer: Any, examples: Sequence[tuple[str, str]], seed: int = 0,
              use_chat: bool = True) -> Calibration:
    """Teacher-force ``examples`` ((request, reference) pairs) and learn τ."""
    entropies, labels = [], []
    for request, reference in examples:
        prompt = chat_prompt(tokenizer, request) if use_chat and getattr(tokenizer, "chat_template", None) else request
        h, y = teacher_force(model, tokenizer, prompt, reference)
        entropies.append(h)
        labels.append(y)
    return calibrate_from(entropies, labels, seed)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="codemask calibrate-adadec", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="smollm2", help="smollm2 | qwen-coder | gemma3 | a model folder")
    parser.add_argument("--data", type=Path, required=True,
                        help="MBPP JSON lines, e.g. $CODEMASK_DATA/mbpp/mbpp.jsonl (its train split is used)")
    parser.add_argument("--limit", type=int, default=0, help="use only the first N train tasks (0: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, help="threshold file (default $CODEMASK_HOME/adadec_thresholds.json)")


def run(args: argparse.Namespace) -> int:
    from codemask.cli import _load

    model, tokenizer = _load(args.model)
    examples = mbpp_examples(args.data)
    if args.limit:
        examples = examples[: args.limit]
    result = calibrate(model, tokenizer, examples, seed=args.seed)
    path = store_threshold(model, result.threshold, {**result.details(), "tasks": len(examples),
                                                      "data": "mbpp train 601-974"}, args.output)
    print(f"{model_identity(model)}: tau = {result.threshold:.4f} nats (cut {result.cut:.3f}, held-out accuracy "
          f"{result.heldout_accuracy:.3f}, {result.positions} positions, {result.positive_rate:.1%} not top-ranked, "
          f"{result.pause_rate:.1%} at or above tau) -> {path}")
    return 0
