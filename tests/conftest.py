"""Session fixtures shared across the test tree: the packaged models, loaded once."""

from __future__ import annotations

import importlib.util
import os
from typing import Any

import pytest

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch starts its threads: no spinning on a shared CPU
os.environ.setdefault("HF_HUB_OFFLINE", "1")

# tests/integrations need vLLM's modules, installed in .venv-vllm (scripts/test.sh runs them there)
collect_ignore = [] if importlib.util.find_spec("vllm") else ["integrations"]


@pytest.fixture(scope="session")
def smollm2() -> tuple[Any, Any]:
    """SmolLM2-135M-Instruct and its tokenizer (installed by scripts/setup.sh)."""
    from codemask import assets

    return assets.load_model("smollm2"), assets.load_tokenizer("smollm2")


def chat(tokenizer: Any, request: str) -> str:
    """A user request in the model's chat template."""
    messages = [{"role": "user", "content": request}]
    return str(tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))
