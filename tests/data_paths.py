"""Where the tests and benchmarks find their data: one folder in the repository, one setting outside it.

- ``tests/data/`` holds the small inputs the default test run needs (grammars, a sample of JSONSchemaBench,
  a few JSON Schema Test Suite files, a few MBPP tasks), each with its licence: ``tests/data/README.md``.
- The full corpora (JSONSchemaBench, the whole JSON Schema Test Suite, HumanEval+, MBPP, CodeRepetEval) are
  optional inputs of the benchmarks and of the extended tests. They are found in one folder, the
  environment variable ``CODEMASK_DATA``, by default ``../shared/data`` beside the repository. A test that
  needs a corpus that is not there is skipped with a one-line reason; CI, which has them, runs it.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEST_DATA = ROOT / "tests" / "data"
ENV = "CODEMASK_DATA"


def corpora_root() -> Path:
    """The folder of the full corpora: ``$CODEMASK_DATA``, else ``../shared/data`` beside the repository."""
    configured = os.environ.get(ENV)
    return Path(configured) if configured else ROOT.parent / "shared" / "data"


def corpus(name: str) -> Path:
    """The full corpus ``name`` (a path under the corpora folder, e.g. ``"jsonschemabench"``).

    Raises FileNotFoundError naming the setting when it is absent (what a benchmark wants)."""
    path = corpora_root() / name
    if not path.exists():
        raise FileNotFoundError(f"{name} not found under {corpora_root()}: set {ENV} to the folder of the full corpora")
    return path


def corpus_or_skip(name: str) -> Path:
    """The full corpus ``name``, or skip the calling test with one line saying what is missing."""
    import pytest

    try:
        return corpus(name)
    except FileNotFoundError as missing:
        pytest.skip(str(missing))
