"""AdaDec's settings and where its entropy threshold τ comes from.

τ is per model: :mod:`codemask.adadec.calibrate` learns it from reference solutions and stores it
under the model's identity (:func:`model_identity`); ``AdaDec()`` (no ``threshold``) loads it, and
``AdaDec(threshold=τ)`` overrides it. Thresholds shipped with codemask are :data:`SHIPPED_THRESHOLDS`
(learned on MBPP's train split for the packaged models); ones a user calibrates go to
``$CODEMASK_HOME/adadec_thresholds.json`` and win.
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

SHIPPED_THRESHOLDS: dict[str, dict[str, Any]] = {
    # `codemask calibrate-adadec --model smollm2` (all 374 MBPP train tasks)
    "llama-v49152-h576-l30-i1536": {
        "threshold": 1.4807, "cut": 0.6468, "heldout_accuracy": 0.7736, "positions": 25305, "pause_rate": 0.2428,
        "tasks": 374, "data": "mbpp train 601-974",
    },
    # `codemask calibrate-adadec --model qwen-coder --limit 100` (the first 100 train tasks)
    "qwen2-v151936-h896-l24-i4864": {
        "threshold": 0.8792, "cut": 0.6448, "heldout_accuracy": 0.8167, "positions": 5859, "pause_rate": 0.2232,
        "tasks": 100, "data": "mbpp train 601-974",
    },
}
"""τ learned by ``codemask calibrate-adadec`` for the packaged models, by :func:`model_identity`."""
FALLBACK_THRESHOLD = 1.0
"""τ in nats for a model nobody calibrated (a warning says so): roughly where the packaged models' learned τ lie."""


@dataclass(frozen=True)
class AdaDec:
    """Uncertainty-guided pause-and-rerank (AdaDec): where the next-token entropy reaches τ, look ahead.

    Attributes:
        threshold: τ in nats; ``None`` loads the model's calibrated τ (``codemask calibrate-adadec``).
            ``0`` pauses at every step, ``math.inf`` never (plain decoding).
        beam: how many top candidates a pause compares (B).
        lookahead: greedy tokens rolled out after each candidate (L), or ``"line"``: up to the end of
            the line (the token holding the newline included), at most ``max_lookahead`` tokens.
        max_lookahead: the cap of ``lookahead="line"``.
        reuse_lookahead: with greedy decoding, commit the chosen candidate's rollout tokens that plain
            AdaDec would pick next anyway (greedy picks where the entropy stayed below τ) together
            with the candidate, so they cost one forward pass instead of one each. The output is the
            same; ``False`` recomputes them (for comparison).
    """

    threshold: float | None = None
    beam: int = 3
    lookahead: int | Literal["line"] = 5
    max_lookahead: int = 10
    reuse_lookahead: bool = True

    def __post_init__(self) -> None:
        if self.threshold is not None and (math.isnan(self.threshold) or self.threshold < 0):
            raise ValueError(f"threshold must be a non-negative entropy in nats, got {self.threshold}")
        if self.beam < 1:
            raise ValueError(f"beam must be >= 1, got {self.beam}")
        if self.lookahead != "line" and (not isinstance(self.lookahead, int) or self.lookahead < 0):
            raise ValueError(f"lookahead must be a number of tokens >= 0 or 'line', got {self.lookahead!r}")
        if self.max_lookahead < 1:
            raise ValueError(f"max_lookahead must be >= 1, got {self.max_lookahead}")

    @property
    def lookahead_tokens(self) -> int:
        """The most tokens a rollout takes after its candidate."""
        return self.max_lookahead if self.lookahead == "line" else int(self.lookahead)

    def threshold_for(self, model: Any) -> float:
        """τ for ``model``: the explicit ``threshold``, else the calibrated one, else the fallback (warned)."""
        if self.threshold is not None:
            return float(self.threshold)
        stored = load_threshold(model)
        if stored is not None:
            return stored
        warnings.warn(f"AdaDec: no calibrated threshold for {model_identity(model)}; using {FALLBACK_THRESHOLD} "
                      "nats (run `codemask calibrate-adadec` or pass AdaDec(threshold=...))", stacklevel=3)
        return FALLBACK_THRESHOLD


def model_identity(model: Any) -> str:
    """A key for a model's thresholds: its architecture and sizes (weights of another dtype share it)."""
    config = getattr(model, "config", None)
    if config is None:
        return type(model).__name__
    parts = [str(getattr(config, "model_type", type(model).__name__))]
    for name, tag in (("vocab_size", "v"), ("hidden_size", "h"), ("num_hidden_layers", "l"),
                      ("intermediate_size", "i")):
        value = getattr(config, name, None)
        if value is None and hasattr(config, "get_text_config"):
            value = getattr(config.get_text_config(), name, None)
        parts.append(f"{tag}{value}")
    return "-".join(parts)


def user_thresholds_path() -> Path:
    from codemask.assets import codemask_home

    return codemask_home() / "adadec_thresholds.json"


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def load_threshold(model: Any) -> float | None:
    """The stored τ of ``model`` (user calibration first, then the shipped one), or None."""
    key = model_identity(model)
    for table in (_read(user_thresholds_path()), SHIPPED_THRESHOLDS):
        entry = table.get(key)
        if isinstance(entry, dict) and isinstance(entry.get("threshold"), int | float):
            return float(entry["threshold"])
    return None


def store_threshold(model: Any, threshold: float, details: dict[str, Any], path: Path | None = None) -> Path:
    """Record ``threshold`` (and how it was learned) under the model's identity; returns the file."""
    path = path or user_thresholds_path()
    data = _read(path)
    data[model_identity(model)] = {"threshold": threshold, **details}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path
