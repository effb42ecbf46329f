"""Where the optional full corpora live: ``$CODEMASK_DATA`` (default ``../shared/data`` beside the
repository). Tests that need a corpus skip with one line saying which, where it is absent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

DEFAULT = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def data_root() -> Path:
    return Path(os.environ.get("CODEMASK_DATA") or DEFAULT)


def shared_data(name: str) -> Path:
    """The corpus folder ``name`` under the data root; skips the calling test when it is absent."""
    path = data_root() / name
    if not path.exists():
        pytest.skip(f"corpus {name!r} not found in {data_root()} (set CODEMASK_DATA)")
    return path
