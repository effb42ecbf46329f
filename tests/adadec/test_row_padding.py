"""Row padding for AdaDec's branches follows what this machine's BLAS measures, not a constant."""

from __future__ import annotations

from typing import Any

import torch

from codemask.adadec import row_padding
from codemask.adadec.row_padding import BLOCKED_ROWS, padded_rows, projection_times


def test_padding_follows_the_measured_products(smollm2: tuple[Any, Any]) -> None:
    model, _ = smollm2
    times = projection_times(model)
    assert times is not None and sorted(times) == [1, 2, 3, 4] and all(t > 0 for t in times.values())
    cpu = torch.device("cpu")
    for rows in (2, 3):
        expected = BLOCKED_ROWS if times[BLOCKED_ROWS] < times[rows] else rows
        assert padded_rows(model, rows, cpu) == expected
    assert padded_rows(model, 1, cpu) == 1 and padded_rows(model, 5, cpu) == 5  # only 2-3 rows are padded
    assert padded_rows(model, 2, torch.device("meta")) == 2  # not on an accelerator


def test_the_projection_is_timed_once_per_shape(smollm2: tuple[Any, Any]) -> None:
    model, _ = smollm2
    first = projection_times(model)
    assert projection_times(model) is first  # measured once per process
    largest = max((m.weight for name, m in model.named_modules()
                   if isinstance(m, torch.nn.Linear) and name != "lm_head"), key=lambda w: w.numel())
    assert (tuple(largest.shape), largest.dtype, torch.get_num_threads()) in row_padding._projection_times


def test_a_model_without_projections_is_never_padded() -> None:
    model = torch.nn.Sequential(torch.nn.ReLU())
    assert projection_times(model) is None
    assert padded_rows(model, 3, torch.device("cpu")) == 3
