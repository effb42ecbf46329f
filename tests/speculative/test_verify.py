"""Draft lengths and pass costs: how long the next draft is, from acceptance and measured pass times.

(Which drafted tokens a pass confirms is the selector's race, tested with the sampling and against
plain decoding with the packaged model in ``test_speculative_generate``.)"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from codemask.speculative.verify import DraftLength, PassCost


def _linear(per_token: float) -> Callable[[int], float]:
    """A pass time for DraftLength.choose that grows by ``per_token`` one-token passes per drafted token."""
    return lambda k: 1.0 + per_token * k


def test_draft_length_follows_acceptance_and_cost() -> None:
    length = DraftLength(maximum=16)
    assert length.choose(_linear(0.1)) <= 4  # no evidence yet: short drafts
    for _ in range(6):
        length.update(8, 8)
    assert length.choose(_linear(0.1)) == 16  # long confirmed runs: the maximum
    assert length.choose(_linear(0.0)) == 16 and length.choose(_linear(1.0)) < 16  # a costly width drafts less
    for _ in range(6):
        length.update(4, 0)
    assert length.choose(_linear(0.1)) == 1  # drafts keep failing: the minimum
    length.update(0, 0)
    assert length.choose(_linear(0.1)) == 1


def test_draft_length_stops_before_a_step_in_the_pass_time() -> None:
    """A CPU curve like one measured here: widths 1-3 nearly free, 4 and up about twice the cost."""
    step = {0: 1.0, 1: 1.05, 2: 1.11}
    length = DraftLength(maximum=8)
    for _ in range(3):
        length.update(4, 2)  # about half the drafts confirmed
    assert length.choose(lambda k: step.get(k, 1.9 + 0.1 * k)) == 2
    assert length.choose(_linear(0.1)) > 2  # the same acceptance with a linear cost drafts further


def test_pass_cost_is_learnt_per_width() -> None:
    cost = PassCost(prior=0.25)
    assert cost.estimate(1) == 1.0 and cost.estimate(5) == 2.0  # nothing measured: the prior's ratios
    for width, seconds in ((1, 0.10), (1, 0.10), (3, 0.11), (3, 0.11), (4, 0.20), (4, 0.20)):
        cost.record(width, seconds)
    cost.record(4, 9.0)  # a pass slowed down by another process: the median ignores it
    assert cost.estimate(3) == 0.11 and cost.estimate(4) == 0.20  # measured: not linear
    assert abs(cost.estimate(2) - (0.10 + 0.25 * 0.10)) < 1e-12  # from the narrower width measured
    assert abs(cost.estimate(6) - (0.20 + 2 * 0.25 * 0.10)) < 1e-12
    cost.record(5, 0.3)
    assert abs(cost.estimate(5) - (0.20 + 0.25 * 0.10)) < 1e-12  # one pass is not yet a measurement


@pytest.mark.parametrize("arguments", [{"prior": -0.1}, {"samples": 0}, {"samples": 4, "window": 3}])
def test_pass_cost_refuses_settings_it_cannot_learn_with(arguments: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="prior >= 0"):
        PassCost(**arguments)  # type: ignore[arg-type]
