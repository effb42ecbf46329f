"""``codemask.__version__`` is the installed distribution's version, written in one place."""

from __future__ import annotations

import importlib.metadata
import re

import codemask


def test_the_version_is_the_installed_distributions() -> None:
    assert codemask.__version__ == importlib.metadata.version("codemask")


def test_the_version_is_a_release_number() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+((a|b|rc)\d+)?(\.dev\d+)?", codemask.__version__)
