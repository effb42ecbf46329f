"""AdaDec without a model: entropy against a numpy oracle, the pause rule, settings, threshold storage, calibration."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from codemask.adadec import AdaDec, AdaDecSelector, entropy, load_threshold, model_identity, store_threshold
from codemask.adadec.calibrate import calibrate_from, fit_logistic
from codemask.decoding.pipeline import StepLayout
from codemask.decoding.sampling import SamplingParams, SamplingSelector


def numpy_entropy(z: np.ndarray) -> np.ndarray:
    z = z.astype(np.float64)
    finite = np.isfinite(z)
    shifted = np.where(finite, z - np.max(np.where(finite, z, -np.inf), axis=-1, keepdims=True), -np.inf)
    p = np.exp(shifted)
    p /= p.sum(axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, p * np.log(p), 0.0)
    return -terms.sum(axis=-1)


def test_entropy_matches_numpy_oracle_with_masked_tokens() -> None:
    rng = np.random.default_rng(0)
    z = rng.normal(scale=3.0, size=(16, 5000)).astype(np.float32)
    z[rng.random(z.shape) < 0.7] = -np.inf  # a grammar mask
    z[3, :] = -np.inf
    z[3, 17] = 4.0  # one allowed token: entropy 0
    got = entropy(torch.from_numpy(z)).numpy()
    np.testing.assert_allclose(got, numpy_entropy(z), rtol=1e-4, atol=1e-5)
    assert got[3] == 0.0
    assert not np.isnan(got).any()


def test_entropy_extremes_and_scale() -> None:
    uniform = torch.zeros(2, 1000)
    np.testing.assert_allclose(entropy(uniform).numpy(), math.log(1000), rtol=1e-5)
    two = torch.full((1, 10), -math.inf)
    two[0, 2] = two[0, 7] = 3.0
    assert entropy(two).item() == pytest.approx(math.log(2), abs=1e-6)  # nats, not bits
    peaked = torch.tensor([[100.0, 0.0, 0.0]])
    assert entropy(peaked).item() < 1e-30 + 1e-6


def test_pause_rule_is_entropy_at_or_above_threshold() -> None:
    logits = torch.full((4, 8), -math.inf)
    logits[0, 0] = 1.0  # H = 0
    logits[1, :2] = 0.0  # H = ln 2
    logits[2, :4] = 0.0  # H = ln 4
    logits[3] = 0.0  # H = ln 8
    base = SamplingSelector(SamplingParams())

    def paused(threshold: float) -> list[int]:
        sel = AdaDecSelector(AdaDec(threshold=threshold), threshold, base, [], [b"x"] * 8, [], 4)
        return sel.paused_rows(logits).tolist()

    assert paused(0.0) == [0, 1, 2, 3]
    assert paused(math.log(2)) == [1, 2, 3]  # "at or above"
    assert paused(math.log(2) + 1e-4) == [2, 3]
    assert paused(math.log(8) + 1e-4) == []
    assert paused(math.inf) == []


def test_no_pause_returns_the_base_choice_without_a_model() -> None:
    logits = torch.tensor([[0.0, 5.0, 1.0], [3.0, 0.0, -1.0]])
    sel = AdaDecSelector(AdaDec(threshold=10.0), 10.0, SamplingSelector(SamplingParams()), [], [b"a", b"b", b"c"],
                         [], 2)
    assert sel.select(logits, StepLayout.one_row_per_sequence([0, 1])).tolist() == [1, 0]
    assert sel.pauses == [0, 0]
    paused = AdaDecSelector(AdaDec(threshold=0.0), 0.0, SamplingSelector(SamplingParams()), [], [b"a", b"b", b"c"],
                            [], 2)
    with pytest.raises(RuntimeError, match="attach"):  # a pause needs the loop's KV cache
        paused.select(logits, StepLayout.one_row_per_sequence([0, 1]))


def test_line_lookahead_ends_after_a_rollout_newline() -> None:
    vocab = [b"a", b"b\n", b"\n", b"<eos>"]
    sel = AdaDecSelector(AdaDec(threshold=0.0, lookahead="line"), 0.0, SamplingSelector(SamplingParams()), [],
                         vocab, [3], 1)
    assert sel._continues(2, candidate=True)  # the candidate's newline starts the line looked at
    assert sel._continues(0, candidate=False)
    assert not sel._continues(1, candidate=False)
    assert not sel._continues(3, candidate=True)
    fixed = AdaDecSelector(AdaDec(threshold=0.0, lookahead=5), 0.0, SamplingSelector(SamplingParams()), [], vocab,
                           [3], 1)
    assert fixed._continues(1, candidate=False) and not fixed._continues(3, candidate=False)


def test_settings_are_validated() -> None:
    for bad in ({"threshold": -1.0}, {"threshold": math.nan}, {"beam": 0}, {"lookahead": -1}, {"lookahead": "x"},
                {"max_lookahead": 0}):
        with pytest.raises(ValueError):
            AdaDec(**bad)  # type: ignore[arg-type]
    assert AdaDec(lookahead="line").lookahead_tokens == 10
    assert AdaDec().lookahead_tokens == 5 and AdaDec().beam == 3


class _Config:
    model_type = "llama"
    vocab_size = 49152
    hidden_size = 576
    num_hidden_layers = 30
    intermediate_size = 1536


class _Model:
    config = _Config()


def test_thresholds_are_stored_by_model_identity(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("CODEMASK_HOME", str(tmp_path))
    model = _Model()
    assert model_identity(model) == "llama-v49152-h576-l30-i1536"
    assert load_threshold(model) is None or isinstance(load_threshold(model), float)  # maybe shipped
    store_threshold(model, 0.8125, {"cut": 0.5})
    assert load_threshold(model) == 0.8125
    assert AdaDec().threshold_for(model) == 0.8125
    assert AdaDec(threshold=2.0).threshold_for(model) == 2.0  # explicit wins


def test_logistic_fit_recovers_parameters() -> None:
    rng = np.random.default_rng(1)
    x = rng.uniform(0, 4, 40000)
    y = (rng.random(x.size) < 1 / (1 + np.exp(-(-3.0 + 1.5 * x)))).astype(float)
    a, b = fit_logistic(x, y)
    # balanced weights shift the intercept by log(n_neg / n_pos) and leave the slope
    shift = math.log((y.size - y.sum()) / y.sum())
    assert b == pytest.approx(1.5, rel=0.06)
    assert a == pytest.approx(-3.0 + shift, abs=0.15)


def test_calibration_finds_the_entropy_that_separates_the_labels() -> None:
    rng = np.random.default_rng(2)
    entropies, labels = [], []
    for _ in range(50):
        h = rng.uniform(0, 4, 200)
        y = (h > 2.0).astype(float)
        flip = rng.random(h.size) < 0.05
        entropies.append(h)
        labels.append(np.where(flip, 1 - y, y))
    result = calibrate_from(entropies, labels)
    assert result.threshold == pytest.approx(2.0, abs=0.15)
    assert result.heldout_accuracy > 0.9
    assert result.pause_rate == pytest.approx(0.5, abs=0.05)
