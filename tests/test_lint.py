"""The code base stays `ruff` and `mypy` clean (the standards in CONTRIBUTING.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_is_clean() -> None:
    done = _run("ruff", "check", "src", "tests", "benchmarks", "examples", "scripts", "docs")
    assert done.returncode == 0, done.stdout[-3000:]


def test_mypy_is_clean() -> None:
    done = _run("mypy")
    assert done.returncode == 0, done.stdout[-3000:]
