"""Whether a CPU forward pass over 2 or 3 rows is cheaper padded to 4 rows — measured on this machine.

AdaDec's rollouts decode a few rows at once. On a CPU, MKL picks its sgemm kernel by the number of
rows, and which choice wins depends on the processor: on one machine this project ran on (AVX-512
without AMX) a Qwen2.5-0.5B step cost 1.0 / 2.0 / 2.7 / 1.8 one-row steps for 1 / 2 / 3 / 4 rows,
so 2-3-row branches were worth padding to 4; on another (with AMX) it costs 1.00 / 1.05 / 1.09 / 1.93
(``benchmarks/cpu_batch_cost.py``), where padding would nearly double their cost. A constant cannot
be right for both, so the choice is measured once per process, weight shape, dtype and thread count:
the model's largest projection (not the LM head, whose 150k rows would make the measurement slow) is
timed for 1-4 rows, in under 50 ms for Qwen. On the AMX machine that one product shows the whole
step's curve (0.65 / 0.66 / 0.66 / 1.27 ms for Qwen's 4864×896 up-projection); the other machine
was not available to check it on.
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.nn.functional as F

BLOCKED_ROWS = 4
_REPEATS = 9
_projection_times: dict[tuple[tuple[int, ...], torch.dtype, int], dict[int, float]] = {}


def padded_rows(model: Any, rows: int, device: torch.device) -> int:
    """How many rows a branch of ``rows`` rows should run with: ``BLOCKED_ROWS`` where a product of
    that many rows is measured faster than one of ``rows`` (2 or 3, on a CPU), else ``rows``."""
    if device.type != "cpu" or not 1 < rows < BLOCKED_ROWS:
        return rows
    times = projection_times(model)
    return BLOCKED_ROWS if times is not None and times[BLOCKED_ROWS] < times[rows] else rows


def projection_times(model: Any) -> dict[int, float] | None:
    """The fastest of a few timings, in seconds, of the model's largest non-head projection for 1-4
    input rows (None when the model has no linear layer to time); measured once per process and key."""
    weight = _largest_projection(model)
    if weight is None:
        return None
    key = (tuple(weight.shape), weight.dtype, torch.get_num_threads())
    if key not in _projection_times:
        _projection_times[key] = {n: _fastest_product(weight, n) for n in range(1, BLOCKED_ROWS + 1)}
    return _projection_times[key]


def _largest_projection(model: Any) -> torch.Tensor | None:
    output = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    weights = [m.weight for m in model.modules()
               if isinstance(m, torch.nn.Linear) and m is not output and m.weight.dim() == 2]
    return max(weights, key=lambda w: w.numel()) if weights else None


def _fastest_product(weight: torch.Tensor, rows: int) -> float:
    """The minimum (the least disturbed by other processes) over a few timed products."""
    inputs = torch.randn(rows, weight.shape[1], dtype=weight.dtype, device=weight.device)
    fastest = float("inf")
    with torch.inference_mode():
        for attempt in range(_REPEATS + 2):  # two warm-ups
            started = time.perf_counter()
            F.linear(inputs, weight)
            if attempt >= 2:
                fastest = min(fastest, time.perf_counter() - started)
    return fastest
